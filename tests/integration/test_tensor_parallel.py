"""Tensor parallelism (``tp``) through the real HF Trainer and DeepSpeed AutoTP on real gloo ranks (issue 34).

One multirun, ``tp=1,2 ranks_per_node=1,2 zero=0,2``: the tp=2 points on 2 ranks (dp=1) train the same global
batch as the tp=1 points on 1 rank, so their per-step losses must be equal; the tp=2 points on 1 rank are refused by
the gate before any rank starts; the tp=1 points on 2 ranks are DDP and ZeRO-2 as before.
"""

from __future__ import annotations

import pytest

from sweeper.capacity.arch import Arch
from tests.conftest import run_sweeper
from tests.plan_checks import assert_states_and_peak_predicted

pytestmark = pytest.mark.slow

STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off"]
#: The tiny model: 2 layers of 7 linears, an untied output head.
P = 210_240


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("tp")
    run = run_sweeper(
        ["-m", "tp=1,2", "ranks_per_node=1,2", "zero=0,2", *STEPS, f"hydra.sweep.dir={cwd / 'sweep'}"], cwd
    )
    assert run.proc.returncode == 0, run.output[-4000:]
    return run.freeze()


def test_every_point_the_stack_trains_runs_ok_and_the_rest_is_refused_before_launch(sweep):
    records = sweep.records()
    assert len(records) == 8
    for r in records:
        if r.spec["tp"] == 2 and r.spec["ranks_per_node"] == 1:
            assert r.status == "invalid" and r.failure["rule"] == "T03", (r.status, r.reason)
            assert not r.metrics and not (sweep.sweep_dir / "points" / r.point_id / "rank0.json").exists()
        else:
            assert r.status == "ok", (r.spec["tp"], r.spec["ranks_per_node"], r.spec["zero"], r.reason)


def test_a_tp_point_proves_it_sharded_the_mesh_and_the_parameters_per_rank(sweep):
    local = sum(r * c for r, c in Arch.from_config("llama", sweep.records()[0].spec["model_config"]).tp_param_shapes(2))
    assert local == 137_280  # the linears at 1/2, the output head over half the vocabulary, embedding and norms whole
    for zero in (0, 2):
        r = sweep.by(tp=2, ranks_per_node=2, zero=zero)
        assert r.ran["mesh"] == {"dp": 1, "tp": 2, "sp": 1}
        assert r.ran["wrapper"] == "DeepSpeedEngine" and r.ran["deepspeed_stage"] == zero
        assert r.ran["tp_sharded_modules"] == 2 * 7 + 1  # every decoder linear and the output head
        assert r.ran["local_param_count"] == local and r.ran["param_count"] == P
        assert r.metrics["param_bytes_per_rank"] == 4 * local
    ddp = sweep.by(tp=1, ranks_per_node=2, zero=0)
    assert ddp.ran["mesh"] == {"dp": 2, "tp": 1, "sp": 1} and ddp.ran["local_param_count"] == P


def test_throughput_counts_each_data_parallel_batch_once(sweep):
    """Both ranks of a TP group train one batch: 4 samples x 128 tokens a step, not 8 (tokens/s per device halves)."""
    tp = sweep.by(tp=2, ranks_per_node=2, zero=0).metrics
    ddp = sweep.by(tp=1, ranks_per_node=2, zero=0).metrics
    assert tp["tokens_per_step"] == 4 * 128 and ddp["tokens_per_step"] == 2 * 4 * 128
    assert tp["tokens_per_s"] == pytest.approx(tp["tokens_per_step"] / tp["step_time_s_median"])
    assert tp["tokens_per_s_per_device"] == pytest.approx(tp["tokens_per_s"] / 2)


@pytest.mark.parametrize("zero", [0, 2])
def test_tp_2_trains_the_same_losses_as_one_rank_on_the_same_global_batch(sweep, zero):
    """The issue's numerics check: tp=2 (dp=1) and tp=1 on one rank, same seed, same 4-sample batches."""
    tp = sweep.by(tp=2, ranks_per_node=2, zero=zero).series["loss"]
    one = sweep.by(tp=1, ranks_per_node=1, zero=zero).series["loss"]
    assert len(tp) == len(one) >= 5
    assert max(abs(a - b) for a, b in zip(tp, one, strict=True)) < 1e-4, (tp, one)


def test_the_memory_model_predicts_the_tp_points_states_exactly_and_their_peak(sweep):
    assert_states_and_peak_predicted([r for r in sweep.records() if r.spec["tp"] == 2])


def test_the_report_labels_a_tp_point_with_its_degrees(sweep):
    text = sweep.report.read_text()
    assert "tp=2" in text and "dp=1" in text


def test_the_report_finds_every_point_of_one_global_batch_training_the_same_losses(sweep):
    """The product's own check of the loss equality above (report section Numerics, sweeper.report.numerics)."""
    text = sweep.report.read_text()
    assert "## Numerics" in text and "Every one of the 4 point(s) compared trains the same" in text, text[-3000:]
