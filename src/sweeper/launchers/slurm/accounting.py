"""What SLURM says about submitted points, and how a job that ended without a result becomes a record.

``submitted.json`` in the sweep directory maps each submitted point to its SLURM job id(s); :func:`reconcile`
asks ``sacct`` about every submitted point that has no final record yet and writes one for each job the scheduler
has already ended (time limit, memory kill, cancel, preemption, node failure, or a job that ended without writing a
result), so a sweep never waits on a job that is gone. Jobs still pending or running stay ``pending``.

SLURM states: https://slurm.schedmd.com/sacct.html#SECTION_JOB-STATE-CODES
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from typing import Any

from sweeper.launchers.slurm.queue import controller_knows, never_started, squeue, untraced_job
from sweeper.launchers.slurm.site import never_starts, pending_text
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.units import MIB

#: SLURM job states after which the job will not run again.
FINAL_SLURM_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


#: The record of a job SLURM ended without the job writing one, by its final state: ``(status, error_kind)``.
#: FAILED or CANCELLED with slurmstepd's memory message in the job's log is ``host_oom`` instead (see
#: :func:`record_from_scheduler`). docs/slurm.md has this table (a test keeps the two equal).
STATE_OUTCOMES: dict[str, tuple[str, str | None]] = {
    "TIMEOUT": ("timeout", None),
    "OUT_OF_MEMORY": ("host_oom", None),
    "CANCELLED": ("cancelled", None),
    "PREEMPTED": ("preempted", None),
    "NODE_FAIL": ("error", "scheduler"),
    "BOOT_FAIL": ("error", "scheduler"),
    "DEADLINE": ("error", "scheduler"),
    "FAILED": ("error", "crash"),
    "COMPLETED": ("error", "crash"),
}


def sacct(job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The allocation line of each job from ``sacct -X`` (array tasks as ``<array>_<task>``).

    Returns:
        ``{job_id: {"state", "exit_code", "elapsed_s", "time_limit_s", "reason"}}``; a job sacct does not know
        (not yet recorded) is absent. ``state`` is the first word (``CANCELLED by 0`` -> ``CANCELLED``).

    Raises:
        RuntimeError: when sacct is missing or fails (accounting is needed to learn how jobs ended).
    """
    if not job_ids:
        return {}
    if shutil.which("sacct") is None:
        raise RuntimeError("sacct not found: SLURM accounting is needed to learn how jobs ended")
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-D", "-o", SACCT_FIELDS, "-j", ",".join(sorted(set(job_ids)))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"sacct failed ({out.returncode}): {out.stderr.strip()}")
    return parse_sacct(out.stdout)


#: The ``sacct -o`` fields :func:`parse_sacct` reads, in order.
SACCT_FIELDS = "JobID,State,ExitCode,ElapsedRaw,TimelimitRaw,Reason,ReqMem,Submit"


def parse_sacct(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``sacct -X -n -P -D -o JobID,State,ExitCode,ElapsedRaw,TimelimitRaw,Reason[,ReqMem[,Submit]]`` output.

    With ``-D`` a requeued job has one line per run; the last line wins (the current run). ``-D`` also lists every
    older job that had the same id (sacct(1): job ids restart when the controller's state is lost, and wrap at
    ``MaxJobId``); with the ``Submit`` column a line never replaces one submitted later, so the newest job with the
    id is the one read (ISO times compare as text). ``ElapsedRaw`` is seconds, ``TimelimitRaw`` minutes (converted
    to seconds); ``Partition_Limit`` or empty gives None.

    Returns:
        ``{job_id: {"state", "exit_code", "elapsed_s", "time_limit_s", "reason", "req_mem"}}`` (``req_mem``: the
        memory the job requested as sacct spells it, ``4G``; None without the column).
    """
    info: dict[str, dict[str, Any]] = {}
    submitted: dict[str, str] = {}  # the Submit time of the line each entry came from ("" without the column)

    def newer(job: str, submit: str) -> bool:
        return job not in info or submit >= submitted[job]

    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        jid, state, exit_code, elapsed, limit, reason = parts[:6]
        submit = parts[7] if len(parts) > 7 and parts[7][:1].isdigit() else ""
        entry = {
            "state": state.split()[0] if state else "UNKNOWN",
            "exit_code": exit_code,
            "elapsed_s": int(elapsed) if elapsed.isdigit() else None,
            "time_limit_s": int(limit) * 60 if limit.isdigit() else None,
            "reason": reason,
            "req_mem": (parts[6] or None) if len(parts) > 6 else None,
        }
        tasks = expand_array_tasks(jid)
        if tasks is None:
            if newer(jid, submit):  # sacct -D lists every requeued run of a job: the last line is the current one
                info[jid], submitted[jid] = entry, submit
            continue
        for task in tasks:  # a line for the task itself (started, or listed later) is more precise: it stays,
            if task not in info or submit > submitted[task]:  # unless it belongs to an older job of that id
                info[task], submitted[task] = dict(entry), submit
    return info


def expand_array_tasks(job_id: str) -> list[str] | None:
    """The task ids of a sacct line that stands for several array tasks never started on their own: ``287_[0-1%1]``
    (tasks 0 and 1, at most 1 running at a time), ``287_[2,4-5]``; None for any other id (``287_3``, ``288``).

    SLURM lists the pending tasks of an array as one such line; when the array is cancelled before they start, that
    line (state ``CANCELLED``) is all sacct ever shows of them (sbatch(1), ``--array``; sacct(1)).
    """
    base, sep, rest = job_id.partition("_[")
    if not sep or not rest.endswith("]") or not base.isdigit():
        return None
    spec = rest[:-1].split("%", 1)[0]
    tasks: list[str] = []
    for part in spec.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            return None
        tasks += [f"{base}_{i}" for i in range(int(lo), int(hi if dash else lo) + 1)]
    return tasks


#: Seconds after a NODE_FAIL job ended during which :func:`reconcile` waits for the failed node's event to reach
#: accounting (slurmdbd records it asynchronously; seen missing 15 s after the job ended) before it records the
#: point naming only the job's node list.
NODE_EVENT_GRACE_S = 60.0
#: The ``sacctmgr show event`` fields :func:`node_failure` reads, in order.
EVENT_FORMAT = "format=NodeName,TimeStart,State,Reason"


def node_failure(job_id: str, slack_s: float = 120.0, timeout_s: float = 30.0) -> dict[str, Any]:
    """Which node of a job's allocation failed: for a job that ended ``NODE_FAIL``.

    Reads the job's ``NodeList``, ``Start`` and ``End`` (``sacct -X``), then the node events SLURM's accounting
    recorded for those nodes (``sacctmgr show event``: a node that stops answering gets ``DOWN*`` with reason ``Not
    responding``) that began between the job's start and ``slack_s`` seconds after its end.

    Returns:
        ``{"nodes": <the job's node list>, "failed_nodes": [{"node", "state", "reason", "time"}], "ended_s_ago":
        seconds since the job ended}``; empty values when accounting cannot say (the record then names the job's
        node list only).
    """
    from datetime import datetime, timedelta

    found: dict[str, Any] = {"nodes": "", "failed_nodes": []}
    try:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "NodeList,Start,End", "-j", job_id],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        ).stdout
        lines = [ln.split("|") for ln in out.splitlines() if ln.count("|") >= 2]
        if not lines:
            return found
        nodes, start, end = lines[-1][:3]
        found["nodes"] = nodes
        t0 = datetime.fromisoformat(start)
        ended = datetime.fromisoformat(end) if end[:1].isdigit() else datetime.now()
        found["ended_s_ago"] = (datetime.now() - ended).total_seconds()
        t1 = ended + timedelta(seconds=slack_s)
        events = subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "event", f"Nodes={nodes}", f"Start={start}", EVENT_FORMAT],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        ).stdout
    except (OSError, ValueError, subprocess.SubprocessError):
        return found
    for line in events.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        try:
            when = datetime.fromisoformat(parts[1])
        except ValueError:
            continue
        if t0 <= when <= t1 and parts[0] not in {f["node"] for f in found["failed_nodes"]}:
            found["failed_nodes"].append({"node": parts[0], "state": parts[2], "reason": parts[3], "time": parts[1]})
    return found


def _job_log(sweep: SweepDir, job_id: str) -> str:
    """The end of a job's submitit stdout + stderr (``<sweep_dir>/slurm/<job_id>/``)."""
    text = ""
    folder = sweep.slurm_job_dir(job_id)
    for f in sorted(folder.glob(f"{job_id}_*_log.*")):
        try:
            text += f.read_text(errors="replace")[-4000:]
        except OSError:
            continue
    return text


def record_from_scheduler(entry: dict[str, Any], job: dict[str, Any], log: str, sweep_id: str, pid: str) -> Record:
    """The record of a point whose job the scheduler ended without the job writing one.

    Mapping: TIMEOUT -> ``timeout``; OUT_OF_MEMORY, or FAILED with slurmstepd's ``exceeded memory limit (<rss> >
    <limit>)`` in the job's log (no cgroups: the job line shows FAILED with exit 9:0 or 0:9) or its cgroup message
    ``Detected <n> oom_kill event in StepId=<id>`` / ``<n> oom-kill event(s) in step <id> cgroup`` -> ``host_oom``;
    CANCELLED -> ``cancelled``; PREEMPTED -> ``preempted``; NODE_FAIL -> ``error`` of kind ``scheduler`` whose
    reason names the failed node(s) (``job["failed_nodes"]`` from :func:`node_failure`, else the job's node list
    ``job["nodes"]``); the other states as :data:`STATE_OUTCOMES` says (a state not there: ``error``/``crash``).
    Every record carries the job id, state, exit code, requested and elapsed time.
    """
    state, code = job["state"], job["exit_code"]
    sched = {
        "slurm_job_id": entry["job_id"],
        "slurm_state": state,
        "slurm_exit_code": code,
        "elapsed_s": job.get("elapsed_s"),
        "time_limit_s": job.get("time_limit_s"),
        "log_tail": log[-3000:],
    }
    times = f"ran {job.get('elapsed_s')} s of {job.get('time_limit_s')} s requested"
    kind = None
    mem = re.search(r"exceeded memory limit \((\d+) > (\d+)\)", log)
    # with cgroups, slurmstepd says the kernel's OOM killer ended the step: "Detected 1 oom_kill event in
    # StepId=1234.0" (SLURM 22+), "... oom-kill event(s) in step 1234.0 cgroup" (older)
    cgroup_oom = re.search(
        r"Detected (\d+) oom[-_]kill events?(?:\(s\))? in StepId=([\w.]+?)\.?(?=\s|$)"
        r"|(\d+) oom[-_]kill events?(?:\(s\))? in step ([\w.]+)",
        log,
    )
    if state == "TIMEOUT":
        status, reason = "timeout", f"SLURM time limit reached (job {entry['job_id']}, {times}); raise time_limit_min"
    elif state == "OUT_OF_MEMORY" or (state in ("FAILED", "CANCELLED") and (mem or cgroup_oom)):
        status = "host_oom"
        if mem:
            sched["host_rss_bytes"], sched["host_mem_limit_bytes"] = int(mem.group(1)), int(mem.group(2))
        how = ""
        if cgroup_oom:
            events, step = (cgroup_oom.group(1), cgroup_oom.group(2)) if cgroup_oom.group(1) else cgroup_oom.group(3, 4)
            sched["oom_kill_events"] = int(events)
            how = f", the kernel's OOM killer ended {events} process(es) of step {step} in the job's memory cgroup"
        reason = (
            f"killed by SLURM for exceeding its host memory request (job {entry['job_id']}, state {state} {code}"
            + (f", {int(mem.group(1)) / MIB:.0f} MiB used > {int(mem.group(2)) / MIB:.0f} MiB requested" if mem else "")
            + how
            + (f", {job['req_mem']} requested" if job.get("req_mem") and not mem else "")
            + "); raise cluster.mem"
        )
    elif state == "CANCELLED":
        status, reason = "cancelled", f"job {entry['job_id']} was cancelled ({job.get('reason') or 'scancel'}; {times})"
        if job.get("untraced"):
            reason = (
                f"job {entry['job_id']} left the queue before it started and SLURM kept no record of it (neither "
                "slurmctld nor accounting knows it): a job-array task cancelled while pending; resume to run it"
            )
    elif state == "PREEMPTED":
        status, reason = "preempted", f"job {entry['job_id']} was preempted and not requeued ({times})"
    elif state == "NODE_FAIL":
        status, kind = "error", "scheduler"
        failed = job.get("failed_nodes") or []
        sched["failed_nodes"] = [f["node"] for f in failed]
        if failed:
            what = ", ".join(f"{f['node']} ({f['reason'] or f['state']} at {f['time']})" for f in failed)
            lost = f"node{'s' if len(failed) > 1 else ''} {what} failed"
        else:
            lost = f"a node of its allocation {job.get('nodes') or ''} failed".replace("  ", " ")
        reason = (
            f"{lost} while job {entry['job_id']} ran (SLURM state NODE_FAIL, {times}); the point did not finish: "
            "run it again with launcher.rerun_statuses=[error]"
        )
    else:
        status, kind = STATE_OUTCOMES.get(state, ("error", "crash"))
        reason = f"job {entry['job_id']} ended {state} (exit {code}, {times}) without writing a result; see its log"
    return Record(
        sweep_id=sweep_id,
        point_id=pid,
        status=status,
        error_kind=kind,
        reason=reason,
        overrides=entry.get("overrides", []),
        spec=entry.get("spec", {}),
        replay=entry.get("replay", ""),
        failure=sched,
        env={"slurm_job_id": entry["job_id"]},
        wall_time_s=job.get("elapsed_s"),
    )


def reconcile(sweep: SweepDir) -> dict[str, str]:
    """Write a record for every submitted point (``submitted.json``, :meth:`SweepDir.submitted`) whose job SLURM
    has ended without one (a job writes its own record before it returns, so a final job state with no record means
    the job was ended from outside).

    Returns:
        ``{point_id: status}`` for every submitted point (``pending`` for jobs still queued or running).
    """
    submitted = sweep.submitted()
    statuses: dict[str, str] = {}
    open_points = {}
    for pid, entry in submitted.items():
        status = sweep.final_status(pid)
        if status is not None:
            statuses[pid] = status
        else:
            open_points[pid] = entry
    jobs = sacct([e["job_id"] for e in open_points.values()]) if open_points else {}
    waiting = [
        e["job_id"]
        for pid, e in open_points.items()
        if (jobs.get(e["job_id"]) or {}).get("state") not in FINAL_SLURM_STATES
    ]
    live = squeue(waiting)
    queue: dict[str, dict[str, Any]] = {}
    for pid, entry in open_points.items():
        job = jobs.get(entry["job_id"])
        seen = live.get(entry["job_id"])
        if job is None and seen is None and not controller_knows(entry["job_id"]):
            job = untraced_job()  # neither queued nor in accounting: a job-array task cancelled before it started
        if (
            (job is None or job["state"] not in FINAL_SLURM_STATES)
            and seen
            and seen["state"] == "PENDING"
            and (never_starts(seen["reason"]))
        ):
            record = never_started(entry, seen, sweep.sweep_id, pid)
            if sweep.final_status(pid) is None:
                sweep.write_record(record)
            statuses[pid] = sweep.final_status(pid) or record.status
            continue
        if job is None or job["state"] not in FINAL_SLURM_STATES:
            statuses[pid] = "pending"
            known = job or {}
            now: dict[str, Any] = seen or {"state": known.get("state", "PENDING"), "reason": known.get("reason")}
            queue[pid] = {
                "job_id": entry["job_id"],
                **now,
                "explained": pending_text(now["reason"]) if now["state"] == "PENDING" else None,
                "asked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            continue
        status = sweep.final_status(pid)
        if status is not None:
            statuses[pid] = status  # the job wrote it meanwhile
            continue
        if job["state"] == "NODE_FAIL":  # name the node that failed
            job = {**job, **node_failure(entry["job_id"])}
            if not job.get("failed_nodes") and job.get("ended_s_ago", NODE_EVENT_GRACE_S) < NODE_EVENT_GRACE_S:
                # slurmctld sends the node's event to accounting (slurmdbd) on its own time: ask again next pass
                statuses[pid] = "pending"
                continue
        record = record_from_scheduler(entry, job, _job_log(sweep, entry["job_id"]), sweep.sweep_id, pid)
        sweep.write_record(record)
        statuses[pid] = record.status
    sweep.set_queue(queue)
    return statuses
