"""The main job end to end: ``python -m sweeper -m fsdp=none,full_shard gc=true,false`` on 2 CPU ranks.

Real Hydra multirun, real HF Trainer, real gloo ranks, real FSDP2 sharding; one sweep shared by the tests below.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sweeper.results.frontier import pareto_frontier, throughput_interval
from tests.conftest import run_sweeper
from tests.plan_checks import assert_states_and_peak_predicted

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    run = run_sweeper(["-m", "fsdp=none,full_shard", "gc=true,false"], tmp_path_factory.mktemp("fsdp_gc"))
    assert run.proc.returncode == 0, run.output[-4000:]
    return run


def test_every_point_of_the_2x2_grid_is_ok(sweep):
    records = sweep.records()
    assert len(records) == 4
    assert {(r.spec["fsdp"], r.spec["gc"]) for r in records} == {
        ("none", True),
        ("none", False),
        ("full_shard", True),
        ("full_shard", False),
    }
    assert [r.status for r in records] == ["ok"] * 4, [r.reason for r in records]
    for r in records:
        m = r.metrics
        assert r.ran["world_size"] == 2
        assert m["timed_steps"] == 8 and m["warmup_steps_dropped"] == 3
        assert 0 < m["step_time_s_p10"] <= m["step_time_s_median"] <= m["step_time_s_p90"]
        assert m["tokens_per_s"] == pytest.approx(4 * 128 * 2 / m["step_time_s_median"])
        assert m["tokens_per_s_per_device"] == pytest.approx(m["tokens_per_s"] / 2)
        assert m["samples_per_s"] == pytest.approx(4 * 2 / m["step_time_s_median"])
        assert m["mfu_peak_source"].startswith("measured:")  # CPU: a measured peak, labelled so
        assert 0 < m["mfu"] < 1
        assert m["loss_first"] == pytest.approx(6.9, abs=0.2)  # ln(1000): random init on 1000 tokens


def test_last_line_names_the_report_in_a_unique_sweep_dir(sweep):
    assert sweep.report is not None and sweep.report.is_file(), sweep.last_line
    assert sweep.sweep_dir.parent.name == "multirun"
    for name in ("results.csv", "results.parquet", "report.html", "frontier.png", "sweep.json"):
        assert (sweep.sweep_dir / name).is_file(), name


def test_fsdp_labels_are_real_on_cpu(sweep):
    """Trainer FSDP silently becomes DDP on CPU; sweeper makes it really shard (FSDP2 on gloo) and says so."""
    for gc in (True, False):
        ddp = sweep.by(fsdp="none", gc=gc)
        fsdp = sweep.by(fsdp="full_shard", gc=gc)
        assert ddp.ran["wrapper"] == "DistributedDataParallel"
        assert fsdp.ran["fsdp_version"] == 2 and fsdp.ran["fsdp_sharded"] is True
        # sharding measured: this rank's parameter elements against the model's, counted before wrapping
        assert fsdp.ran["local_param_count"] == 210_240 // 2 and fsdp.ran["param_count"] == 210_240
        assert ddp.ran["local_param_count"] == ddp.ran["param_count"] == 210_240
        assert fsdp.ran["checkpointing_impl"] == ("fsdp" if gc else "none")  # case P02: FSDP-native under FSDP
        assert ddp.ran["checkpointing_impl"] == ("hf" if gc else "none")
        if gc:
            assert ddp.ran["use_reentrant"] is False and fsdp.ran["use_reentrant"] is False  # case P01


def test_a_full_shard_point_on_two_ranks_holds_half_the_optimizer_state_of_ddp(sweep):
    for gc in (True, False):
        ddp = sweep.by(fsdp="none", gc=gc).metrics
        fsdp = sweep.by(fsdp="full_shard", gc=gc).metrics
        # Adam: exp_avg + exp_avg_sq in fp32 = 8 bytes/param (+ a 4-byte step per tensor) for 210,240 params
        assert ddp["optimizer_state_bytes_per_rank"] == pytest.approx(8 * 210_240, rel=0.01)
        assert fsdp["optimizer_state_bytes_per_rank"] == pytest.approx(
            ddp["optimizer_state_bytes_per_rank"] / 2, rel=0.02
        )
        assert fsdp["param_bytes_per_rank"] == ddp["param_bytes_per_rank"] // 2


def test_gradient_checkpointing_lowers_the_tensor_byte_peak(sweep):
    for fsdp in ("none", "full_shard"):
        on = sweep.by(fsdp=fsdp, gc=True).metrics
        off = sweep.by(fsdp=fsdp, gc=False).metrics
        assert on["peak_mem_kind"] == off["peak_mem_kind"] == "cpu_tensor_bytes_memtracker"
        assert on["peak_mem_bytes"] < 0.85 * off["peak_mem_bytes"]
        assert on["peak_mem_breakdown_bytes"]["Activation"] < off["peak_mem_breakdown_bytes"]["Activation"]


def test_results_csv_has_one_row_per_point_with_the_frontier_marked(sweep):
    df = pd.read_csv(sweep.sweep_dir / "results.csv")
    for col in (
        "status",
        "fsdp",
        "gc",
        "precision",
        "zero",
        "per_device_batch_size",
        "seq_len",
        "world_size",
        "step_time_s_median",
        "tokens_per_s_per_device",
        "peak_mem_bytes",
        "optimizer_state_bytes_per_rank",
        "on_frontier",
        "reason",
    ):
        assert col in df.columns, col
    assert len(df) == 4 and (df["status"] == "ok").all()
    # the frontier rule with ties (docs/report.md): throughput ranges from each point's median step-time 95 % interval
    low, high = throughput_interval(df, "tokens_per_s_per_device")
    tps, mem = df["tokens_per_s_per_device"].tolist(), df["peak_mem_bytes"].tolist()
    assert df["on_frontier"].tolist() == pareto_frontier(tps, mem, low.tolist(), high.tolist())
    assert df["on_frontier"].any()
    parquet = pd.read_parquet(sweep.sweep_dir / "results.parquet")
    assert parquet["point_id"].tolist() == df["point_id"].tolist()


def test_report_md_shows_each_point_with_a_replay_command(sweep):
    text = sweep.report.read_text()
    for r in sweep.records():
        assert r.point_id in text
        assert r.replay in text
    assert "★" in text


def test_each_rank_leaves_a_profiler_trace_and_top_ops_table(sweep):
    for r in sweep.records():
        pdir = sweep.sweep_dir / "points" / r.point_id
        for rank in (0, 1):
            assert (pdir / f"trace_rank{rank}.json").stat().st_size > 1000
            assert "Self CPU" in (pdir / f"top_ops_rank{rank}.txt").read_text()


def test_the_memory_model_predicts_ddp_and_fsdp_states_and_peak(sweep):
    """Per-rank model states within 2 % and the CPU peak within 15 % (sweeper.capacity.memory), gc on and off."""
    assert_states_and_peak_predicted(sweep.records())
