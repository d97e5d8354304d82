"""The function a SLURM job runs for one point: every SLURM task is one rank (``srun``, started by submitit).

It is a small top-level callable taking plain data (docs/cases.md#p08: no loggers, trainers or locks are pickled;
they are built inside the job). The torch.distributed rendezvous comes from the SLURM environment (master address =
first node of the allocation, port derived from the job id outside the ephemeral range: :func:`rendezvous_port`;
:class:`submitit.helpers.TorchDistributedEnvironment`), so
the same job runs on N nodes x G GPUs. Rank 0 merges the rank files into the point's record with
:func:`sweeper.point.lifecycle.finish`, as the local driver does.

Scheduler signals: SLURM sends USR2 ``signal_delay_s`` before the time limit (and on some clusters before
preemption). submitit calls :meth:`SlurmPoint.checkpoint` on rank 0. submitit's own rule (timed out after 80 % of
the limit or 10 minutes before it) calls every short job a timeout; here a signal is a timeout only when it
arrives where the time limit puts it (elapsed >= limit - signal delay - 60 s), else it is a preemption, requeued up
to ``max_requeues`` times. A requeued job starts again from scratch (a benchmark point has no state worth
resuming); ``SLURM_RESTART_COUNT`` counts the restarts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import submitit

from sweeper.envinfo import slurm_job_id
from sweeper.results.rankfile import RankFile, rank_file_path, read_rank_files
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir

RANK_FILES_WAIT_S = 120.0


class SlurmPoint(submitit.helpers.Checkpointable):
    """Callable submitted once per point: ``SlurmPoint(max_requeues, signal_delay_s)(payload)``.

    ``payload`` (plain data): :meth:`sweeper.point.lifecycle.Prepared.to_payload` plus ``time_limit_s``.
    """

    def __init__(self, max_requeues: int, signal_delay_s: int) -> None:
        self.max_requeues = max_requeues
        self.signal_delay_s = signal_delay_s
        self._t0 = time.time()
        self._payload: dict[str, Any] | None = None

    def __call__(self, payload: dict[str, Any]) -> str:
        from sweeper.envinfo import environment
        from sweeper.job.harness import run_rank
        from sweeper.point.lifecycle import Prepared, finish

        self._t0 = time.time()
        self._payload = payload
        job_env = submitit.JobEnvironment()
        rank = job_env.global_rank
        sweep = SweepDir(Path(payload["sweep_dir"]), payload["sweep_id"])
        pid = payload["point_id"]
        pdir = sweep.point(pid)
        done = sweep.final_status(pid)
        if done:  # never run a finished point twice (a duplicate submission after a resume)
            return done
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if restarts > self.max_requeues:
            if rank == 0:
                self._write(
                    "preempted",
                    f"preempted {restarts} times (more than cluster.max_requeues={self.max_requeues}); "
                    "use a partition or QOS without preemption, or raise max_requeues",
                )
            return "preempted"
        # a port outside Linux's ephemeral range, from the job id (every node derives the same), unless the site set one
        os.environ.setdefault("MASTER_PORT", str(rendezvous_port(submitit.JobEnvironment().job_id)))
        dist_env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        # the first node's address as SLURM knows it, not its name (which need not resolve to the right interface)
        os.environ["MASTER_ADDR"] = master_addr = rendezvous_address(dist_env.master_addr)
        rank_file_path(pdir, rank).unlink(missing_ok=True)
        t_start = time.perf_counter()
        code = run_rank(pdir)
        if rank != 0:
            return "rank-done"
        done = sweep.final_status(pid)
        if done:  # the time-limit signal arrived and the timeout is already recorded
            return done
        prepared = Prepared.from_payload(payload)
        ranks = _wait_for_rank_files(pdir, prepared.spec.world_size)
        env = environment()
        env["device_type"] = "cuda" if ranks and ranks[0].get("device_name") else "cpu"
        # the job is still RUNNING when it writes its own record; its final state/exit code are in sacct
        env.update(
            slurm_restart_count=restarts,
            slurm_time_limit_s=payload.get("time_limit_s"),
            slurm_elapsed_s=round(time.time() - self._t0, 1),
            slurm_master_addr=master_addr,
        )
        record = finish(
            prepared,
            ranks,
            returncode=code,
            timed_out=False,
            log_tail="",
            wall_time_s=time.perf_counter() - t_start,
            env=env,
        )
        return record.status

    # submitit calls it with the job's own arguments (DelayedSubmission._checkpoint_function, typed Optional) and
    # takes None for "do not requeue" (core/job_environment._checkpoint); only the base class's stub says
    # (*args, **kwargs) -> DelayedSubmission
    def checkpoint(self, payload: dict[str, Any]) -> submitit.helpers.DelayedSubmission | None:  # type: ignore[override]
        """USR2 on rank 0: record a timeout (no requeue) or requeue a preempted point (see the module doc)."""
        elapsed = time.time() - self._t0
        limit = payload.get("time_limit_s") or 0
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        job = slurm_job_id()
        if signal_cause(elapsed, limit, self.signal_delay_s) == "timeout":
            status = "timeout"
            reason = (
                f"SLURM time limit: signalled after {elapsed:.0f} s of {limit} s requested (job {job}); "
                "raise cluster.time_limit_min or timeout_s"
            )
        elif restarts >= self.max_requeues:
            status = "preempted"
            reason = (
                f"preempted after {elapsed:.0f} s of {limit} s, already requeued {restarts} times "
                f"(cluster.max_requeues={self.max_requeues})"
            )
        else:
            return submitit.helpers.DelayedSubmission(self, payload)  # requeue: the point starts again
        self._write(status, reason, failure={"elapsed_s": elapsed, "time_limit_s": limit, "slurm_job_id": job})
        return None

    def _write(self, status: str, reason: str, failure: dict[str, Any] | None = None) -> None:
        from sweeper.envinfo import environment
        from sweeper.point.lifecycle import Prepared, write

        p = self._payload or {}
        prepared = Prepared.from_payload(p)
        if prepared.sweep.final_status(prepared.point_id):
            return
        write(prepared.sweep, Record(**prepared.base(environment()), status=status, reason=reason, failure=failure))


#: The ports :func:`rendezvous_port` draws from: above the well-known and most registered service ports, below
#: Linux's default ephemeral range (``net.ipv4.ip_local_port_range`` = 32768-60999), where an outgoing connection of
#: any process on the node (a gloo pair of another point, slurmd) may already hold the port.
RENDEZVOUS_PORTS = range(20000, 32768)


def rendezvous_port(job_id: str) -> int:
    """The torch.distributed rendezvous port (``MASTER_PORT``) of SLURM job ``job_id`` (an array task's id
    ``<array>_<task>`` included): a stable hash of the id into :data:`RENDEZVOUS_PORTS`, so every node of the job
    computes the same port without talking to the others. submitit's own choice (``random.Random(job_id)`` in
    20000-60000) falls in the ephemeral range two times in three: a point failed in CI with "The server socket
    has failed to listen on any local network address. port: 50166"."""
    import zlib

    return RENDEZVOUS_PORTS.start + zlib.crc32(str(job_id).encode()) % len(RENDEZVOUS_PORTS)


def rendezvous_address(node: str, timeout_s: float = 10.0) -> str:
    """The address of SLURM node ``node`` for the torch.distributed rendezvous (``MASTER_ADDR``).

    ``NodeAddr`` from ``scontrol show node`` (the address slurmctld itself uses), so the rendezvous does not depend on
    the node's name resolving to the interface the ranks share (the two-host development cluster: node ``dev2n1``
    is ``10.231.7.11`` in its network namespace). Where NodeAddr is not set SLURM reports the name, so nothing
    changes; ``node`` itself when scontrol is missing, fails or takes longer than ``timeout_s`` seconds.
    """
    import re
    import subprocess

    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "-o", node], capture_output=True, text=True, timeout=timeout_s
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return node
    m = re.search(r"(?:^|\s)NodeAddr=(\S+)", out)
    return m.group(1) if m else node


def signal_cause(elapsed_s: float, time_limit_s: float, signal_delay_s: float, slack_s: float = 60.0) -> str:
    """Why SLURM signalled a job: ``timeout`` when the signal came where the time limit puts it (elapsed >=
    limit - signal delay - slack; slurmctld checks limits about every 30 s), else ``preempted``.

    submitit's own rule (elapsed >= min(0.8 x limit, limit - 10 min)) calls a signal after 50 s of a 1-minute job,
    but also one after 20 min of a 30-min job, a timeout; this rule only looks at where the limit is.
    """
    if time_limit_s and elapsed_s >= time_limit_s - signal_delay_s - slack_s:
        return "timeout"
    return "preempted"


def _wait_for_rank_files(pdir: Path, world_size: int) -> list[RankFile]:
    """The ranks' files, in rank order, waiting (at most :data:`RANK_FILES_WAIT_S` seconds) for ranks that finish a
    little after rank 0 (:func:`sweeper.results.rankfile.read_rank_files`, the reader every launcher uses)."""
    deadline = time.monotonic() + RANK_FILES_WAIT_S
    while True:
        present = [r for r in range(world_size) if rank_file_path(pdir, r).exists()]
        if len(present) == world_size or time.monotonic() > deadline:
            return read_rank_files(pdir, present)
        time.sleep(0.5)
