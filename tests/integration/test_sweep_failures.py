"""Failures are results: a failing point never stops the sweep, and each failure is recorded precisely.

Real failures on real ranks; the only fake is the CUDA OOM itself (no GPU here), raised as a real
``torch.OutOfMemoryError`` with a real CUDA message by a callback (tests/faults.py).
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

FAULTS = "tests.faults"


def test_one_failing_point_leaves_the_other_points_and_the_report_intact(tmp_path):
    # a real failure: bitsandbytes' 8-bit Adam is not installed here
    run = run_sweeper(["-m", "+training_args.optim=adamw_torch,adamw_bnb_8bit", "timed_steps=3"], tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    good = run.by(training_args={"optim": "adamw_torch"})
    bad = run.by(training_args={"optim": "adamw_bnb_8bit"})
    assert good.status == "ok" and good.metrics["tokens_per_s_per_device"] > 0
    assert bad.status == "error" and bad.error_kind in ("import", "config")
    assert "bitsandbytes" in bad.reason
    assert bad.failure["phase"] == "setup"
    df = pd.read_csv(run.sweep_dir / "results.csv")
    assert sorted(df["status"]) == ["error", "ok"]
    assert df.loc[df["status"] == "ok", "on_frontier"].all()
    assert not df.loc[df["status"] == "error", "on_frontier"].any()
    assert "bitsandbytes" in run.report.read_text()


def test_fake_gpu_oom_on_rank_1_is_an_oom_result_with_parsed_bytes_rank_phase_and_step(tmp_path):
    run = run_sweeper(["timed_steps=3", f"+callbacks=[{{_target_:{FAULTS}.FakeGpuOom,at_step:4,rank:1}}]"], tmp_path)
    assert run.proc.returncode == 1, run.output[-3000:]  # a single point that is not ok exits 1, with its report
    (r,) = run.records()
    assert r.status == "oom"
    f = r.failure
    assert (f["rank"], f["phase"], f["step"]) == (1, "train", 4)
    assert f["requested_bytes"] == 340 * 2**20
    assert f["device_index"] == 1
    assert f["free_bytes"] == round(17.69 * 2**20)
    assert f["capacity_bytes"] == round(94.97 * 2**30)
    assert f["reserved_unallocated_bytes"] == round(7.53 * 2**30)
    assert f["fragmentation_hint"] is True
    assert "340.00 MiB" in r.reason


def test_fake_gpu_oom_in_evaluation_keeps_the_training_measurements(tmp_path):
    """Case P05: training fits, evaluation runs out of memory; the phase is eval, the training numbers stay."""
    run = run_sweeper(
        ["timed_steps=3", "eval=true", f"+callbacks=[{{_target_:{FAULTS}.FakeGpuOom,in_eval:true,rank:0}}]"],
        tmp_path,
    )
    (r,) = run.records()
    assert r.status == "oom"
    assert r.failure["phase"] == "eval"
    assert r.metrics["step_time_s_median"] > 0 and r.metrics["tokens_per_s_per_device"] > 0
    assert "training finished" in r.reason


def test_a_rank_that_hangs_fails_its_point_within_the_timeout(tmp_path):
    """20 s: the ranks reach the hang (step 2) in well under that; the point then waits for the rest of it."""
    run = run_sweeper(
        ["timed_steps=3", "timeout_s=20", f"+callbacks=[{{_target_:{FAULTS}.HangRank,at_step:2,rank:1}}]"],
        tmp_path,
    )
    (r,) = run.records()
    assert r.status == "timeout"
    assert "timeout_s=20" in r.reason
    assert r.failure["rank_steps"] == {"0": 2, "1": 2}  # stopped in the hang: both ranks had finished step 2
    assert 20 <= r.wall_time_s < 20 + 20


def test_a_rank_killed_by_sigkill_is_a_crash_naming_the_signal(tmp_path):
    run = run_sweeper(["timed_steps=3", f"+callbacks=[{{_target_:{FAULTS}.KillRank,at_step:2,rank:1}}]"], tmp_path)
    (r,) = run.records()
    assert r.status == "error" and r.error_kind == "crash"
    assert "SIGKILL" in r.reason
    # its rank<r>.step file outlived it: which rank died, and at which step (steps 0 and 1 finished)
    assert (r.failure["rank"], r.failure["step"], r.failure["phase"]) == (1, 2, "train")
    assert r.reason.startswith("rank 1 died at step 2 of 8 without writing its results: killed (SIGKILL)")


def test_t07_a_rank_that_stops_early_is_named_as_the_cause_and_the_grid_still_writes_its_report(tmp_path):
    """Case T07: rank 1 alone stops after step 4; rank 0's next collective fails with a gloo message that starts
    with a bracket (``[/.../pair.cc:NNN]``). The other point of the grid (no callback) is fine."""
    stop = f"{{_target_:{FAULTS}.StopRankEarly,at_step:4,rank:1}}"
    run = run_sweeper(["-m", "timed_steps=3", f"+callbacks=[{stop}],[]"], tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    assert run.report is not None and run.report.exists(), run.output[-3000:]
    good = run.by(callbacks=[])
    assert good.status == "ok"
    (bad,) = [r for r in run.records() if r.spec["callbacks"]]
    assert (bad.status, bad.error_kind) == ("error", "early-exit")
    assert bad.reason.startswith("rank 1 stopped early at step 4 of 8 (fewer steps than asked)"), bad.reason
    assert "consequence" in bad.reason and "pair.cc" in bad.reason and "hung" not in bad.reason
    assert (bad.failure["rank"], bad.failure["step"], bad.failure["steps_asked"]) == (1, 4, 8)  # 3+3+1+1
    assert bad.failure["consequence"]["rank"] == 0 and bad.failure["consequence"]["error_kind"] == "collective"
    pdir = run.sweep_dir / "points" / bad.point_id
    assert (pdir / "rank1.step").read_text() == "4"  # the progress file: steps finished, ASCII digits
    assert "rank 1 stopped early at step 4 of 8" in run.report.read_text()
    # progress in a log (stdout captured, not a terminal): plain lines, no escapes, one per window a point enters
    assert "\x1b" not in run.proc.stdout
    order = ["warm-up", "timed", "memory", "profile"]
    for pos, status in (("[1/2] ", "error"), ("[2/2] ", "ok")):
        words = [ln.split("  ")[1] for ln in run.proc.stdout.splitlines() if ln.startswith(pos)]
        assert words[:2] == ["start", "setup"] and words[-2:] == ["writing record", status], words
        seen = [w.split()[0] for w in words[2:-2]]  # the windows a poll saw (a fast step can fall between two)
        assert seen == sorted(set(seen), key=order.index), words
    _check_series(run, good, steps=8)
    _check_series(run, bad, steps=4)  # the failed point keeps the history of the steps it finished


def _check_series(run, record, steps: int) -> None:
    """The record's per-step series (``Record.series``) against the spec's windows and the rank files."""
    import json

    s = record.series
    assert s is not None and s["mem_kind"] == "rss_peak"
    columns = ("step", "window", "step_time_s", "loss", "mem_high_water_bytes")
    assert [len(s[c]) for c in columns] == [steps] * len(columns)
    assert s["step"] == list(range(1, steps + 1))
    windows = ["warmup"] * 3 + ["timed"] * 3 + ["memory"] + ["profile"]  # timed_steps=3, defaults otherwise
    assert s["window"] == windows[:steps]
    assert all(t > 0 for t in s["step_time_s"])
    assert all(isinstance(x, float) for x in s["loss"])  # the Trainer logs a loss at every step
    mem = s["mem_high_water_bytes"]
    assert all(b > 0 for b in mem) and mem == sorted(mem)  # a high-water mark never goes down
    pdir = run.sweep_dir / "points" / record.point_id
    ranks = [json.loads(p.read_text()) for p in sorted(pdir.glob("rank*.json"))]
    stats_in = [max(ts) for ts in zip(*[r["step_times_s"] for r in ranks if r["step_times_s"]], strict=False)]
    timed = [t for t, w in zip(s["step_time_s"], s["window"], strict=True) if w == "timed"]
    assert timed[: len(stats_in)] == stats_in  # the very numbers the step-time statistics use
    if record.status == "ok":
        assert len(stats_in) == record.metrics["timed_steps"] == 3
