"""Waiting on a sweep's SLURM jobs: until their points have final records (:func:`wait_for_records`, what
``launcher.wait=true`` and the frontier search do), and which points' latest jobs SLURM still has queued or running
(:func:`alive_jobs`, so a resume does not submit them again). Both ask SLURM through
:mod:`sweeper.launchers.slurm.accounting`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from sweeper.launchers.slurm.accounting import reconcile, sacct
from sweeper.results.sweepdir import SweepDir


def wait_for_records(
    sweep: SweepDir, point_ids: list[str], poll_s: float, timeout_min: float | None = None, any_end: bool = False
) -> set[str]:
    """Block until every point of ``point_ids`` has a final record (``any_end``: until one of them has), or
    ``timeout_min`` minutes (``launcher.wait_timeout_min``; None: no limit). Each pass asks SLURM once
    (:func:`reconcile`), which writes records for jobs the scheduler ended without one and for jobs that can
    never start (their reason, e.g. ``PartitionTimeLimit``, ends them), so this never waits on a job that is gone
    or that will never run. A pending line names the scheduler's reasons.

    Returns:
        The points of ``point_ids`` with a final record when it returned."""
    from collections import Counter

    last = None
    t0 = time.monotonic()
    while True:
        statuses = reconcile(sweep)
        # a point refused at submission (no job) has its record without being in submitted.json
        mine = [statuses.get(pid) or sweep.final_status(pid) or "pending" for pid in point_ids]
        ended = {pid for pid, s in zip(point_ids, mine, strict=True) if s != "pending"}
        counts = Counter(mine)
        queue = sweep.queue()
        reasons = Counter(str(queue.get(pid, {}).get("reason") or "?") for pid in point_ids if pid not in ended)
        line = ", ".join(
            f"{n} {s}" + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(reasons.items()))})" if s == "pending" else "")
            for s, n in sorted(counts.items())
        )
        if line != last:
            print(f"[slurm] {line}", flush=True)
            last = line
        if counts.get("pending", 0) == 0 or (any_end and ended):
            return ended
        if timeout_min is not None and time.monotonic() - t0 >= timeout_min * 60:
            print(
                f"[slurm] stopped waiting after {timeout_min:g} min (launcher.wait_timeout_min) with "
                f"{counts['pending']} point(s) pending; watch with `python -m sweeper.status {sweep.path}`, "
                f"collect with `python -m sweeper.report {sweep.path}`",
                flush=True,
            )
            return ended
        time.sleep(poll_s)


def alive_jobs(submitted: dict[str, dict[str, Any]]) -> set[str]:
    """Points whose latest job is still queued or running (so a resume does not submit them again)."""
    if not submitted:
        return set()
    try:
        info = sacct([e["job_id"] for e in submitted.values()])
    except RuntimeError as e:
        print(
            f"sweeper: cannot ask SLURM about earlier jobs ({e}); resubmitting only points without a job",
            file=sys.stderr,
        )
        return set(submitted)
    from sweeper.launchers.slurm.accounting import FINAL_SLURM_STATES

    return {
        pid
        for pid, e in submitted.items()
        if e["job_id"] not in info or info[e["job_id"]]["state"] not in FINAL_SLURM_STATES
    }
