"""Sweeps on the real development SLURM cluster (``bash slurm/dev-cluster.sh start``; CI starts it).

Each point is one task of a SLURM job array and each of its ranks a SLURM task (srun via submitit). The scheduler's
outcomes (time limit, memory kill, scancel) become records; a sweep can be submitted, left and collected later,
and a sweep whose submitting process was killed is resumed to completion with every point run exactly once.

The time-limit point takes the longest (SLURM's shortest limit is a minute; slurmctld checks limits every 30 s and
may send the job's warning signal, ``cluster.signal_delay_s``, up to a minute early, so its record comes anywhere
from about 20 to 90 s after the job starts): its sweep runs in the background (``time_limit_run``) with one rank,
so one core, while the one-rank sweeps of the tests after it run on the other core; its test, the last, waits for
it. The 2x2 grid and the preemption test need both cores: they run before it starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from sweeper.results.sweepdir import SweepDir
from tests.conftest import NEEDS_DEV_SLURM, REPO, SLURM_FEW_STEPS, run_sweeper, start_sweeper

pytestmark = [
    pytest.mark.slow,
    pytest.mark.slurm,
    NEEDS_DEV_SLURM,
]

SLURM = ["launcher=slurm", "cluster=dev", "launcher.poll_interval_s=1"]
FEW_STEPS = SLURM_FEW_STEPS
# slurm_2x2 (tests/conftest.py, one per session): -m fsdp=none,full_shard gc=true,false with FEW_STEPS and SLURM
FAULTS = "tests.faults"
#: The sweeps that run beside the time-limit point: one rank each (one core of the dev node's two).
ONE_RANK = "ranks_per_node=1"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("SWEEPER_SWEEP_ID", None)
    return env


def _sacct_array_ids(sweep_dir: Path) -> set[str]:
    return {e["job_id"].split("_")[0] for e in json.loads((sweep_dir / "submitted.json").read_text()).values()}


def test_the_2x2_grid_runs_as_one_job_array_with_two_ranks_as_two_slurm_tasks(slurm_2x2):
    records = slurm_2x2.records()
    assert len(records) == 4 and [r.status for r in records] == ["ok"] * 4, [r.reason for r in records]
    assert len(_sacct_array_ids(slurm_2x2.sweep_dir)) == 1  # one sbatch --array
    for r in records:
        assert r.ran["world_size"] == 2
        assert "_" in r.env["slurm_job_id"]  # <array>_<task>
        assert r.env["slurm_time_limit_s"] == 900  # ceil(timeout_s / 60) minutes
        assert 0 < r.env["slurm_elapsed_s"] < 900
        job = slurm_2x2.sweep_dir / "slurm" / r.env["slurm_job_id"]
        assert sorted(p.name for p in job.glob("*_log.out")) == [
            f"{r.env['slurm_job_id']}_0_log.out",
            f"{r.env['slurm_job_id']}_1_log.out",
        ]  # two SLURM tasks


def test_the_slurm_report_matches_the_local_one(slurm_2x2):
    """Same statuses, labels, sharding and checkpointing effect as the local 2x2 sweep (timings differ)."""
    df = pd.read_csv(slurm_2x2.sweep_dir / "results.csv").set_index(["fsdp", "gc"])
    assert (df["status"] == "ok").all()
    for gc in (True, False):
        assert df.loc[("full_shard", gc), "optimizer_state_bytes_per_rank"] == pytest.approx(
            df.loc[("none", gc), "optimizer_state_bytes_per_rank"] / 2, rel=0.02
        )
    for fsdp in ("none", "full_shard"):
        assert df.loc[(fsdp, True), "peak_mem_bytes"] < df.loc[(fsdp, False), "peak_mem_bytes"]
    assert df["on_frontier"].any()
    assert slurm_2x2.last_line.startswith("Report: ")


def _squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    return out.splitlines()[0] if out else ""


def _wait_state(job_id: str, state: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while _squeue_state(job_id) != state:
        assert time.monotonic() < deadline, f"job {job_id} never reached {state} (now {_squeue_state(job_id)!r})"
        time.sleep(1)


def _starts(sweep_dir: Path) -> int:
    """How many times submitit started a task of this sweep's jobs (its stdout log line per start, appended on requeue)."""
    return sum(p.read_text(errors="replace").count("Starting with") for p in sweep_dir.glob("slurm/*/*_log.out"))


def _wait_started(sweep_dir: Path, more_than: int, timeout_s: float = 120) -> int:
    """Poll until the job's tasks have started more than ``more_than`` times; return the new count."""
    deadline = time.monotonic() + timeout_s
    while (n := _starts(sweep_dir)) <= more_than:
        assert time.monotonic() < deadline, f"no new task start after {more_than}"
        time.sleep(0.5)
    return n


def _preempt(job_id: str) -> None:
    """Run a job in the higher-priority partition that needs the whole node: SLURM requeues ours."""
    subprocess.run(
        ["sbatch", "-p", "urgent", "-c", "2", "--mem=100M", "--output=/dev/null", "--wrap", "sleep 1"],
        check=True,
        capture_output=True,
    )
    _wait_state(job_id, "PENDING")
    # SLURM holds a requeued job for 2 minutes (BeginTime); let it start again now
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)


def test_a_preempted_point_is_requeued_up_to_max_requeues_then_recorded_as_preempted(tmp_path):
    run = run_sweeper(
        [
            "-m",
            "launcher.wait=false",
            "cluster.max_requeues=1",
            f"+callbacks=[{{_target_:{FAULTS}.HangRank,at_step:2,rank:1}}]",
            *SLURM,
        ],
        tmp_path,
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    (entry,) = json.loads((run.sweep_dir / "submitted.json").read_text()).values()
    job = entry["job_id"]
    _wait_state(job, "RUNNING")
    started = _wait_started(run.sweep_dir, 0)
    _preempt(job)  # first preemption: requeued (1 <= max_requeues), runs again
    _wait_state(job, "RUNNING")
    _wait_started(run.sweep_dir, started)  # the requeued job really started again
    _preempt(job)  # second: over the budget, the restarted job records preempted
    deadline = time.monotonic() + 120
    while not list(run.sweep_dir.glob("points/*/result.json")):
        assert time.monotonic() < deadline, "no record after the second preemption"
        time.sleep(1)
    (r,) = SweepDir(run.sweep_dir).records()
    assert r.status == "preempted", r.reason
    assert "preempted 2 times" in r.reason and "max_requeues=1" in r.reason
    assert r.env["slurm_job_id"] == job


@pytest.fixture(scope="module")
def time_limit_run(tmp_path_factory):
    """The time-limit test's sweep, started by the first test that asks for it and left running (module docstring):
    one point, one rank that hangs at step 2 until SLURM's time limit of one minute ends its job."""
    started = start_sweeper(
        [
            "-m",
            ONE_RANK,
            "timed_steps=3",
            "cluster.time_limit_min=1",
            f"+callbacks=[{{_target_:{FAULTS}.HangRank,at_step:2,rank:0}}]",
            *SLURM,
        ],
        tmp_path_factory.mktemp("time_limit"),
    )
    yield started
    started.wait()  # never leave its job to the next module


def test_a_point_over_its_memory_request_is_recorded_as_killed_for_memory(tmp_path, time_limit_run):
    run = run_sweeper(["-m", ONE_RANK, "timed_steps=3", "cluster.mem=300M", *SLURM], tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    (r,) = run.records()
    assert r.status == "host_oom", r.reason
    assert r.failure["slurm_state"] in ("FAILED", "OUT_OF_MEMORY") and "9" in r.failure["slurm_exit_code"]
    assert r.failure["host_mem_limit_bytes"] == 300 * 2**20
    assert r.failure["host_rss_bytes"] > r.failure["host_mem_limit_bytes"]
    assert "cluster.mem" in r.reason


def test_submit_and_return_then_cancel_one_point_and_collect_later(tmp_path, time_limit_run):
    run = run_sweeper(
        [
            "-m",
            ONE_RANK,
            "launcher.wait=false",
            *FEW_STEPS,
            f"+callbacks=[],[{{_target_:{FAULTS}.HangRank,at_step:2,rank:0}}]",
            *SLURM,
        ],
        tmp_path,
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    assert "2 point(s) submitted, 2 pending" in run.output  # returned right after sbatch, without waiting
    assert "sweeper.status" in run.output
    submitted = json.loads((run.sweep_dir / "submitted.json").read_text())
    hang = next(e for e in submitted.values() if e["spec"]["callbacks"])
    status = subprocess.run(
        [sys.executable, "-m", "sweeper.status", str(run.sweep_dir)], capture_output=True, text=True, env=_env()
    )
    assert status.returncode == 3 and "pending" in status.stdout  # 3 = some points still pending
    subprocess.run(["scancel", hang["job_id"]], check=True)
    deadline = time.monotonic() + 120  # the other point runs in about 10-25 s
    while True:
        status = subprocess.run(
            [sys.executable, "-m", "sweeper.status", str(run.sweep_dir)], capture_output=True, text=True, env=_env()
        )
        if status.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert status.returncode == 0, status.stdout
    report = subprocess.run(
        [sys.executable, "-m", "sweeper.report", str(run.sweep_dir)], capture_output=True, text=True, env=_env()
    )
    assert report.returncode == 0, report.stderr
    by_callbacks = {bool(r.spec["callbacks"]): r for r in SweepDir(run.sweep_dir).records()}
    assert by_callbacks[False].status == "ok"
    assert by_callbacks[True].status == "cancelled"
    assert by_callbacks[True].failure["slurm_job_id"] == hang["job_id"]
    assert "cancelled" in (run.sweep_dir / "report.md").read_text()


def test_a_sweep_whose_submitting_process_was_killed_is_resumed_with_every_point_once(tmp_path, time_limit_run):
    grid = ["-m", ONE_RANK, "gc=true,false", *FEW_STEPS]
    cmd = [sys.executable, "-m", "sweeper", *grid, *SLURM]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:  # kill the submitter right after sbatch, while the jobs are queued/running
        if line.startswith("sbatch:"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    (sweep_dir,) = (tmp_path / "multirun").iterdir()
    assert not list(sweep_dir.glob("points/*/result.json")) or len(list(sweep_dir.glob("points/*/result.json"))) < 2
    resumed = run_sweeper([*grid, f"hydra.sweep.dir={sweep_dir}", *SLURM], tmp_path)
    assert resumed.proc.returncode == 0, resumed.output[-3000:]
    records = SweepDir(sweep_dir).records()
    assert sorted(r.spec["gc"] for r in records) == [False, True]
    assert [r.status for r in records] == ["ok", "ok"]
    submitted = json.loads((sweep_dir / "submitted.json").read_text())
    assert all(len(e["attempts"]) == 1 for e in submitted.values())  # never submitted twice
    assert json.loads((sweep_dir / "sweep.json").read_text())["resumed"] == 1
    # and a third run on the finished directory launches nothing
    again = run_sweeper([*grid, f"hydra.sweep.dir={sweep_dir}", *SLURM], tmp_path)
    assert again.proc.returncode == 0
    assert "sbatch:" not in again.output
    assert [r.status for r in SweepDir(sweep_dir).records()] == ["ok", "ok"]


def test_a_point_past_its_time_limit_is_recorded_as_timeout(time_limit_run):
    run = time_limit_run.wait()
    assert run.proc.returncode == 0, run.output[-3000:]
    (r,) = run.records()
    assert r.status == "timeout", r.reason
    assert "time limit" in r.reason
    assert r.failure["time_limit_s"] == 60
