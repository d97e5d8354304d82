"""The sweep directory: unique per sweep (docs/cases.md#p09), described by ``sweep.json``, never reused by accident.

``hydra.sweep.dir`` defaults to ``multirun/<date>_<time>_${sweeper_id:}``: the time is for people, the id (6 random
hex digits, fixed for the process and its children) keeps two sweeps started in the same second apart. Pointing
``hydra.sweep.dir`` at an existing sweep directory resumes it: its ``sweep.json`` (and so its sweep id) is kept and
points that already have a final result are not run again.

:class:`SweepDir` is the one reader of a sweep directory: its sweep id, ``sweep.json``, ``submitted.json``, its point
folders and records, and whether a point is final. Every file name of a sweep is defined here, once::

    <sweep_dir>/
      sweep.json                  # SWEEP_FILE: sweep id, start time, command line, mode, n_points, W&B settings
      search.json                 # SEARCH_FILE: search=frontier's log (grid, predictions, decisions, cost)
      submitted.json              # SUBMITTED_FILE: points submitted to SLURM -> job id(s), overrides, spec
      points/<point_id>/          # POINTS_DIR: one folder per point
        result.json               # RESULT_FILE: the point's record (sweeper.results.record)
        spec.json                 # SPEC_FILE: the full point spec, written before the ranks start
        ...                       # what the ranks and the launcher leave there (named by their owners:
                                  #   rank<r>.json, rank<r>.step: sweeper.results.ranks; ranks.log:
                                  #   sweeper.launchers.local; device_budget.json: sweeper.point.device_budget;
                                  #   batch_search.json: sweeper.point.batch_search; trainer_run.json:
                                  #   sweeper.results.trainer_run; traces: sweeper.job)
      results.csv, results.parquet, report.md, report.html, frontier.png   # the report (sweeper.report.build)
      wandb/                      # WANDB_DIR: the W&B runs (offline-run-*), sweeper-runs.json, sweeper-tracking.log
      wandb_report.json           # WANDB_REPORT_FILE: the W&B comparison report (sweeper.wandb_report)
      slurm/<job_id>/             # SLURM_DIR: submitit's files of each SLURM job

The layout and the JSON keys are those of every earlier version: an old sweep directory reports and resumes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from sweeper.results.atomic import write_json_atomic
from sweeper.results.record import FINAL_STATUSES, Record, RecordNotWritten, read_record

#: The sweep's own record (:func:`open_sweep`): ``sweep_id``, ``created_at``, ``mode``, ``n_points``, ``command``,
#: ``overrides``, ``resumed``, ``wandb``.
SWEEP_FILE = "sweep.json"
#: The points submitted to SLURM: ``{point_id: {"job_id", "overrides", "spec", "replay", "submitted_at",
#: "attempts"}}`` (:meth:`SweepDir.add_submitted`, read by :mod:`sweeper.launchers.slurm.accounting`).
SUBMITTED_FILE = "submitted.json"
#: What SLURM last said of each submitted point still waiting: ``{point_id: {"job_id", "state", "reason",
#: "asked_at"}}`` (:meth:`SweepDir.set_queue`, written by :func:`sweeper.launchers.slurm.accounting.reconcile`).
QUEUE_FILE = "queue.json"
#: The frontier search's log (:mod:`sweeper.search`): the grid, the prediction each point was launched on, the
#: decisions, the stop reason and the point-seconds; derived from the records, read leniently.
SEARCH_FILE = "search.json"
#: The folder of the point folders, ``points/<point_id>/``.
POINTS_DIR = "points"
#: A point's record (:class:`sweeper.results.record.Record`); an earlier one set aside is ``result.<n>.json``.
RESULT_FILE = "result.json"
#: A point's full spec (:meth:`sweeper.config.spec.PointSpec.to_dict`), written when it is prepared.
SPEC_FILE = "spec.json"
#: The report (:func:`sweeper.report.build.build_report`): the table of every point, the document, the plot.
RESULTS_CSV = "results.csv"
RESULTS_PARQUET = "results.parquet"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
FRONTIER_PNG = "frontier.png"
#: The W&B folder (wandb's own ``<dir>/wandb/``): the offline runs, the manifest and the writer's log.
WANDB_DIR = "wandb"
#: Inside :data:`WANDB_DIR`: which run was written for each point (:mod:`sweeper.tracking.manifest`).
WANDB_MANIFEST = "sweeper-runs.json"
#: Inside :data:`WANDB_DIR`: the stderr of the runs writer (:class:`sweeper.tracking.RunsWriter`).
TRACKING_LOG = "sweeper-tracking.log"
#: The W&B comparison report's specification (:mod:`sweeper.wandb_report`).
WANDB_REPORT_FILE = "wandb_report.json"
#: submitit's folders, ``slurm/<job_id>/`` (:mod:`sweeper.launchers.slurm`).
SLURM_DIR = "slurm"

#: The environment variable that carries the sweep id to every process of one sweep.
SWEEP_ID_ENV = "SWEEPER_SWEEP_ID"


@dataclass(frozen=True)
class SweepDir:
    """A sweep directory and everything read from it (see the module doc for its layout).

    ``SweepDir(path)`` reads nothing until asked; every reader goes to disk each time it is called (a sweep changes
    while it runs), except the sweep id, derived once.

    Attributes:
        path: the directory, as given (not resolved: paths shown to people keep the form they were given in).
        given_id: the sweep id when the caller already knows it (a SLURM job's payload, a test); None: derived
            from the directory (:attr:`sweep_id`).
    """

    path: Path
    given_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, where: SweepDir | Path | str) -> SweepDir:
        """``where`` itself when it is a :class:`SweepDir`, else the sweep directory at that path."""
        return where if isinstance(where, SweepDir) else cls(Path(where))

    def resolved(self) -> SweepDir:
        """The same sweep with an absolute, resolved path (what a SLURM job is sent) and its id fixed."""
        return SweepDir(self.path.resolve(), self.sweep_id)

    # -- the sweep id -------------------------------------------------------------------------------------------

    @cached_property
    def sweep_id(self) -> str:
        """The sweep's id, derived once, by one rule:

        1. :attr:`given_id`, when given;
        2. ``sweep.json``'s ``sweep_id`` (every sweep opened by :func:`open_sweep` has one);
        3. else the ``sweep_id`` of its first record (by point id) that has one: a directory whose ``sweep.json``
           is missing (not written on a full disk, removed by hand) still names the sweep its points ran in;
        4. else the directory's name (absolute: ``.`` is the name of the working directory).
        """
        if self.given_id is not None:
            return self.given_id
        found = self.info().get("sweep_id")
        if found:
            return str(found)
        for path in sorted(self.points_dir.glob(f"*/{RESULT_FILE}")):
            try:
                found = (_json_object(path) or {}).get("sweep_id")
            except (OSError, ValueError):
                continue
            if found:
                return str(found)
        return Path(os.path.abspath(self.path)).name

    # -- files ---------------------------------------------------------------------------------------------------

    @property
    def sweep_file(self) -> Path:
        """``<sweep_dir>/sweep.json``."""
        return self.path / SWEEP_FILE

    @property
    def submitted_file(self) -> Path:
        """``<sweep_dir>/submitted.json``."""
        return self.path / SUBMITTED_FILE

    @property
    def queue_file(self) -> Path:
        """``<sweep_dir>/queue.json``."""
        return self.path / QUEUE_FILE

    @property
    def search_file(self) -> Path:
        """``<sweep_dir>/search.json`` (``search=frontier`` only)."""
        return self.path / SEARCH_FILE

    @property
    def points_dir(self) -> Path:
        """``<sweep_dir>/points``: a folder exists here for every point that was prepared or recorded."""
        return self.path / POINTS_DIR

    @property
    def wandb_dir(self) -> Path:
        """``<sweep_dir>/wandb``."""
        return self.path / WANDB_DIR

    @property
    def slurm_dir(self) -> Path:
        """``<sweep_dir>/slurm``: submitit's ``<job_id>/`` folders."""
        return self.path / SLURM_DIR

    @property
    def results_csv(self) -> Path:
        """``<sweep_dir>/results.csv``: every point, every column of :mod:`sweeper.results.row`."""
        return self.path / RESULTS_CSV

    @property
    def results_parquet(self) -> Path:
        """``<sweep_dir>/results.parquet``: the same rows, typed."""
        return self.path / RESULTS_PARQUET

    @property
    def report_md(self) -> Path:
        """``<sweep_dir>/report.md``."""
        return self.path / REPORT_MD

    @property
    def report_html(self) -> Path:
        """``<sweep_dir>/report.html``."""
        return self.path / REPORT_HTML

    @property
    def frontier_png(self) -> Path:
        """``<sweep_dir>/frontier.png`` (only with enough ``ok`` points)."""
        return self.path / FRONTIER_PNG

    @property
    def wandb_report_file(self) -> Path:
        """``<sweep_dir>/wandb_report.json``."""
        return self.path / WANDB_REPORT_FILE

    def slurm_job_dir(self, job_id: str) -> Path:
        """submitit's folder of one SLURM job, ``<sweep_dir>/slurm/<job_id>``."""
        return self.slurm_dir / job_id

    def point(self, point_id: str) -> Path:
        """The folder of one point, ``<sweep_dir>/points/<point_id>``."""
        return self.points_dir / point_id

    def result_path(self, point_id: str) -> Path:
        """A point's record, ``<sweep_dir>/points/<point_id>/result.json``."""
        return self.point(point_id) / RESULT_FILE

    def is_sweep(self) -> bool:
        """Whether the directory holds a ``points/`` folder (what every CLI checks before reading)."""
        return self.points_dir.is_dir()

    def not_a_sweep(self) -> str | None:
        """Why this folder cannot be read as a sweep, in one clause every CLI that reads one prints after its name
        (``python -m sweeper.report``, ``.status``, ``.wandb_report``, ``.tracking``), or None when it can."""
        if self.path.exists() and not self.path.is_dir():
            return f"{self.path} is a file, not a sweep directory"
        if not self.path.is_dir():
            return f"sweep directory {self.path} does not exist"
        if not self.is_sweep():
            return f"{self.path} has no {POINTS_DIR}/ folder; is it a sweep directory?"
        return None

    # -- sweep.json ------------------------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """``sweep.json`` (see :func:`open_sweep` for its keys), or ``{}`` when there is none, it cannot be read, or it
        is not a JSON object: readers never fail on it (a report, a status, a W&B write of an old or damaged sweep).
        Creating and resuming it, which must not overwrite a damaged one, is :func:`open_sweep`'s."""
        try:
            return _json_object(self.sweep_file) or {}
        except (OSError, ValueError):
            return {}

    def search_path(self) -> list[str]:
        """The config folders the sweep's command line added (``sweep.json``'s ``search_path``; ``[]`` without):
        what each replay command carries besides the point's overrides."""
        value = self.info().get("search_path")
        return [str(v) for v in value] if isinstance(value, list) else []

    # -- submitted.json --------------------------------------------------------------------------------------------

    def submitted(self) -> dict[str, dict[str, Any]]:
        """``submitted.json``: ``{point_id: {"job_id", "overrides", "spec", "replay", "submitted_at", "attempts"}}``;
        ``{}`` when no point was submitted.

        Raises:
            ValueError: the file exists but is not a JSON object (the message names it): SLURM accounting and
                :meth:`add_submitted` must not act on a guess (a merge would drop every earlier job id); a reader
                that must not fail (collecting the records) catches it.
            OSError: the file exists but cannot be read.
        """
        return _json_object(self.submitted_file) or {}

    def add_submitted(self, entries: dict[str, dict[str, Any]]) -> None:
        """Merge ``entries`` (``{point_id: {"job_id", ...}}``) into ``submitted.json`` atomically; the earlier job ids
        of a point are kept in its ``attempts`` (the new one last)."""
        current = self.submitted()
        for pid, entry in entries.items():
            attempts = [*current.get(pid, {}).get("attempts", []), entry["job_id"]]
            current[pid] = {**entry, "attempts": attempts}
        write_json_atomic(self.submitted_file, current)

    def queue(self) -> dict[str, dict[str, Any]]:
        """``queue.json``: what SLURM last said of each submitted point still waiting (``{point_id: {"job_id",
        "state", "reason", "asked_at"}}``); ``{}`` when there is none or it cannot be read (it is only shown)."""
        try:
            return _json_object(self.queue_file) or {}
        except (OSError, ValueError):
            return {}

    def set_queue(self, entries: dict[str, dict[str, Any]]) -> None:
        """Replace ``queue.json`` with ``entries`` atomically (written only when it changes)."""
        if entries != self.queue():
            write_json_atomic(self.queue_file, entries)

    # -- points and records ----------------------------------------------------------------------------------------

    def final_status(self, point_id: str, rerun: set[str] | frozenset[str] = frozenset()) -> str | None:
        """Is this point final? Its record's status when it has a final one (:data:`FINAL_STATUSES`: it will not
        change any more, a resume skips it), else None (no record, or ``pending``).

        A final record whose status is in ``rerun`` (``launcher.rerun_statuses``, e.g. ``{"error", "timeout"}``) is
        set aside (:meth:`set_aside`) and None returned: the point runs again.

        Raises:
            ValueError: its ``result.json`` is not a valid record (the message names the file).
        """
        path = self.result_path(point_id)
        if not path.exists():
            return None
        status = read_record(path).status
        if status not in FINAL_STATUSES:
            return None
        if status in rerun:
            self.set_aside(point_id)
            return None
        return status

    def set_aside(self, point_id: str) -> None:
        """Move a point's ``result.json`` to ``result.<n>.json`` (the next free n): its history is kept, nothing is
        lost, and the point has no record any more (it runs again)."""
        path = self.result_path(point_id)
        n = len(list(path.parent.glob("result.*.json")))
        path.rename(path.parent / f"result.{n}.json")

    def read_record(self, point_id: str) -> Record:
        """A point's record.

        Raises:
            FileNotFoundError: it has none. ValueError: its ``result.json`` is not a valid record.
        """
        return read_record(self.result_path(point_id))

    def write_record(self, record: Record) -> Path:
        """Write a point's record to ``<sweep_dir>/points/<point_id>/result.json`` atomically; returns the path.

        Raises:
            FileExistsError: the point already has a final record (a finished point is never overwritten; delete
                its folder by hand to re-run it, or use ``launcher.rerun_statuses``).
            RecordNotWritten: the filesystem refused the write (e.g. no space left on device); nothing was written,
                no temporary file is left, and the point has no record (a resume runs it again).
        """
        path = self.result_path(record.point_id)
        old = self.final_status(record.point_id)
        if old is not None:
            raise FileExistsError(f"{path} already holds a final result ({old}); refusing to overwrite it")
        try:
            write_json_atomic(path, record.to_dict())
        except OSError as e:
            raise RecordNotWritten(record, e) from e
        return path

    def records(self) -> list[Record]:
        """Every ``result.json`` of the sweep, sorted by point id.

        Raises:
            ValueError: a ``result.json`` is not a valid record (the message names the file).
        """
        return self.scan()[0]

    def scan(self) -> tuple[list[Record], list[str]]:
        """One pass over ``points/``: every record (sorted by point id, as :meth:`records`) and the names of the
        point folders without a ``result.json`` yet (launched, not finished; sorted).

        Raises:
            ValueError: a ``result.json`` is not a valid record (the message names the file).
        """
        records, pending = [], []
        root = str(self.points_dir)
        for name in self._point_names():
            try:  # os.path: pathlib's joins were a tenth of a 10,000-record report
                records.append(read_record(os.path.join(root, name, RESULT_FILE)))
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                pending.append(name)
        return records, pending

    def _point_names(self) -> list[str]:
        """The point folders' names, sorted (hidden ones skipped); [] without ``points/``. One directory listing."""
        try:
            with os.scandir(self.points_dir) as it:
                return sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def has_final_record(self) -> bool:
        """Whether any point has a final record (a ``result.json`` whose status is not ``pending``); stops at the
        first one found, so a sweep of pending points is answered by listing its folders.

        Raises:
            ValueError: a ``result.json`` met on the way is not a valid record (the message names the file).
        """
        return any(read_record(p).status != "pending" for p in self.points_dir.glob(f"*/{RESULT_FILE}"))

    def count_points(self) -> int:
        """How many point folders ``points/`` holds (hidden ones skipped); 0 without it."""
        return len(self._point_names())

    def spec(self, point_id: str) -> dict[str, Any]:
        """A point's ``spec.json`` as plain data, or ``{}`` when it has none or it cannot be read (a pending point's
        row is shown with what there is)."""
        try:
            return _json_object(self.point(point_id) / SPEC_FILE) or {}
        except (OSError, ValueError):
            return {}


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is no such file.

    Raises:
        ValueError: the file is not valid JSON or holds something else than an object (the message names it).
        OSError: it cannot be read.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data
