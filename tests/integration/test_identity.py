"""Identity is what changes the run (cases T09, T10): real multiruns of the tiny model."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sweeper.results.sweepdir import SweepDir

pytestmark = pytest.mark.slow
FAST = ["timed_steps=3", "warmup_steps=1", "profile_steps=0", "profile_trace=false"]


def test_a_setting_without_effect_does_not_make_a_second_point(sweeper_cli):
    """T09: use_reentrant does nothing without checkpointing, so the grid points are one configuration; and what
    transformers resolves to the same model config (Llama's default rope_theta, as an int and as a float) is the
    same point too (the pre-flight's resolved objects, sweeper.job.preflight_resolved)."""
    run = sweeper_cli("-m", "gc=false", "use_reentrant=false,true", "+model.config.rope_theta=10000,10000.0", *FAST)
    assert run.proc.returncode == 0, run.output[-3000:]
    records = SweepDir(run.sweep_dir).records()
    assert len(records) == 1 and records[0].status == "ok"
    assert len(pd.read_csv(run.sweep_dir / "results.csv")) == 1
    assert "[4/4]" in run.output  # Hydra still launched all four; the later ones found the first's record


def test_a_rerun_with_a_new_budget_replaces_the_timed_out_record_keeping_its_history(sweeper_cli):
    """T10: timeout_s is a budget, not part of the configuration; the rerun replaces the stale timeout."""
    # 200 timed steps (~5 s): past a 2 s budget however fast the ranks start (forked ones train within 2 s of it)
    slow = [o if not o.startswith("timed_steps=") else "timed_steps=200" for o in FAST]
    first = sweeper_cli("-m", "timeout_s=2", *slow)
    assert first.proc.returncode == 0, first.output[-3000:]
    (before,) = SweepDir(first.sweep_dir).records()
    assert before.status == "timeout"
    again = sweeper_cli(
        "-m", "timeout_s=300", "launcher.rerun_statuses=[timeout]", f"hydra.sweep.dir={first.sweep_dir}", *slow
    )
    assert again.proc.returncode == 0, again.output[-3000:]
    (after,) = SweepDir(first.sweep_dir).records()
    assert after.point_id == before.point_id
    assert after.status == "ok" and after.spec["timeout_s"] == 300
    history = json.loads((first.sweep_dir / "points" / before.point_id / "result.0.json").read_text())
    assert history["status"] == "timeout" and history["spec"]["timeout_s"] == 2
    rows = pd.read_csv(first.sweep_dir / "results.csv")
    assert len(rows) == 1 and rows["status"].tolist() == ["ok"]
