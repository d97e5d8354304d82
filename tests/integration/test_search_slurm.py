"""``search=frontier`` through SLURM on the development cluster: the same search, its jobs submitted by the SLURM
launcher (the first two in full, then screens and their promotions), every point of the grid ending with a final
record, a promoted point's record holding its full window and its screen kept as history (``result.0.json``) with
both SLURM job ids in ``submitted.json``.

Promotion is asynchronous: the dev cluster runs one 2-rank job at a time (2 cores), so of the first two jobs the
second starts when the first ends; the search reads the first's record and submits the next job (a screen) while the
second still runs. SLURM's own accounting proves it: some job of the search was submitted after another had started
and before it ended (with rounds, every later submission waits for the end of every earlier job)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta

import pytest

from sweeper.results.record import read_record
from sweeper.results.sweepdir import SweepDir
from tests.conftest import NEEDS_DEV_SLURM, run_sweeper
from tests.integration.test_search_frontier import ARGS as LOCAL_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.slurm, NEEDS_DEV_SLURM]

ARGS = [
    *LOCAL_ARGS,
    "launcher=slurm",
    "cluster=dev",
    "launcher.poll_interval_s=1",
]


def test_a_frontier_search_through_slurm_screens_promotes_and_records_every_point(tmp_path):
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper([*ARGS, f"hydra.sweep.dir={sweep_dir}"], tmp_path)
    assert run.proc.returncode == 0, run.output[-4000:]
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
