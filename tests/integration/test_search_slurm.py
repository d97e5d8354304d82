"""``search=frontier`` through SLURM on the development cluster: the same search, its jobs submitted by the SLURM
launcher (the first two in full, then screens and their promotions), every point of the grid ending with a final
record, a promoted point's record holding its full window and its screen kept as history (``result.0.json``) with
both SLURM job ids in ``submitted.json``.

Promotion is asynchronous. The search runs one rank per point here, two jobs at a time on the dev cluster's two
cores (``cluster.array_parallelism=2``): when a job ends, the search reads its record and submits the next job (a
screen, or a promotion) while the other still runs. SLURM's own accounting and the records prove it: some job of the
search was submitted after another had started and at least a second before that one wrote its record (with rounds,
every later submission waits for every earlier record). With two ranks per point the cluster runs one job at a
time, and a job's end in SLURM comes seconds after its record: the next job of the search is then submitted while
the other waits in the queue, not while it runs.

A search killed while its jobs run on SLURM resumes: the jobs still queued or running are waited for, not decided or
submitted again; every job submitted ends with its record."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from sweeper.results.record import read_record
from sweeper.results.sweepdir import SweepDir
from tests.conftest import NEEDS_DEV_SLURM, REPO, run_sweeper
from tests.integration.test_search_frontier import ARGS as LOCAL_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.slurm, NEEDS_DEV_SLURM]

ARGS = [
    *LOCAL_ARGS,
    "launcher=slurm",
    "cluster=dev",
    "launcher.poll_interval_s=1",
]


#: Two one-rank jobs at once on the dev cluster's two cores; of the two jobs of one submission, the first ends 8 s
#: after the other (tests.faults.SlowFirstArrayTask): equal jobs submitted together end within the search's poll
#: interval of each other, and the next submission would then find neither running, by chance.
SIDE_BY_SIDE = [
    "ranks_per_node=1",
    "cluster.array_parallelism=2",
    "+callbacks=[{_target_:tests.faults.SlowFirstArrayTask,seconds:8}]",
]


def test_a_frontier_search_through_slurm_screens_promotes_and_records_every_point(tmp_path):
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper([*ARGS, *SIDE_BY_SIDE, f"hydra.sweep.dir={sweep_dir}"], tmp_path)
    assert run.proc.returncode == 0, run.output[-4000:]
    # its jobs are numbered without a total, as locally: they are submitted as jobs end, a point maybe twice
    labels = re.findall(r"^\[(\d+)(?:/(\d+))?\] ", run.output, flags=re.M)
    assert labels and all(total == "" for _, total in labels), labels
    sweep = SweepDir(sweep_dir)
    records = {r.point_id: r for r in sweep.records()}
    assert len(records) == 4 and {r.status for r in records.values()} <= {"ok", "skipped"}
    assert any(r.status == "ok" for r in records.values())
    submitted = sweep.submitted()
    for pid, r in records.items():
        older = [read_record(p) for p in sorted(sweep.point(pid).glob("result.*.json"))]
        assert [h.screen for h in older] in ([], [True]), pid
        assert all(h.env.get("slurm_job_id") for h in older)
        if r.status == "ok":
            assert not r.screen and r.metrics["timed_steps"] == 6
            assert len(submitted[pid]["attempts"]) == 1 + len(older)  # a screen's job, then the full window's
        else:
            assert r.search["decision"] in ("screen-dominated", "predicted-dominated")
    log = json.loads(sweep.search_file.read_text())
    assert log["rounds"][0]["screens"] == 0 and len(log["rounds"]) >= 2 and log["stop"]
    assert_submitted_while_another_ran(sweep, log)


def _popen(sweep_dir: Path, cwd: Path, log: Path) -> subprocess.Popen:
    """The search's command (``ARGS``) as its own process group, its output in ``log``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    env["WANDB_MODE"] = "disabled"
    env.pop("SWEEPER_SWEEP_ID", None)
    cmd = [sys.executable, "-m", "sweeper", *ARGS, f"hydra.sweep.dir={sweep_dir}"]
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _until(what, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    """Poll ``what()`` every 0.2 s until it is true, while ``proc`` runs (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not what() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)


def test_a_search_killed_with_jobs_in_flight_resumes_waiting_for_them(tmp_path: Path):
    """The driver is killed (SIGKILL of its process group; the SLURM jobs are not in it) once its second submission,
    a screen, is queued behind a running job; that job is held (``scontrol hold``) so that it is surely still
    queued when the same command resumes. The resumed search says it waits for it (not deciding or submitting its
    point again), the job is released, and the search ends with a final record for every point; every job ever
    submitted wrote one record, and no point was measured in full twice."""
    sweep_dir, sweep = tmp_path / "sweep", SweepDir(tmp_path / "sweep")

    def jobs() -> list[str]:
        entries = sweep.submitted().values() if sweep.submitted_file.exists() else []
        return sorted((j for e in entries for j in e["attempts"]), key=lambda j: [int(n) for n in j.split("_")])

    def resumed_said() -> str:
        return (tmp_path / "resumed.log").read_text()

    driver = _popen(sweep_dir, tmp_path, tmp_path / "killed.log")
    resumed, held = None, None
    try:
        _until(lambda: len(jobs()) >= 3, driver)
        assert driver.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
        held = jobs()[-1]  # the screen's job, queued behind the second job of the first submission
        subprocess.run(["scontrol", "hold", held], check=True, capture_output=True, timeout=60)
        os.killpg(driver.pid, signal.SIGKILL)  # the group this test started: the driver only
        driver.wait()
        (waiting,) = [pid for pid, e in sweep.submitted().items() if held in e["attempts"]]
        resumed = _popen(sweep_dir, tmp_path, tmp_path / "resumed.log")
        _until(lambda: "of an earlier run still queued or running" in resumed_said(), resumed)
        assert "still queued or running, waited for: " in resumed_said() and waiting in resumed_said(), resumed_said()
        subprocess.run(["scontrol", "release", held], check=True, capture_output=True, timeout=60)
        held = None
        assert resumed.wait(timeout=600) == 0, resumed_said()[-4000:]
    finally:
        if held is not None:
            subprocess.run(["scancel", held], capture_output=True, timeout=60)  # leave the cluster as it was
        if resumed is not None and resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
    records = {r.point_id: r for r in sweep.records()}
    assert len(records) == 4 and {r.status for r in records.values()} <= {"ok", "skipped"}
    for pid, entry in sweep.submitted().items():
        ran = [r for path in sweep.point(pid).glob("result*.json") if (r := read_record(path)).env.get("slurm_job_id")]
        assert sorted(str(r.env["slurm_job_id"]) for r in ran) == sorted(entry["attempts"]), pid  # one record a job
        assert [r.screen for r in ran].count(False) <= 1, pid  # measured in full at most once
    log = json.loads(sweep.search_file.read_text())
    assert log["stop"] and log["cost"]["grid_points"] == 4


def _times(job_ids: list[str]) -> dict[str, dict[str, datetime]]:
    """``{job_id: {"submit", "start"}}`` from SLURM accounting (``sacct -X``: whole seconds, this machine's local
    time, as ``datetime.fromtimestamp`` gives a file's time); a job that never started has no ``start``."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,Submit,Start", "-j", ",".join(job_ids)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    found: dict[str, dict[str, datetime]] = {}
    for line in out.stdout.splitlines():
        job, *stamps = line.strip().split("|")
        if job in job_ids:  # "Unknown" or "None" for a time not reached
            found[job] = {
                k: datetime.fromisoformat(v)
                for k, v in zip(("submit", "start"), stamps, strict=True)
                if v[:1].isdigit()
            }
    return found


def _recorded(sweep: SweepDir) -> dict[str, datetime]:
    """``{job_id: when its job wrote its record}``: every record a job wrote (``env.slurm_job_id``), screens set
    aside included (a final record is never rewritten; setting it aside renames it, its time is kept)."""
    out = {}
    for path in sweep.points_dir.glob("*/result*.json"):
        job = read_record(path).env.get("slurm_job_id")
        if job:
            out[str(job)] = datetime.fromtimestamp(path.stat().st_mtime)
    return out


def assert_submitted_while_another_ran(sweep: SweepDir, log: dict) -> None:
    """Some job Y of the search was submitted while another job X ran: X had started by the second Y was
    submitted, and X wrote its record at least a second after it (SLURM's times are whole seconds). With rounds no
    job could: a round is submitted once every record of the last exists. The search's log says the same: which
    jobs were in flight at each submission, never more than ``search.batch_size`` jobs at once."""
    jobs = [job for entry in sweep.submitted().values() for job in entry["attempts"]]
    times, recorded = _times(jobs), _recorded(sweep)
    assert sorted(times) == sorted(jobs) == sorted(recorded), (jobs, times, recorded)
    array = {job: job.split("_")[0] for job in jobs}  # the jobs of one submission share an array

    def running(x: str, when: datetime) -> bool:
        return times[x].get("start", when + timedelta(1)) <= when and recorded[x] >= when + timedelta(seconds=1)

    overlaps = [(y, x) for y in jobs for x in jobs if array[x] != array[y] and running(x, times[y]["submit"])]
    assert overlaps, (times, recorded)
    assert any(r["in_flight"] for r in log["rounds"][1:]), log["rounds"]  # the driver's side of it
    assert all(len(r["in_flight"]) + len(r["points"]) <= 2 for r in log["rounds"])  # search.batch_size=2
