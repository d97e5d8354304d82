"""Write one W&B run per point from the records (imports wandb; runs in its own process, see
:func:`sweeper.tracking.log_runs`).

A run whose content is unchanged since the last write (same fingerprint, same mode, its offline folder still there)
is skipped. Offline, a rewritten run replaces its previous ``offline-run-*`` folder, so ``<sweep dir>/wandb/``
holds exactly one folder per point and ``wandb sync`` uploads each point once. Online, the run is resumed
(``resume="allow"``): the same run is updated, and its history is sent only if it changed.

Every failure is caught and counted: W&B never fails a point, a sweep or a report.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.failures.text import first_line
from sweeper.results.sweepdir import SweepDir
from sweeper.tracking.manifest import read_manifest, sync_command, write_manifest
from sweeper.tracking.runs import HISTORY_NAMES, STEP_METRIC, TIMED, RunSpec, run_specs
from sweeper.tracking.settings import INSTALL_HINT, WandbSettings

#: Stop after this many runs in a row fail (W&B is broken: no point trying every run of a 1,000-point grid).
MAX_CONSECUTIVE_FAILURES = 3
#: Seconds wandb may take to start a run online before the writer falls back to offline.
ONLINE_INIT_TIMEOUT_S = 30.0


@dataclass
class WriteResult:
    """What :func:`write_runs` did.

    Attributes:
        mode: the mode finally used (``off`` when nothing could be written).
        written, unchanged, failed: run counts.
        notes: sentences for the user (fallbacks, the first error of each kind).
        sync: the command that uploads the offline runs, or None.
    """

    mode: str
    written: int = 0
    unchanged: int = 0
    failed: int = 0
    notes: list[str] = field(default_factory=list)
    sync: str | None = None

    def lines(self) -> list[str]:
        """Plain lines for the terminal (no markup)."""
        head = f"W&B ({self.mode}): {self.written} runs written, {self.unchanged} unchanged"
        if self.failed:
            head += f", {self.failed} failed"
        out = [head, *self.notes]
        if self.sync and (self.written or self.unchanged):
            out.append(f"W&B: sync the offline runs once online: {self.sync}")
        return out


def _settings(wandb: Any, mode: str) -> Any:
    return wandb.Settings(
        console="off",
        silent=True,
        x_disable_stats=True,
        x_disable_meta=True,
        x_disable_machine_info=True,
        disable_code=True,
        disable_git=True,
        init_timeout=ONLINE_INIT_TIMEOUT_S if mode == "online" else 90.0,
    )


#: The history series whose last value W&B would otherwise copy into the summary.
HISTORY_SERIES: tuple[str, ...] = (*(n for n in HISTORY_NAMES.values() if n != STEP_METRIC), TIMED)

#: Offline runs are written under ``<sweep dir>/wandb/STAGING/<run id>/`` and moved into ``wandb/`` only once
#: finished: a run that fails half-way never leaves a folder that ``wandb sync <dir>/wandb/offline-run-*`` uploads.
STAGING = ".staging"


def _write_one(wandb: Any, spec: RunSpec, settings: WandbSettings, mode: str, sweep_dir: Path, history: bool) -> Any:
    """Write one run; returns its offline folder (relative to ``sweep_dir``) or None online.

    Offline, the run is written in a staging folder (:data:`STAGING`) and moved into ``<sweep dir>/wandb/`` after
    ``run.finish()`` returned: on any error the staging folder is deleted and nothing is left to sync.

    Raises:
        Exception: whatever wandb raises (the caller counts it).
    """
    if mode != "offline":
        return _write_to(wandb, spec, settings, mode, sweep_dir, history)
    staging = SweepDir(sweep_dir).wandb_dir / STAGING / spec.run_id
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        written = Path(_write_to(wandb, spec, settings, mode, staging, history))
        target = SweepDir(sweep_dir).wandb_dir / written.name
        written.replace(target)
    finally:
        shutil.rmtree(staging.parent, ignore_errors=True)  # one run is staged at a time
    return str(target.resolve().relative_to(Path(sweep_dir).resolve()))


def _write_to(wandb: Any, spec: RunSpec, settings: WandbSettings, mode: str, root: Path, history: bool) -> Any:
    """``wandb.init`` (its files under ``<root>/wandb/``), the history, the summary, ``finish``; the offline run's
    folder (absolute), None online."""
    run = wandb.init(
        project=settings.project,
        entity=settings.entity,
        id=spec.run_id,
        name=spec.name,
        group=spec.group,
        tags=spec.tags,
        config=spec.config,
        mode=mode,
        dir=str(root),
        resume="allow",
        reinit="create_new",
        settings=_settings(wandb, mode),
    )
    try:
        # WandbCallback's x axis: every series is plotted against train/global_step
        run.define_metric(STEP_METRIC, summary="none")
        for key in HISTORY_SERIES:  # the summary holds the row's measured statistics, not a series' last step
            run.define_metric(key, step_metric=STEP_METRIC, step_sync=True, summary="none")
        run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
        if history:
            for row in spec.history:
                row = dict(row)
                step = row.pop("step")
                run.log(row, step=step)
        run.summary.update(spec.summary)
    except BaseException:
        run.finish(exit_code=1)
        raise
    # W&B's state: "finished" for a measured point only; a failed or refused one is "failed" (its reason and status
    # are in the summary), so W&B's state filter finds it
    run.finish(exit_code=0 if spec.summary.get("status") == "ok" else 1)
    return str(Path(run.settings.sync_dir).resolve()) if mode == "offline" else None


def _attempt(
    wandb: Any, spec: RunSpec, settings: WandbSettings, mode: str, sweep_dir: Path, history: bool
) -> tuple[str | None, str | None]:
    """:func:`_write_one`, as (offline folder or None, None) or (None, the error as one line).

    A run that failed online is torn down with its service (``wandb.teardown()``): wandb-core keeps the stream of a
    run whose ``init`` timed out (no server), and the offline retry of the same id would otherwise fail with
    "run ID ... is in use". The failed attempt's ``run-*-<id>`` folder (no data the server has) is removed.
    """
    before = set(SweepDir(sweep_dir).wandb_dir.glob(f"run-*-{spec.run_id}")) if mode == "online" else set()
    try:
        return _write_one(wandb, spec, settings, mode, sweep_dir, history), None
    except Exception as e:  # noqa: BLE001 - W&B never fails a sweep or a report
        if mode == "online":
            _teardown(wandb)
            for path in set(SweepDir(sweep_dir).wandb_dir.glob(f"run-*-{spec.run_id}")) - before:
                shutil.rmtree(path, ignore_errors=True)
        return None, f"{type(e).__name__}: {first_line(str(e))}"


def _teardown(wandb: Any) -> None:
    try:
        wandb.teardown()
    except Exception:  # noqa: BLE001 - the service is gone either way; the retry says if it is not
        pass


def write_runs(sweep_dir: SweepDir | Path, settings: WandbSettings, mode: str) -> WriteResult:
    """Write (or update) one W&B run per point of ``sweep_dir`` in ``mode`` (``offline`` or ``online``).

    Online, the first run that cannot be started (no network, server error, bad key) switches this write to
    offline, with a note. Never raises for a W&B problem: failures are counted in the result.

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    sweep = SweepDir.of(sweep_dir)
    sweep_dir = sweep.path
    result = WriteResult(mode)
    try:
        import wandb
    except ImportError as e:
        result.mode = "off"
        result.notes.append(f"W&B off: cannot import wandb ({first_line(str(e))}); {INSTALL_HINT}")
        return result
    specs = run_specs(sweep)
    root = sweep.wandb_dir
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        result.mode = "off"
        result.notes.append(f"W&B off: cannot create {root}: {first_line(str(e))}")
        return result
    shutil.rmtree(root / STAGING, ignore_errors=True)  # a writer stopped half-way (killed at its time limit)
    manifest = read_manifest(sweep)
    runs: dict[str, Any] = manifest.setdefault("runs", {})
    consecutive = 0
    for spec in specs:
        prev = runs.get(spec.run_id) or {}
        if _unchanged(prev, spec, result.mode, sweep_dir):
            result.unchanged += 1
            continue
        history = not (result.mode == "online" and prev.get("mode") == "online")
        history = history or prev.get("history") != spec.history_fingerprint()
        folder, error = _attempt(wandb, spec, settings, result.mode, sweep_dir, history)
        if error is not None and result.mode == "online":
            result.mode = "offline"
            result.notes.append(f"W&B online failed ({error}): writing the runs offline")
            folder, error = _attempt(wandb, spec, settings, "offline", sweep_dir, True)
        if error is not None:
            result.failed += 1
            consecutive += 1
            if result.failed == 1:
                result.notes.append(f"W&B run {spec.run_id} not written: {error}")
            if consecutive >= MAX_CONSECUTIVE_FAILURES:
                rest = len(specs) - result.written - result.unchanged - result.failed
                result.notes.append(f"W&B: {consecutive} runs in a row failed; {rest} runs not tried")
                break
            continue
        consecutive = 0
        result.written += 1
        if folder is not None:
            _remove_superseded(sweep_dir, spec.run_id, folder)
        runs[spec.run_id] = {
            "point_id": spec.point_id,
            "mode": result.mode,
            "fingerprint": spec.fingerprint(),
            "history": spec.history_fingerprint(),
            "dir": folder,
        }
        manifest["mode"] = result.mode
        manifest["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        try:
            write_manifest(sweep, manifest)
        except OSError as e:
            result.notes.append(f"W&B: cannot write the run manifest: {first_line(str(e))}")
    if any(e.get("mode") == "offline" for e in runs.values()):
        result.sync = sync_command(sweep)
    return result


def _unchanged(prev: dict[str, Any], spec: RunSpec, mode: str, sweep_dir: Path) -> bool:
    if not prev or prev.get("fingerprint") != spec.fingerprint() or prev.get("mode") != mode:
        return False
    return mode == "online" or bool(prev.get("dir") and (sweep_dir / prev["dir"]).is_dir())


def _remove_superseded(sweep_dir: Path, run_id: str, keep: str) -> None:
    """Delete every other offline folder of run ``run_id`` in ``<sweep dir>/wandb/`` (``offline-run-<time>-<id>``):
    the run just written holds everything they held."""
    keep_path = (sweep_dir / keep).resolve()
    for path in SweepDir(sweep_dir).wandb_dir.glob(f"offline-run-*-{run_id}"):
        if path.is_dir() and path.resolve() != keep_path and path.name.endswith(f"-{run_id}"):
            shutil.rmtree(path, ignore_errors=True)
