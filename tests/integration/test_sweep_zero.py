"""DeepSpeed ZeRO stages through the real HF integration on 2 gloo ranks (``+sweeps=zero``, a named grid; run once
per session by the ``zero_grid`` fixture of ``tests/conftest.py``, whose records ``test_grad_accum`` shares)."""

from __future__ import annotations

import json

import pytest

from tests.plan_checks import assert_states_and_peak_predicted

pytestmark = pytest.mark.slow

P = 210_240  # parameters of the tiny model


@pytest.fixture(scope="module")
def sweep(zero_grid):
    """The named grid's run, its records as it left them (``SweepRun.freeze``)."""
    return zero_grid


def test_the_named_zero_grid_runs_stages_0_to_3(sweep):
    records = sweep.records()
    assert sorted(r.spec["zero"] for r in records) == [0, 1, 2, 3]
    assert [r.status for r in records] == ["ok"] * 4, [r.reason for r in records]
    for r in records:
        assert r.ran["deepspeed_stage"] == r.spec["zero"]  # the stage really active, read off the engine
        expected = "DistributedDataParallel" if r.spec["zero"] == 0 else "DeepSpeedEngine"
        assert r.ran["wrapper"] == expected


def test_zero_stages_1_to_3_hold_less_optimizer_state_per_rank_than_ddp(sweep):
    ddp = sweep.by(zero=0).metrics["optimizer_state_bytes_per_rank"]
    assert ddp == pytest.approx(8 * P, rel=0.01)  # fp32 Adam moments, no master copy
    for stage in (1, 2, 3):
        state = sweep.by(zero=stage).metrics["optimizer_state_bytes_per_rank"]
        # DeepSpeed keeps fp32 master partitions + moments: 12 bytes/param / N ranks (ZeRO paper, 12x/N)
        assert state == pytest.approx(12 * P / 2, rel=0.02), stage
        assert state < ddp


def test_zero_3_shards_the_parameters(sweep):
    z0 = sweep.by(zero=0).metrics["param_bytes_per_rank"]
    z3 = sweep.by(zero=3).metrics["param_bytes_per_rank"]
    assert z0 == 4 * P
    assert z3 == pytest.approx(z0 / 2, rel=0.02)


def test_losses_agree_across_zero_stages(sweep):
    """Fixed seed, fp32: every sharding strategy trains the same model (same loss, less memory per rank)."""
    losses = [sweep.by(zero=s).metrics["loss_last"] for s in (0, 1, 2, 3)]
    assert max(losses) - min(losses) < 1e-3


def test_the_memory_model_predicts_each_stage_s_states_and_peak(sweep):
    """Per-rank model states within 2 % and the CPU peak within 15 % (sweeper.capacity.memory), on the measured points."""
    assert_states_and_peak_predicted(sweep.records())


def test_a_zero_point_leaves_deepspeeds_host_cost_measured_for_the_time_model(sweep):
    """Rank 0 of the first ZeRO-1/2 point measures DeepSpeed's host cost once DeepSpeed's CPU op is built (its own
    ranks built it), beside the gloo link, so that the time model charges it (sweeper.job.zero_probe)."""
    from sweeper.capacity.hostcomm import cached_comm, comm_cache_file, zero_key

    entries = json.loads(comm_cache_file().read_text())
    assert zero_key(2) in entries, sorted(entries)
    link = cached_comm(2)
    assert link is not None and link.zero_tensor_s is not None and link.zero_tensor_s >= 0, link
