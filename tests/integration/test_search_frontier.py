"""``search=frontier`` for real: a local multirun of the tiny model on 2 CPU gloo ranks (4 points, 2 a round; from the
second round on every point is screened first), its driver killed (SIGKILL of its process group) once the first record exists, then resumed with
the same ``hydra.sweep.dir``: the search goes on from the records, runs no final point again, and ends with a final
record for every point of the grid, full-window numbers in every ``ok`` one and each screen kept as history."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeper.results.record import read_record
from sweeper.results.sweepdir import SweepDir
from tests.conftest import REPO, run_sweeper

pytestmark = pytest.mark.slow

#: The 4-point search both search tests run (tests/integration/test_search_slurm.py adds the SLURM keys).
ARGS = [
    "-m",
    "gc=false,true",
    "per_device_batch_size=2,4",
    "search=frontier",
    "search.screen=always",
    "search.batch_size=2",
    "warmup_steps=1",
    "timed_steps=6",
    "memory_steps=1",
    "profile_steps=0",
    "profile_trace=false",
    "wandb=off",
]


def _finals(sweep_dir: Path) -> dict[str, int]:
    """Point id -> mtime (ns) of its ``result.json``."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (sweep_dir / "points").glob("*/result.json")}


def test_a_killed_search_resumes_and_ends_with_a_final_full_window_record_for_every_point(tmp_path: Path):
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    env.pop("SWEEPER_SWEEP_ID", None)
    cmd = [sys.executable, "-m", "sweeper", *ARGS, f"hydra.sweep.dir={sweep_dir}"]
    with open(tmp_path / "killed.log", "w") as log:
        driver = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while not _finals(sweep_dir) and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.5)
        assert driver.poll() is None, "the search ended before its kill"
        os.killpg(driver.pid, signal.SIGKILL)  # the group this test started: the driver and its ranks
        driver.wait()
    before = _finals(sweep_dir)
    assert before, (tmp_path / "killed.log").read_text()[-3000:]
    kept = {pid: t for pid, t in before.items() if not read_record(sweep_dir / "points" / pid / "result.json").screen}
    run = run_sweeper([*ARGS, f"hydra.sweep.dir={sweep_dir}"], tmp_path)
    assert run.proc.returncode == 0, run.output[-4000:]
    # its jobs are numbered without the grid's size as a total: a promoted screen is a second job of one point
    labels = re.findall(r"^\[(\d+)(?:/(\d+))?\] ", run.output, flags=re.M)
    assert labels and all(total == "" for _, total in labels), labels
    sweep = SweepDir(sweep_dir)
    records = {r.point_id: r for r in sweep.records()}
    assert len(records) == 4 and {r.status for r in records.values()} <= {"ok", "skipped"}
    after = _finals(sweep_dir)
    assert all(after[pid] == t for pid, t in kept.items())  # a final record of the killed run was not redone
    screened = 0
    for pid, r in records.items():
        older = [read_record(p) for p in sorted(sweep.point(pid).glob("result.*.json"))]
        assert [h.screen for h in older] in ([], [True]), pid  # screened at most once, the screen kept as history
        screened += bool(older)
        assert all(h.metrics["timed_steps"] == 3 for h in older)
        if r.status == "ok":
            assert not r.screen and r.metrics["timed_steps"] == 6  # the record holds the full window's numbers
        elif r.search["decision"] == "screen-dominated":
            assert older and r.search["screen_record"] == "result.0.json"
        else:
            assert r.search["decision"] == "predicted-dominated" and not older
    log = json.loads(sweep.search_file.read_text())
    assert log["stop"] and log["cost"]["grid_points"] == 4 and log["cost"]["screened"] == screened
    assert log["rounds"][0]["screens"] == 0  # nothing measured in full yet: a screen could only be promoted
    report = sweep.report_md.read_text()
    assert report.splitlines()[2].startswith("**Frontier search** (`search=frontier`")


def test_a_search_finds_the_records_of_points_whose_entries_the_libraries_resolve_away(tmp_path: Path):
    """``+model.config.rope_theta=10000.0`` restates Llama's default: the lifecycle writes the point's records under
    the id without it (``identity_of``), and the search must look for them there. With the spec's own id it found no
    record for its jobs, and ended without deciding the points."""
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "per_device_batch_size=2,4", "+model.config.rope_theta=10000.0", "search=frontier",
            "warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off",
            f"hydra.sweep.dir={sweep_dir}"]  # fmt: skip
    run = run_sweeper(args, tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    sweep = SweepDir(sweep_dir)
    records = {p.parent.name: read_record(p) for p in (sweep_dir / "points").glob("*/result.json")}
    assert len(records) == 2 and all(r.status == "ok" for r in records.values()), records
    log = json.loads(sweep.search_file.read_text())
    assert set(log["points"]) == set(records)  # the search's ids are the records' folders
    assert log["cost"]["measured_full"] == 2
