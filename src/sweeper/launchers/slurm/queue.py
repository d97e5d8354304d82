"""What slurmctld says now of live jobs (``squeue``, ``scontrol show job``), and ending a job that can never start.

Accounting (``sacct``, :mod:`sweeper.launchers.slurm.accounting`) says how jobs ended; the controller says what
waits and why: its pending reason is the current one (accounting's can be stale), and it lists tasks of an array not
yet split, which accounting does not.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from sweeper.launchers.slurm.site import pending_text
from sweeper.results.record import Record


def controller_knows(job_id: str, timeout_s: float = 30.0) -> bool:
    """Whether slurmctld still has the job (``scontrol show job``: queued, running, or ended less than ``MinJobAge``
    ago, 300 s by default). True when it cannot be asked (no answer is no proof of absence)."""
    try:
        out = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    said = out.stderr + out.stdout  # "Invalid job id specified" (a plain id), "Job 88_1 not found" (an array task)
    return not (out.returncode != 0 and ("Invalid job id" in said or "not found" in said))


def untraced_job() -> dict[str, Any]:
    """The scheduler's word on a submitted job that SLURM has no trace of: not known to slurmctld and no line in
    accounting. A job-array task cancelled while still pending leaves exactly that (seen on slurm 22-24: ``scancel
    88_1`` before it starts, then ``sacct -j 88`` lists only ``88_0``), so it is taken as ``CANCELLED``; the reason
    says that SLURM kept no record."""
    return {"state": "CANCELLED", "exit_code": None, "elapsed_s": None, "time_limit_s": None, "untraced": True}


def squeue(job_ids: list[str], timeout_s: float = 60.0) -> dict[str, dict[str, str]]:
    """What slurmctld says now of live jobs: ``squeue -h -r -o %i|%T|%r -j <ids>`` (``-r``: one line per array
    task, also for tasks of an array not yet split, which ``sacct`` does not list; the reason is the controller's
    current one, while accounting's may be stale).

    Returns:
        ``{job_id: {"state", "reason"}}``; ``{}`` when squeue is missing or fails (nothing is decided on it then).
    """
    if not job_ids or shutil.which("squeue") is None:
        return {}
    try:
        out = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(sorted(set(job_ids)))],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_squeue(out.stdout) if out.returncode == 0 else {}


def parse_squeue(text: str) -> dict[str, dict[str, str]]:
    """Parse ``squeue -h -r -o %i|%T|%r`` lines into ``{job_id: {"state", "reason"}}``."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0]:
            found[parts[0]] = {"state": parts[1], "reason": parts[2]}
    return found


def never_started(entry: dict[str, Any], seen: dict[str, str], sweep_id: str, pid: str) -> Record:
    """The record of a point whose job SLURM keeps pending for a reason that cannot resolve on its own
    (:data:`sweeper.launchers.slurm.site.NEVER_STARTS`): the job is cancelled (``scancel``) so that it cannot start
    later and write over this record; status ``error``, kind ``scheduler``, the reason says SLURM's reason, what it
    means and what to change, and how to run the point again."""
    job_id = entry["job_id"]
    cancelled = _scancel(job_id)
    reason = (
        f"SLURM will never start job {job_id} as it is: it is pending with reason {pending_text(seen['reason'])}. "
        + ("sweeper cancelled the job" if cancelled is None else f"sweeper could not cancel it ({cancelled})")
        + "; after the change, run the same command with launcher.rerun_statuses=[error]"
    )
    return Record(
        sweep_id=sweep_id,
        point_id=pid,
        status="error",
        error_kind="scheduler",
        reason=reason,
        overrides=entry.get("overrides", []),
        spec=entry.get("spec", {}),
        replay=entry.get("replay", ""),
        failure={"slurm_job_id": job_id, "slurm_state": "PENDING", "slurm_reason": seen["reason"]},
        env={"slurm_job_id": job_id},
    )


def _scancel(job_id: str) -> str | None:
    """``scancel <job_id>``; None when it worked, else what went wrong."""
    try:
        out = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if out.returncode == 0 else (out.stderr.strip() or f"exit {out.returncode}")
