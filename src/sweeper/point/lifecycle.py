"""The life of one point, the same for every launcher: identity -> existing record -> gate -> directory -> (the
launcher runs the ranks) -> final status -> record.

::

    begin(spec, ...)  ->  Record (already final, pending elsewhere, or refused: written)  |  Prepared
    <launcher runs the ranks of a Prepared point: locally (launchers.local) or as a SLURM job (launchers.slurm)>
    finish(prepared, ranks, ...)  ->  Record (written atomically, one file per point)

Every record a spec exists for carries the capacity-planning model's numbers for its point (``Record.predicted``,
:func:`predicted_for`): refused, pruned and pending records from :func:`begin`, final records from :func:`finish`
(recomputed there, so a CPU point's throughput uses the matmul peak the point measured), internal errors from
:func:`internal_error`. A prediction never fails a point.

Nothing here imports torch. Every outcome is a record; nothing raises for a failing point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.config.sections import ClusterConfig, from_mapping
from sweeper.config.spec import PointSpec, replay_command
from sweeper.config.target import Target
from sweeper.envinfo import environment, library_versions
from sweeper.point import preflight
from sweeper.point.folders import ready_folders, unwrite_spec, write_new_specs
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.hardware import local_device_type
from sweeper.point.identity import point_id
from sweeper.point.prediction import predicted_for
from sweeper.results import jitlocks
from sweeper.results.atomic import write_error_text
from sweeper.results.rankfile import RankFile, read_rank_steps
from sweeper.results.record import Record, RecordNotWritten
from sweeper.results.sweepdir import SweepDir


def target_for(spec: PointSpec, launcher: str, cluster: ClusterConfig | Mapping[str, Any] | None = None) -> Target:
    """Where ``spec`` would run: the local machine (``launcher="local"``) or a SLURM cluster config (plain data of
    :class:`~sweeper.config.schema.ClusterConfig`, or one).

    The local device comes from ``spec.device`` (``auto`` resolved without torch); a cluster's device from its
    ``gpus_per_node`` and ``gpu_name``.

    Raises:
        TypeError: a cluster key the schema does not have.
    """
    typed = from_mapping(ClusterConfig, cluster)
    if launcher == "slurm":
        device = "cuda" if typed.gpus_per_node else "cpu"
        return Target("slurm", device, typed.gpu_name, library_versions(), typed)
    return Target("local", local_device_type(spec.device), None, library_versions(), typed)


@dataclass
class Prepared:
    """A point that passed the gate and has its directory ready: everything its ranks and its record need.

    Attributes:
        sweep: the sweep directory (absolute) and its id.
        point_id: the point's 12-hex id.
        overrides: the Hydra overrides selecting the point.
        spec: the full point spec (budgets included).
        target: where it runs.
    """

    sweep: SweepDir
    point_id: str
    overrides: list[str]
    spec: PointSpec
    target: Target

    @property
    def pdir(self) -> Path:
        """The point's directory, ``<sweep_dir>/points/<point_id>``."""
        return self.sweep.point(self.point_id)

    def base(self, env: dict[str, Any] | None = None) -> dict[str, Any]:
        """The record fields every outcome of this point shares."""
        return _base(self.sweep, self.point_id, self.overrides, self.spec, env)

    def to_payload(self) -> dict[str, Any]:
        """Plain data (pickles for SLURM): the inverse of :meth:`from_payload`."""
        return dict(
            sweep_dir=str(self.sweep.path),
            sweep_id=self.sweep.sweep_id,
            point_id=self.point_id,
            overrides=list(self.overrides),
            spec=self.spec.to_dict(),
            target=self.target.to_dict(),
        )

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> Prepared:
        """Rebuild from :meth:`to_payload` (inside a SLURM job)."""
        return cls(
            SweepDir(Path(data["sweep_dir"]), data["sweep_id"]),
            data["point_id"],
            list(data["overrides"]),
            PointSpec.from_dict(data["spec"]),
            Target(**data["target"]),
        )


def _base(
    sweep: SweepDir, pid: str, overrides: list[str], spec: PointSpec, env: dict[str, Any] | None
) -> dict[str, Any]:
    return dict(
        sweep_id=sweep.sweep_id,
        point_id=pid,
        overrides=list(overrides),
        spec=spec.to_dict(),
        replay=replay_command(overrides, sweep.search_path()),
        env=env if env is not None else environment(),
    )


def refusal_record(base: dict[str, Any], err: InvalidPoint, predicted: dict[str, Any] | None = None) -> Record:
    """The record of a point the gate refused: status ``invalid``/``unsupported`` (or ``pruned``: predicted not to
    fit, see :mod:`sweeper.point.rules.planning`), the keys and rule named, and the point's ``predicted`` numbers."""
    return Record(
        status=err.status,
        reason=str(err),
        error_kind=err.kind,
        failure={"keys": list(err.keys), "rule": err.rule},
        predicted=predicted,
        **base,
    )


def _still_pruned(spec: PointSpec, target: Target) -> bool:
    """Whether the gate prunes ``spec`` on ``target`` now (rule C01)."""
    try:
        check(spec, target)
    except InvalidPoint as e:
        return e.status == "pruned"
    return False


def identity_of(spec: PointSpec, target: Target | None = None) -> str:
    """The point id of ``spec``: :func:`sweeper.point.identity.point_id` without the entries the libraries resolve
    to what the point is without them (:func:`sweeper.point.preflight.restating`, asked for ``target``; without
    one, what this process was already told). Every id the driver gives a point comes from here."""
    return point_id(spec, preflight.restating(spec, target))


def begin(
    spec: PointSpec,
    overrides: list[str],
    sweep: SweepDir,
    target: Target,
    rerun: frozenset[str] = frozenset(),
    pending_elsewhere: frozenset[str] = frozenset(),
) -> Prepared | Record:
    """Everything before the ranks start.

    1. identity: the point id of the normalised spec, without the entries the libraries resolve away
       (:func:`identity_of`);
    2. a final record already there is returned as it is (resume), unless its status is in ``rerun``
       (``launcher.rerun_statuses``: the old record is kept as ``result.<n>.json`` and the point runs again), or it
       is ``pruned`` and the gate would not prune it now (``prune``, ``cluster`` and ``plan`` are not part of the
       identity: a resume with ``prune=false`` or more memory runs it; the old record is kept the same way);
    3. a point in ``pending_elsewhere`` (its SLURM job is still queued or running) gets an unwritten ``pending``
       record;
    4. the gate (:func:`sweeper.point.gate.check`), then the pre-flight (:func:`sweeper.point.preflight.refusal`: the
       libraries' own objects): a refusal (``invalid``, ``unsupported``, or ``pruned`` when ``prune=true`` and the
       point is predicted not to fit) is written as the point's record, with its predicted numbers, and returned;
       a ``skipped`` record (the frontier search's) is set aside when the sweep is not a frontier search, an ``ok``
       screen (the search's short window) when this job measures the full window (docs/search.md);
    5. the directory: created, stale rank files of an interrupted attempt removed, ``spec.json`` written.

    Returns:
        A :class:`Record` when the point must not run now, else a :class:`Prepared` point.
    """
    return begin_many([(spec, overrides, target)], sweep, rerun, pending_elsewhere)[0]


def begin_many(
    points: Sequence[tuple[PointSpec, list[str], Target]],
    sweep: SweepDir,
    rerun: frozenset[str] = frozenset(),
    pending_elsewhere: frozenset[str] = frozenset(),
) -> list[Prepared | Record]:
    """:func:`begin` for each ``(spec, overrides, target)`` of a batch (a SLURM submission), in order, with the same
    steps and outcome per point; the points that pass the gate meet the pre-flight together (one message to its
    worker, :func:`sweeper.point.preflight.refusals_later`), and meanwhile their ``spec.json`` files are written
    concurrently (one journal commit for many fsyncs, :func:`sweeper.results.atomic.write_json_atomic_many`); a
    point the pre-flight then refuses has its new ``spec.json`` removed before its refusal record is written.

    Raises:
        OSError: a ``spec.json`` the filesystem refused (the first in point order), as :func:`begin` does.
    """
    sweep = sweep.resolved()
    # the entries the libraries resolve away are not identity (identity_of): asked first, for the points that have any
    preflight.refusals([(spec, target) for spec, _, target in points if preflight.may_restate(spec)])
    out: list[Prepared | Record | None] = []
    gated: list[int] = []
    for i, (spec, overrides, target) in enumerate(points):
        found = _settled(spec, overrides, sweep, target, rerun, pending_elsewhere)
        if found is None:
            try:
                check(spec, target)
                gated.append(i)
            except InvalidPoint as e:
                found = refuse(sweep, spec, overrides, target, e)
        out.append(found)
    # the pre-flight's worker answers on a thread (it may still be importing the libraries) while the new points'
    # spec.json files are written (folders.write_new_specs); a refused point's is removed again
    answering = preflight.refusals_later([(points[i][0], points[i][2]) for i in gated])
    candidates = [
        Prepared(sweep, identity_of(points[i][0]), list(points[i][1]), points[i][0], points[i][2]) for i in gated
    ]
    written, refused_write = write_new_specs([(p.pdir, p.spec.to_dict()) for p in candidates])
    ready: list[Prepared] = []
    for i, prepared, refused in zip(gated, candidates, answering.result(), strict=True):
        spec, overrides, target = points[i]
        if refused is not None:
            if prepared.pdir in written:
                unwrite_spec(prepared.pdir)
            out[i] = refuse(sweep, spec, overrides, target, refused)
        else:
            out[i] = prepared
            ready.append(prepared)
    ready_folders([(p.pdir, p.spec.to_dict()) for p in ready], written)
    if refused_write is not None:  # raised once the refusals are recorded
        raise refused_write
    return [o for o in out if o is not None]


def _settled(
    spec: PointSpec,
    overrides: list[str],
    sweep: SweepDir,
    target: Target,
    rerun: frozenset[str],
    pending_elsewhere: frozenset[str],
) -> Record | None:
    """Steps 2-3 of :func:`begin`: the point's final record (resume), its unwritten ``pending`` record, or None."""
    pid = identity_of(spec, target)
    status = sweep.final_status(pid, rerun)
    if status == "pruned" and not _still_pruned(spec, target):
        sweep.set_aside(pid)  # history kept: decide again
    elif status == "skipped" and spec.search.name != "frontier":
        sweep.set_aside(pid)  # the frontier search's decision, not the point's: a grid measures it
    elif status == "ok" and not spec.screening and sweep.read_record(pid).screen:
        sweep.set_aside(pid)  # a short-window screen is never the final measurement: promoted, measured in full
        pending_elsewhere = pending_elsewhere - {pid}  # its screen's job wrote its record: it may still be ending
    elif status:
        return sweep.read_record(pid)
    if pid in pending_elsewhere:
        return Record(
            status="pending",
            reason="queued or running from an earlier submission",
            predicted=predicted_for(spec, target),
            **_base(sweep, pid, overrides, spec, {}),
        )
    return None


def refuse(sweep: SweepDir, spec: PointSpec, overrides: list[str], target: Target, err: InvalidPoint) -> Record:
    """Write and return the refusal record of a point the gate or the pre-flight refused (step 4 of :func:`begin`)."""
    base = _base(sweep, identity_of(spec), overrides, spec, None)
    return write(sweep, refusal_record(base, err, predicted_for(spec, target)))


def finish(
    prepared: Prepared,
    ranks: list[RankFile],
    *,
    returncode: int | None,
    timed_out: bool,
    log_tail: str,
    wall_time_s: float | None,
    env: dict[str, Any] | None = None,
    outcome: dict[str, Any] | None = None,
    artifacts: dict[str, str] | None = None,
    amend: Callable[[dict[str, Any], dict[int, int]], dict[str, Any]] | None = None,
) -> Record:
    """Turn what the ranks left into the point's final record and write it: the one place the rank files are
    summarised (:func:`sweeper.results.outcome.summarize_ranks`), for every launcher.

    Args:
        ranks: the rank files' contents (:class:`sweeper.results.rankfile.RankFile`), any order.
        returncode: the launcher's exit code for the ranks (torchrun's, or rank 0's under SLURM); None if unknown.
        timed_out: the launcher stopped the ranks at ``timeout_s``.
        log_tail: the end of the ranks' combined log (signal names, torchrun's error summary).
        wall_time_s: seconds from starting the ranks to now.
        env: the environment to record (default: this process's).
        outcome: a launcher-decided outcome that replaces the one read from the rank files (a batch search in
            which nothing fits); same keys as :func:`sweeper.results.outcome.summarize_ranks` returns.
        artifacts: extra files of the point (name -> path relative to the point directory), e.g. the ranks' log.
        amend: the launcher's word on the outcome read from the rank files, ``amend(outcome, steps) -> outcome``
            (``steps``: rank -> optimizer steps finished, from the ``rank<r>.step`` files): its own measurements
            added, its own verdict (``host_oom`` from the host-memory watch) in place of the ranks'.

    Returns:
        The record written, with the point's predicted numbers (:func:`predicted_for`, given its measurements) and
        its per-step series (:func:`sweeper.results.metrics.series_from_ranks`, from ``ranks`` whatever the outcome).
    """
    from sweeper.results.metrics import series_from_ranks
    from sweeper.results.outcome import summarize_ranks

    spec = prepared.spec
    env = dict(env if env is not None else environment())
    env.setdefault("device_type", prepared.target.device_type)
    if ranks and ranks[0].get("device_name"):
        env["device_name"] = ranks[0]["device_name"]
    if ranks:  # the host each rank ran on, in rank order (rank files' "host"; a rank without a file is left out)
        env["hosts"] = [r.get("host") for r in sorted(ranks, key=lambda r: r.get("rank", 0))]
    result = outcome
    if not result:
        steps = read_rank_steps(prepared.pdir)
        result = summarize_ranks(
            spec, ranks, returncode=returncode, timed_out=timed_out, log_tail=log_tail, steps=steps
        )
        if amend is not None:
            result = amend(result, steps)
    jitlocks.amend(result, env, prepared.pdir)  # DeepSpeed's JIT-build locks the ranks found (sweeper.job.jit_locks)
    predicted = predicted_for(spec, prepared.target, result.get("metrics"))
    try:  # from the rank files even when the launcher decided the outcome: a failed point keeps its history
        series = series_from_ranks(spec, ranks)
    except Exception:  # noqa: BLE001 - a malformed rank file (a bug) costs the per-step history, never the record
        series = None
    record = Record(
        **prepared.base(env), **{**result, "predicted": predicted, "series": series}, wall_time_s=wall_time_s
    )
    record.artifacts.update(artifacts or {})
    return write(prepared.sweep, record)


def write(sweep: SweepDir, record: Record) -> Record:
    """Write ``record`` atomically as its point's ``result.json`` (:meth:`SweepDir.write_record`) and return it.

    Raises:
        RecordNotWritten: the filesystem refused it (a full disk: :func:`not_recorded` makes the line to show).
    """
    sweep.write_record(record)
    return record


def not_recorded(spec: PointSpec, overrides: list[str], sweep: SweepDir, exc: OSError) -> Record:
    """The unwritten ``pending`` record of a point whose files could not be written (``exc``: a full disk while
    writing ``spec.json``, the device budget, the ranks' log or ``result.json``): nothing final exists for it, so
    a resume (the same command with ``hydra.sweep.dir=<sweep_dir>``) runs it again. The reason starts with
    ``not recorded:``, names the folder (:func:`sweeper.results.atomic.write_error_text`) and, when the point ran
    to its end (:class:`RecordNotWritten`), what it ended in. Never raises, writes nothing."""
    outcome = ""
    if isinstance(exc, RecordNotWritten):
        r = exc.record
        outcome = f"it ended {r.status}" + (f" ({r.error_kind})" if r.error_kind else "") + "; "
    reason = (
        f"not recorded: {write_error_text(exc)} ({outcome}free space, then run the same command with "
        f"hydra.sweep.dir={sweep.path} to resume: this point runs again)"
    )
    return Record(status="pending", reason=reason, **_base(sweep, identity_of(spec), overrides, spec, {}))


def internal_error(
    spec: PointSpec,
    overrides: list[str],
    sweep: SweepDir,
    exc: BaseException,
    cluster: ClusterConfig | None = None,
) -> Record:
    """Record a failure of sweeper's own code on one point (status ``error``, kind ``internal``) so that the grid
    goes on and the report is written; the reason carries the exception's type and text, literally. The record
    carries the point's predicted numbers on this machine with the ``cluster`` config (device memory), when given.

    Returns:
        The record written, or an unwritten one when even writing failed (e.g. a full disk; the reason says so).
    """
    import traceback

    pid = identity_of(spec)
    try:
        predicted = predicted_for(spec, target_for(spec, "local", cluster))
    except Exception as e:  # noqa: BLE001 - target_for reads library versions; nothing may stop this record
        predicted = {"note": f"no prediction: {type(e).__name__}: {e}"}
    record = Record(
        status="error",
        error_kind="internal",
        reason=f"sweeper failed on this point (a bug, please report it): {type(exc).__name__}: {exc}",
        failure={"traceback": traceback.format_exc()[-4000:]},
        predicted=predicted,
        **_base(sweep, pid, overrides, spec, None),
    )
    try:
        path = sweep.result_path(pid)
        if not path.exists():
            write(sweep, record)
    except OSError as e:
        record.reason = f"{record.reason}; the record could not be written to {path.parent}: {e}"
    return record
