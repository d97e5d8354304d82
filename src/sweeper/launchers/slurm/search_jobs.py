"""The frontier search's jobs on SLURM (``search=frontier launcher=slurm``, docs/search.md "Asynchronous
promotion"): the :class:`sweeper.search.jobs.Jobs` of the SLURM launcher. Jobs are submitted by the launcher's own
code (:meth:`sweeper.launchers.slurm.submit.SlurmLauncher.submit`: the gate, job arrays through submitit,
``submitted.json``) without waiting, and :meth:`SlurmJobs.wait` returns as soon as any of them has its record, so the
search decides and submits the next job while the others still run.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sweeper.launchers.slurm.submit import SlurmLauncher
from sweeper.launchers.slurm.waiting import alive_jobs


class SlurmJobs:
    """The search's jobs through ``launcher`` (set up by Hydra); ``returns``: Hydra's job returns, submission by
    submission."""

    def __init__(self, launcher: SlurmLauncher) -> None:
        self.launcher = launcher
        self.returns: list[Any] = []
        self.concurrent: int | None = None  # SLURM runs what its queue allows: search.batch_size decides

    def running(self, point_ids: Collection[str]) -> set[str]:
        """The points of ``point_ids`` without a final record whose latest job (``submitted.json``) SLURM still
        has queued or running (sacct; every submitted one when sacct cannot be asked)."""
        sweep = self.launcher.sweep_dir()
        alive = alive_jobs(sweep.submitted())
        return {pid for pid in point_ids if pid in alive and sweep.final_status(pid) is None}

    def submit(self, job_overrides: list[list[str]], initial_job_idx: int) -> None:
        """Submit one job per override list (:meth:`SlurmLauncher.submit`) and return without waiting."""
        self.returns.append(self.launcher.submit(job_overrides, initial_job_idx).returns)

    def wait(self, point_ids: Collection[str]) -> set[str]:
        """Poll SLURM (``launcher.poll_interval_s``) until at least one of ``point_ids`` has a final record
        (:meth:`SlurmLauncher.wait`, which records jobs the scheduler ended without one).

        Returns:
            Those points; every point of ``point_ids`` when ``launcher.wait_timeout_min`` passed with none ended
            (the search gives up on them: they stay pending, the report and ``python -m sweeper.status`` show them).
        """
        return self.launcher.wait(point_ids, any_end=True) or set(point_ids)
