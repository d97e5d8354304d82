"""Faults of sweeper's own measurement code in real sweeps: never the user's error, never a lost measurement; and
fp16's skipped optimizer steps kept out of the timed statistics.

Real local sweeps (2 gloo ranks, the real HF Trainer). The harness faults are injected with the documented testing
aid ``SWEEPER_FAULT_INJECT`` (docs/failures.md); the skipped step is a real ``GradScaler`` overflow, with only the
GPU part faked (accelerate gives fp16 a scaler on accelerators only: tests/faults.py ``FakeGpuFp16Overflow``).
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from sweeper.job.faults import FAULT_ENV
from sweeper.results.trainer_run import read_trainer_run
from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

# warm-up 1, timed 1-4, memory 5-6, profile 7 (0-based optimizer steps)
STEPS = ["warmup_steps=1", "timed_steps=4", "memory_steps=2", "profile_steps=1"]


def _with_faults(monkeypatch, sites: str) -> None:
    monkeypatch.setenv(FAULT_ENV, sites)  # run_sweeper passes the environment on; the ranks inherit it


def test_a_fault_in_the_step_timer_is_internal_and_keeps_the_timed_steps_before_it(tmp_path, monkeypatch):
    # global_step reaches 4 in on_step_end of 0-based step 3 (the Trainer counts the step before that event): the
    # timer fails before it stops step 3's clock, after timed steps 1 and 2
    _with_faults(monkeypatch, "timing@4")
    run = run_sweeper(STEPS, tmp_path)
    assert run.proc.returncode == 1, run.output[-3000:]
    (r,) = run.records()
    assert (r.status, r.error_kind) == ("error", "internal"), r.reason
    assert "sweeper's own timing code failed" in r.reason and "not your configuration" in r.reason
    assert r.failure["site"] == "timing" and r.failure["step"] == 3 and r.failure["phase"] == "train"
    assert r.metrics["timed_steps"] == 2 and r.metrics["step_time_s_median"] > 0  # the steps timed before it
    assert r.metrics["tokens_per_s_per_device"] > 0
    df = pd.read_csv(run.sweep_dir / "results.csv")
    assert list(df["error_kind"]) == ["internal"]


def test_faults_in_contained_sites_leave_an_ok_point_with_its_numbers_and_a_note(tmp_path, monkeypatch):
    # memory@6: the memory window's tracker is open (entered at step 5) when its code fails in on_step_end of step 5
    # progress@3: the step marker stops after step 2; the point still counts all its steps (no early exit)
    # trainer-run@2: rank 0's trainer_run.json was written at train begin, its step times are lost from step 2 on
    _with_faults(monkeypatch, "memory@6,profiler,losses,step-memory@2,peak,host-comm,progress@3,trainer-run@2")
    run = run_sweeper(STEPS, tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    (r,) = run.records()
    assert r.status == "ok", r.reason
    m = r.metrics
    assert m["timed_steps"] == 4 and m["step_time_s_median"] > 0 and m["tokens_per_s_per_device"] > 0
    note = m["measurement_note"]
    for site in ("memory", "profiler", "losses", "step-memory", "peak", "host-comm", "progress", "trainer-run"):
        assert f"sweeper's own {site} code failed on rank 0" in note, (site, note)
    trainer_run = read_trainer_run(run.sweep_dir / "points" / r.point_id)
    assert trainer_run is not None and trainer_run["config"]["max_steps"] == 8 and trainer_run["step_ended_at"] == []
    assert "sweeper's own memory code failed on rank 1 at step 5" in note
    assert m.get("peak_mem_bytes") is None  # the memory window's peak was not measured
    assert m["mfu"] is None and "no peak" in m["mfu_note"]
    assert not any(name.startswith("top_ops") for name in r.artifacts)
    mems = r.series["mem_high_water_bytes"]  # step-memory@2: read after step 0, failed after step 1, off since
    assert mems[0] > 0 and mems[1:] == [None] * 7
    df = pd.read_csv(run.sweep_dir / "results.csv")
    assert "sweeper's own memory code failed" in df.loc[0, "measurement_note"]
    assert "its other numbers stand" in run.report.read_text()


def test_skipped_steps_under_a_real_cpu_grad_scaler_standing_in_for_gpu_fp16_are_left_out_and_counted(tmp_path):
    assert FAULT_ENV not in os.environ
    run = run_sweeper([*STEPS, "+callbacks=[{_target_:tests.faults.FakeGpuFp16Overflow,at_step:2}]"], tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    (r,) = run.records()
    assert r.status == "ok", r.reason
    assert r.metrics["skipped_steps"] == 1 and r.metrics["timed_steps"] == 3  # timed steps 1, 3, 4
    skipped = r.series["optimizer_step_skipped"]
    assert skipped == [False, False, True, False, False, False, False, False]  # 1-based step 3 = 0-based step 2
    df = pd.read_csv(run.sweep_dir / "results.csv")
    assert int(df.loc[0, "skipped_steps"]) == 1
    assert "skipped the optimizer update of 1 timed step(s)" in run.report.read_text()
