"""Ulysses sequence parallelism (``sp``) through the real HF Trainer and DeepSpeed on real gloo ranks (issue 34).

One multirun, ``sp=1,2 ranks_per_node=1,2 zero=2``: the sp=2 point on 2 ranks (dp=1) trains the same global batch
as the sp=1 point on 1 rank, each rank holding half of every sample's sequence, so their per-step losses must be
equal; the sp=2 point on 1 rank is refused before any rank starts.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_sweeper
from tests.plan_checks import assert_states_and_peak_predicted

pytestmark = pytest.mark.slow

STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off"]
P = 210_240  # parameters of the tiny model


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("sp")
    run = run_sweeper(["-m", "sp=1,2", "ranks_per_node=1,2", "zero=2", *STEPS, f"hydra.sweep.dir={cwd / 'sweep'}"], cwd)
    assert run.proc.returncode == 0, run.output[-4000:]
    return run.freeze()


def test_the_sp_point_runs_ok_on_two_ranks_and_is_refused_on_one(sweep):
    assert sweep.by(sp=2, ranks_per_node=2).status == "ok", sweep.by(sp=2, ranks_per_node=2).reason
    refused = sweep.by(sp=2, ranks_per_node=1)
    assert refused.status == "invalid" and refused.failure["rule"] == "T03"
    assert not (sweep.sweep_dir / "points" / refused.point_id / "rank0.json").exists()


def test_an_sp_point_proves_its_mesh_and_the_half_sequence_each_rank_sees(sweep):
    r = sweep.by(sp=2, ranks_per_node=2)
    assert r.ran["mesh"] == {"dp": 1, "tp": 1, "sp": 2} and r.ran["seq_len_per_rank"] == 64
    assert sweep.by(sp=1, ranks_per_node=2).ran["seq_len_per_rank"] == 128
    assert r.metrics["tokens_per_step"] == 4 * 128  # one batch for the Ulysses group
    # ZeRO-2 shards over the sequence ranks too (DeepSpeed's sequence-data-parallel group): 12 bytes/param / 2
    assert r.metrics["optimizer_state_bytes_per_rank"] == pytest.approx(12 * P / 2, rel=0.001)


def test_sp_2_trains_the_same_losses_as_one_rank_on_the_same_global_batch(sweep):
    sp = sweep.by(sp=2, ranks_per_node=2).series["loss"]
    one = sweep.by(sp=1, ranks_per_node=1).series["loss"]
    assert len(sp) == len(one) >= 5
    assert max(abs(a - b) for a, b in zip(sp, one, strict=True)) < 1e-4, (sp, one)


def test_the_memory_model_predicts_the_sp_point_states_exactly_and_its_peak(sweep):
    assert_states_and_peak_predicted([sweep.by(sp=2, ranks_per_node=2)])
