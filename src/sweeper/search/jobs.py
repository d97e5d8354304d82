"""How the frontier search runs its jobs: :class:`Jobs`, what the driver needs of a launcher (submit, see which jobs
are still queued or running, wait until one ends), and :class:`Launched`, the same over a Hydra launcher's blocking
``launch(job_overrides, initial_job_idx)`` (the local launcher: every job of a submission has ended when it returns).

The SLURM launcher's own implementation, which submits without waiting and returns from :meth:`Jobs.wait` as soon as
any job ends, is :class:`sweeper.launchers.slurm.search_jobs.SlurmJobs` (docs/search.md, "Asynchronous promotion").
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Jobs(Protocol):
    """The search's jobs, by point id. ``returns`` collects the launcher's Hydra job returns, submission by
    submission (what the Hydra sweeper returns)."""

    returns: list[Any]
    #: Jobs the launcher runs at the same time (None: as many as are submitted). The search keeps at most
    #: ``min(search.batch_size, concurrent)`` in flight: more would only wait, and be decided on older records.
    concurrent: int | None

    def running(self, point_ids: Collection[str]) -> set[str]:
        """The points of ``point_ids`` whose job, submitted before this search started (a killed search's), is
        still queued or running and has no final record yet: the search waits for them instead of deciding them."""
        ...

    def submit(self, job_overrides: list[list[str]], initial_job_idx: int) -> None:
        """Start one job per override list (a point's grid overrides, plus ``search.window=screen`` for a screen).
        Returns once they are submitted; a point the launcher refuses or finds final has its record when it
        returns."""
        ...

    def wait(self, point_ids: Collection[str]) -> set[str]:
        """Block until at least one point of ``point_ids`` (each with a job submitted) has a final record.

        Returns:
            The points of ``point_ids`` that ended: with a final record, or given up (no record will come while
            this search waits: the launcher's time limit), never empty when ``point_ids`` is not.
        """
        ...


class Launched:
    """:class:`Jobs` over a blocking ``launch(job_overrides, initial_job_idx)`` (a Hydra launcher's): a submission
    runs its jobs to their end, so nothing is ever running between two calls, and :meth:`wait` returns every point
    (one without a final record then never gets one from this search)."""

    def __init__(self, launch: Callable[[list[list[str]], int], Any], concurrent: int | None = None) -> None:
        """``concurrent``: jobs ``launch`` runs at the same time (Hydra's basic launcher: 1, one after the other;
        None: every job of a submission, as a parallel launcher such as joblib's)."""
        self.launch = launch
        self.concurrent = concurrent
        self.returns: list[Any] = []

    def running(self, point_ids: Collection[str]) -> set[str]:
        """None: a blocking launcher leaves nothing running."""
        return set()

    def submit(self, job_overrides: list[list[str]], initial_job_idx: int) -> None:
        """Run the jobs to their end (the launcher's ``launch``)."""
        self.returns.append(self.launch(job_overrides, initial_job_idx))

    def wait(self, point_ids: Collection[str]) -> set[str]:
        """Every point: its job ended when :meth:`submit` returned."""
        return set(point_ids)
