"""Smoke tests for the development SLURM cluster (slurm/dev-cluster.sh).

Skipped unless a cluster is reachable: start it first and export the path it prints, e.g.
    eval "$(bash slurm/dev-cluster.sh start | tail -n 1)"
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        not os.environ.get("SLURM_CONF"),
        reason="SLURM_CONF not set: no dev SLURM cluster running "
        "(start one with `bash slurm/dev-cluster.sh start` and export SLURM_CONF)",
    ),
    pytest.mark.skipif(shutil.which("sinfo") is None, reason="sinfo not on PATH: SLURM client tools not installed"),
]

JOB_TIMEOUT_S = 60
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


def run(*cmd: str, timeout: float = 30) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout).stdout


def sbatch(tmp_path: Path, *args: str) -> str:
    out = run("sbatch", "--parsable", f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out", "--time=2", *args)
    return out.strip().split(";")[0]


def wait_final(job_id: str, timeout: float = JOB_TIMEOUT_S) -> tuple[str, str]:
    """Poll sacct until the job (allocation line) is in a final state; return (State, ExitCode).

    The newest job with that id: a dev cluster whose controller state was reset (docs: benchmarks/README.md) numbers
    its jobs from 1 again, and accounting still holds the old jobs with the same ids (sacct -D lists them all)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        last = run("sacct", "-n", "-P", "-X", "-D", "-j", job_id, "-o", "Submit,State,ExitCode").strip()
        if last:
            _, state, exit_code = max(line.split("|") for line in last.splitlines())  # ISO Submit times sort
            state = state.split()[0]  # "CANCELLED by 0" -> "CANCELLED"
            if state in FINAL_STATES:
                return state, exit_code
        time.sleep(0.5)
    squeue = run("squeue", "-j", job_id)
    pytest.fail(f"job {job_id} not finished after {timeout}s; sacct: {last!r}; squeue:\n{squeue}")


def test_node_is_up():
    states = run("sinfo", "-h", "-N", "-o", "%t").split()
    assert states and all(s in {"idle", "mix", "alloc"} for s in states), states


def test_simple_job_completes(tmp_path):
    job = sbatch(tmp_path, "--wrap", "echo hi")
    assert wait_final(job) == ("COMPLETED", "0:0")
    assert (tmp_path / f"{job}.out").read_text().strip() == "hi"


def test_gpu_gres_job_schedules(tmp_path):
    job = sbatch(tmp_path, "--gres=gpu:2", "--wrap", 'echo "gpus=$CUDA_VISIBLE_DEVICES"')
    assert wait_final(job) == ("COMPLETED", "0:0")
    assert (tmp_path / f"{job}.out").read_text().strip() == "gpus=0,1"  # fake devices, see slurm/gres.conf.in


def test_two_task_job_runs_srun_twice(tmp_path):
    job = sbatch(tmp_path, "--ntasks=2", "--mem-per-cpu=100M", "--wrap", "srun hostname")
    assert wait_final(job) == ("COMPLETED", "0:0")
    lines = (tmp_path / f"{job}.out").read_text().split()
    assert len(lines) == 2 and len(set(lines)) == 1, lines
