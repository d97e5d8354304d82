"""``python -m sweeper.plan ... plan.calibrate=<sweep dir>``: a plan calibrated on a real measured sweep (2 gloo ranks,
the tiny model, DDP at two batch sizes), and a path that is no sweep refused with exit 2 before anything is written.
"""

from __future__ import annotations

import json

import pandas as pd

from tests.conftest import SLURM_FEW_STEPS, run_sweeper
from tests.integration.test_plan_cli import run_plan


def test_a_plan_calibrated_on_a_measured_sweep_uses_its_groups_peaks_and_host_link(tmp_path):
    sweep = tmp_path / "measured"
    run = run_sweeper(["-m", "per_device_batch_size=2,4", f"hydra.sweep.dir={sweep}", *SLURM_FEW_STEPS], tmp_path)
    assert run.proc.returncode == 0, run.output[-3000:]
    records = [r for r in run.records() if r.status == "ok"]
    assert len(records) == 2
    # every record's prediction already uses this host's measured gloo cost (cached by the first point's rank 0)
    assert all(r.predicted.get("comm_s") for r in records), [r.predicted.get("note") for r in records]

    out = tmp_path / "plan"
    args = [
        "model=tiny",
        "cluster=local",
        "seq_len=128",
        "ranks_per_node=2",
        "precision=fp32",
        f"plan.calibrate={sweep}",
    ]
    proc, _ = run_plan(
        [*args, "fsdp=none", "zero=0", "gc=false", "per_device_batch_size=4", f"hydra.run.dir={out}"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_csv(out / "plan.csv")
    row = df.iloc[0]
    assert (
        "calibrated on 2 fsdp=none zero=0 gc=false precision=fp32 (DDP) point(s)" in row["predicted_efficiency_source"]
    )
    assert row["predicted_tokens_per_s_per_device"] > 0  # a CPU plan: the peak comes from the calibrating sweep
    measured = {r.spec["per_device_batch_size"]: r.metrics["tokens_per_s_per_device"] for r in records}
    # the group's fit (overhead + rate) goes through both of its points: the batch-4 plan gives what batch 4 measured
    assert abs(row["predicted_tokens_per_s_per_device"] - measured[4]) / measured[4] < 0.35

    # docs/planning.md's command as printed: the plan takes the sweep's settings it does not name (it refused every
    # row before: ranks_per_node=0 and bf16, the plan's defaults for cluster=local, against a CPU fp32 sweep)
    docs = tmp_path / "docs"
    proc, _ = run_plan(
        ["model=tiny", "cluster=local", "seq_len=128", f"plan.calibrate={sweep}", f"hydra.run.dir={docs}"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(not named on the command line): precision=fp32" in proc.stdout and "ranks_per_node=2" in proc.stdout
    d = pd.read_csv(docs / "plan.csv")
    assert (d["status"] == "planned").all() and (d["ranks_per_node"] == 2).all() and (d["precision"] == "fp32").all()

    # a CPU calibration for an H100 plan is refused (it answered 3,062 tokens/s and 473 days for Llama-2-7B, the
    # CPU's fp32 efficiency applied to an H100 in bf16), and applied only when asked, the answer line saying so
    gpu = tmp_path / "gpu"
    args = ["model=tiny", "cluster=h100-80gb", "seq_len=128", f"plan.calibrate={sweep}", f"hydra.run.dir={gpu}"]
    proc, _ = run_plan(args, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "ran on CPU ranks and the plan is for a GPU cluster" in proc.stderr and "plan.calibrate_across=true" in (
        proc.stderr
    )
    assert not gpu.exists()
    proc, _ = run_plan([*args, "plan.calibrate_across=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = next(line for line in proc.stdout.splitlines() if line.startswith("Answer"))
    assert "applied across hardware: its points ran on CPU ranks" in answer, answer
    g = pd.read_csv(gpu / "plan.csv")
    fsdp = g[(g["fsdp"] == "full_shard") & (g["gc"] == False)].iloc[0]  # noqa: E712 - a pandas column
    assert "borrowed (no fsdp=<strategy> zero=0 gc=false precision=bf16 (FSDP) point)" in fsdp[
        "predicted_efficiency_source"
    ] or ("overall median" in fsdp["predicted_efficiency_source"])


def test_plan_calibrate_on_a_path_that_is_no_sweep_exits_2_before_writing(tmp_path):
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "missing", tmp_path / "empty"):
        proc, _ = run_plan(
            ["model=tiny", "cluster=local", "seq_len=128", f"plan.calibrate={bad}", f"hydra.run.dir={tmp_path / 'p'}"],
            tmp_path,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "not a sweep directory" in proc.stderr and not (tmp_path / "p").exists()
    sweep = tmp_path / "failed"
    (sweep / "points" / "abc").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"sweep_id": "abc123"}))
    proc, _ = run_plan(
        ["model=tiny", "cluster=local", "seq_len=128", f"plan.calibrate={sweep}", f"hydra.run.dir={tmp_path / 'q'}"],
        tmp_path,
    )
    assert proc.returncode == 2 and "no ok point" in proc.stderr and not (tmp_path / "q").exists()
