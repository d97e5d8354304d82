"""W&B tracking: one run per point, written from the records on the driver, offline first (docs/wandb.md).

Nothing here runs inside a rank or in a timed window, and nothing is pickled to SLURM (docs/cases.md#p08): the runs are
written when a sweep ends (:mod:`sweeper.hydra_callbacks`) and again by ``python -m sweeper.report``, in a child process
(``python -m sweeper.tracking``) with a time limit, so that nothing wandb does (a crash, a hang, a missing module,
an unwritable folder, no network) can fail a point, a sweep or a report.

Floor (``docs/architecture.md``, the layers): ``launchers | tracking | search``, below ``report`` and above ``job``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sweeper.redact import without_secrets
from sweeper.results.sweepdir import TRACKING_LOG, SweepDir
from sweeper.tracking.settings import WandbSettings, effective_mode

#: The child's time limit: this many seconds, plus :data:`SECONDS_PER_RUN` per point.
BASE_TIMEOUT_S = 120.0
SECONDS_PER_RUN = 3.0


def sweep_settings(sweep_dir: SweepDir | Path, mode: str | None = None) -> WandbSettings:
    """The W&B settings a sweep ran with (``sweep.json``'s ``wandb`` entry, defaults when absent), with ``mode``
    replacing its mode when given.

    Raises:
        ValueError: ``mode`` is not one of ``auto``, ``off``, ``offline``, ``online``.
    """
    data = dict(SweepDir.of(sweep_dir).info().get("wandb") or {})
    if mode is not None:
        data["mode"] = mode
    return WandbSettings.from_dict(data)


class RunsWriter:
    """The W&B runs of a sweep being written by a child process (``python -m sweeper.tracking``), started by
    :meth:`start` so that the caller can build the report meanwhile, then :meth:`wait`-ed for.

    Attributes:
        mode: the mode the runs are written in (``off``, ``offline``, ``online``; :func:`effective_mode`): the
            report's W&B section says where they go.
    """

    def __init__(self, sweep_dir: SweepDir | Path, mode: str, lines: list[str]) -> None:
        self.sweep = SweepDir.of(sweep_dir)
        self.mode = mode
        self._lines = lines
        self._proc: subprocess.Popen | None = None
        self._log = None
        self._timeout = BASE_TIMEOUT_S

    @classmethod
    def start(cls, sweep_dir: SweepDir | Path, settings: WandbSettings, n_points: int | None = None) -> RunsWriter:
        """Start writing (``off``: nothing starts and it costs nothing). Never raises.

        Args:
            sweep_dir: the sweep directory, or its path.
            settings: the sweep's W&B settings (:func:`sweep_settings`).
            n_points: the number of points, for the time limit (``BASE_TIMEOUT_S + SECONDS_PER_RUN`` x points);
                None: counted from ``points/``.
        """
        sweep = SweepDir.of(sweep_dir)
        mode, note = effective_mode(settings, single_point=sweep.info().get("mode") == "run")
        writer = cls(sweep, mode, [note] if note else [])
        if mode == "off":
            return writer
        try:
            finished = sweep.has_final_record()
        except ValueError:
            finished = True  # an unreadable record: the writer says which
        if not finished:
            # every point is pending (a SLURM submission with launcher.wait=false): no run to write yet
            writer._lines.append(
                f"W&B: no run yet (no point has finished); `python -m sweeper.report {sweep.path}` writes them"
            )
            return writer
        if n_points is None:
            try:
                n_points = sum(1 for _ in sweep.points_dir.iterdir())
            except OSError:
                n_points = 0
        writer._timeout = BASE_TIMEOUT_S + SECONDS_PER_RUN * n_points
        cmd = [sys.executable, "-m", "sweeper.tracking", str(sweep.path), "--mode", mode]
        cmd += ["--project", settings.project] + (["--entity", settings.entity] if settings.entity else [])
        writer._log = _log_file(sweep)
        # the mode is resolved (the child is told); the writer needs no secret (sweeper.redact)
        env = {k: v for k, v in without_secrets(os.environ).items() if k != "WANDB_MODE"}
        try:
            writer._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=writer._log or subprocess.DEVNULL, text=True, env=env
            )
        except OSError as e:
            writer._lines.append(f"W&B: cannot start the writer: {e}")
            writer._close_log()
        return writer

    def wait(self) -> list[str]:
        """Wait for the child (at most its time limit, counted from now) and return the lines to print (plain
        text): what was written, fallbacks, errors, the sync command. Never raises."""
        if self._proc is None:
            return list(self._lines)
        try:
            out, _ = self._proc.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            stop = f"W&B: writing the runs took over {self._timeout:.0f} s and was stopped (the runs written are kept)"
            return [*self._lines, stop]
        finally:
            self._close_log()
        lines = [*self._lines, *(line for line in (out or "").splitlines() if line.strip())]
        if self._proc.returncode != 0:
            lines.append(
                f"W&B: the writer exited with status {self._proc.returncode} "
                f"(see {self.sweep.wandb_dir / TRACKING_LOG})"
            )
        return lines

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def log_runs(sweep_dir: SweepDir | Path, settings: WandbSettings, n_points: int | None = None) -> list[str]:
    """Write or update the sweep's W&B runs (:meth:`RunsWriter.start`, then :meth:`RunsWriter.wait`) and return the
    lines to print. Never raises."""
    return RunsWriter.start(sweep_dir, settings, n_points).wait()


def _log_file(sweep: SweepDir):
    try:
        sweep.wandb_dir.mkdir(parents=True, exist_ok=True)
        return open(sweep.wandb_dir / TRACKING_LOG, "a")
    except OSError:
        return None


__all__ = ["RunsWriter", "WandbSettings", "effective_mode", "log_runs", "sweep_settings"]
