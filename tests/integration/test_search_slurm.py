"""``search=frontier`` through SLURM on the development cluster: the same search, its rounds submitted as job
arrays by the SLURM launcher (a first round in full, then screens and their promotions), every point of the grid ending with a final
record, a promoted point's record holding its full window and its screen kept as history (``result.0.json``) with
both SLURM job ids in ``submitted.json``."""

from __future__ import annotations

import json

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
