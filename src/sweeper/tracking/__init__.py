"""W&B tracking: one run per point, written from the records on the driver, offline first (docs/wandb.md).

Nothing here runs inside a rank or in a timed window, and nothing is pickled to SLURM (case P08): the runs are
written when a sweep ends (:mod:`sweeper.callbacks`) and again by ``python -m sweeper.report``, in a child process
(``python -m sweeper.tracking``) with a time limit, so that nothing wandb does (a crash, a hang, a missing module,
an unwritable folder, no network) can fail a point, a sweep or a report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sweeper.results.collect import sweep_info
from sweeper.tracking.settings import WANDB_SUBDIR, WandbSettings, effective_mode

#: The child's time limit: this many seconds, plus :data:`SECONDS_PER_RUN` per point.
BASE_TIMEOUT_S = 120.0
SECONDS_PER_RUN = 3.0
LOG_FILE = "sweeper-tracking.log"


def sweep_settings(sweep_dir: Path, mode: str | None = None) -> WandbSettings:
    """The W&B settings a sweep ran with (``sweep.json``'s ``wandb`` entry, defaults when absent), with ``mode``
    replacing its mode when given.

    Raises:
        ValueError: ``mode`` is not one of ``auto``, ``off``, ``offline``, ``online``.
    """
    data = dict(sweep_info(sweep_dir).get("wandb") or {})
    if mode is not None:
        data["mode"] = mode
    return WandbSettings.from_dict(data)


def log_runs(sweep_dir: Path, settings: WandbSettings, n_points: int | None = None) -> list[str]:
    """Write or update the sweep's W&B runs in a child process and return the lines to print (plain text).

    ``off`` (asked, or ``auto`` without wandb installed) costs nothing: no child starts. The child's own output
    (wandb's warnings) goes to ``<sweep dir>/wandb/sweeper-tracking.log``. Never raises.

    Args:
        sweep_dir: the sweep directory.
        settings: the sweep's W&B settings (:func:`sweep_settings`).
        n_points: the number of points, for the time limit (``BASE_TIMEOUT_S + SECONDS_PER_RUN`` x points).
    """
    mode, note = effective_mode(settings)
    lines = [note] if note else []
    if mode == "off":
        return lines
    sweep_dir = Path(sweep_dir)
    if n_points is None:
        try:
            n_points = sum(1 for _ in (sweep_dir / "points").iterdir())
        except OSError:
            n_points = 0
    timeout = BASE_TIMEOUT_S + SECONDS_PER_RUN * n_points
    cmd = [sys.executable, "-m", "sweeper.tracking", str(sweep_dir), "--mode", mode]
    cmd += ["--project", settings.project] + (["--entity", settings.entity] if settings.entity else [])
    log = _log_file(sweep_dir)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}  # the mode is resolved: the child is told it
    try:
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log or subprocess.DEVNULL,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        stop = f"W&B: writing the runs took over {timeout:.0f} s and was stopped; the runs written so far are kept"
        return [*lines, stop]
    except OSError as e:
        return [*lines, f"W&B: cannot start the writer: {e}"]
    finally:
        if log is not None:
            log.close()
    out = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0:
        where = f" (see {sweep_dir / WANDB_SUBDIR / LOG_FILE})" if log is not None else ""
        out.append(f"W&B: the writer exited with status {proc.returncode}{where}")
    return [*lines, *out]


def _log_file(sweep_dir: Path):
    try:
        (sweep_dir / WANDB_SUBDIR).mkdir(parents=True, exist_ok=True)
        return open(sweep_dir / WANDB_SUBDIR / LOG_FILE, "a")
    except OSError:
        return None


__all__ = ["WandbSettings", "effective_mode", "log_runs", "sweep_settings"]
