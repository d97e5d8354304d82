"""Collecting a sweep directory: every point's record, and a ``pending`` record for each point without one yet.

A point folder without ``result.json`` is a point that was launched (locally: its ranks are running or were
killed; on SLURM: its job is queued or running). Its spec comes from ``submitted.json`` (SLURM submissions, see
:mod:`sweeper.launchers.slurm.accounting`) or from the folder's ``spec.json``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir


def collect_records(sweep_dir: SweepDir | Path) -> list[Record]:
    """All records of a sweep, sorted by point id: the ``result.json`` files (:meth:`SweepDir.records`) plus a
    ``pending`` record for every point folder without one, with the SLURM job id in its reason and ``env`` when the
    point was submitted to SLURM; an undecided ``ok`` screen of ``search=frontier`` is ``pending`` too.

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    sweep = SweepDir.of(sweep_dir)
    found, folders = sweep.scan()
    records = [_undecided(r, sweep) if r.screen and r.status == "ok" else r for r in found]
    try:  # collecting must not fail on it (SLURM accounting reads it strictly)
        submitted = sweep.submitted() if folders else {}
    except (OSError, ValueError):
        submitted = {}
    queue = sweep.queue() if submitted else {}
    for name in folders:
        entry = submitted.get(name) or {}
        job = entry.get("job_id")
        records.append(
            Record(
                sweep_id=sweep.sweep_id,
                point_id=name,
                status="pending",
                reason=pending_reason(job, queue.get(name)),
                spec=entry.get("spec") or sweep.spec(name),
                overrides=entry.get("overrides", []),
                replay=entry.get("replay", ""),
                env={"slurm_job_id": job} if job else {},
            )
        )
    return sorted(records, key=lambda r: r.point_id)


def _undecided(screen: Record, sweep: SweepDir) -> Record:
    """An ``ok`` screen of ``search=frontier`` still in ``result.json`` (a search stopped before deciding it) as the
    ``pending`` record it is: its short window is never the point's final measurement (docs/search.md)."""
    steps = (screen.metrics or {}).get("timed_steps")
    return Record(
        sweep_id=screen.sweep_id,
        point_id=screen.point_id,
        status="pending",
        reason=f"screened with a short window ({steps} timed steps), not decided yet: resume the search with "
        f"hydra.sweep.dir={sweep.path} (search=frontier) to promote or skip it",
        spec=screen.spec,
        overrides=screen.overrides,
        replay=screen.replay,
        env=screen.env,
        predicted=screen.predicted,
    )


def pending_reason(job_id: str | None, queued: dict[str, Any] | None) -> str:
    """The reason of a point without a result: its SLURM job, and what the scheduler last said of it (state and
    reason with what it means, ``queue.json``, with the time it was asked) when it was asked about that job."""
    if not job_id:
        return "no result yet"
    if not queued or queued.get("job_id") != job_id:
        return f"no result yet (SLURM job {job_id})"
    state = str(queued.get("state") or "PENDING")
    said = f"{state}, {queued.get('explained') or queued.get('reason') or 'no reason given yet'}"
    return f"no result yet: SLURM job {job_id} is {said} (as of {queued.get('asked_at', '?')})"


#: The parts of a :func:`pending_reason` that differ between the points of one state: the job id, when it was asked.
_PER_JOB = re.compile(r"(SLURM job) [0-9]+(?:_[0-9]+)?| \(as of [^)]*\)")
_AS_OF = re.compile(r" \(as of ([^)]*)\)$")


def pending_kind(reason: str) -> str:
    """A pending point's reason without what differs from job to job (the SLURM job id, the time the scheduler was
    asked: :func:`pending_reason`), so that the points the scheduler says the same of are counted together:
    ``no result yet: SLURM job 12_3 is PENDING, ... (as of 10:00)`` gives ``no result yet: SLURM job is PENDING,
    ...``. Other reasons are returned as they are."""
    return _PER_JOB.sub(lambda m: m.group(1) or "", reason)


def pending_as_of(reason: str) -> str | None:
    """When the scheduler was asked about a pending point's job (the ``as of`` of :func:`pending_reason`, an ISO
    time as ``queue.json`` holds it), or None when its reason has none."""
    m = _AS_OF.search(reason)
    return m.group(1) if m else None
