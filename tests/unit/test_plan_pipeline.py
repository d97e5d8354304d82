"""Pipeline parallelism in the planner (issue 34, item 7): per-stage states (the first stage holds the embedding and
the most micro-batches in flight, the last the head), the bubble (p - 1)/(m + p - 1), point-to-point activations
between stages; a pipeline is planned, never swept."""

from __future__ import annotations

import pytest

from sweeper.capacity.arch import Arch
from sweeper.capacity.memory import estimate_memory, in_flight
from sweeper.capacity.states import layout, states_for
from sweeper.capacity.timing import bubble_fraction
from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.rules.parallelism import pipeline_check
from tests.unit.specs import make_spec as spec
from tests.unit.test_plan_app import loader, plan  # noqa: F401 - the module's Hydra loader fixture

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4}
TINY.update(num_key_value_heads=4, vocab_size=1000, tie_word_embeddings=False, max_position_embeddings=2048)
#: Llama-2-70B on 8 x 8 H100, ZeRO-1 with checkpointing, 16 micro-batches per step.
SEVENTY_B = ("model=llama-2-70b", "cluster=h100-80gb", "nodes=8", "seq_len=4096")
SEVENTY_B_ZERO1 = (*SEVENTY_B, "zero=1", "gc=true", "grad_accum=16")
CPU = Target("local", "cpu", None, {"torch": "2.13.0+cpu", "transformers": "5.24.0", "deepspeed": "0.19.8"})


def test_the_stages_hold_their_layers_the_first_the_embedding_the_last_the_norm_and_head():
    arch = Arch.from_config("llama", TINY)
    layer = arch.layer_params
    first = sum(r * c for r, c in arch.stage_param_shapes(1, 2, "first"))
    last = sum(r * c for r, c in arch.stage_param_shapes(1, 2, "last"))
    assert first == 64_000 + 2 * layer and last == 2 * layer + 64 + 64_000
    assert first + last == arch.total_params
    tied = Arch.from_config("llama", {**TINY, "tie_word_embeddings": True})
    # a tied head is a second copy of the embedding on the last stage (DeepSpeed TiedLayerSpec)
    assert sum(r * c for r, c in tied.stage_param_shapes(1, 2, "last")) == 2 * layer + 64 + 64_000


def test_1f1b_keeps_min_m_p_micro_batches_on_the_first_stage_and_gpipe_all_m():
    s = spec(pp=4, grad_accum=16, ranks_per_node=4)
    assert (in_flight(s, "first"), in_flight(s, "last")) == (4, 1)
    g = spec(pp=4, grad_accum=16, ranks_per_node=4, plan={"pp_schedule": "gpipe"})
    assert (in_flight(g, "first"), in_flight(g, "last")) == (16, 16)
    assert bubble_fraction(4, 16) == pytest.approx(3 / 19) and bubble_fraction(1, 16) == 0.0


def test_zero_1_shards_within_a_stage_and_the_most_loaded_stage_is_predicted():
    arch = Arch.from_config("llama", TINY)
    s = spec(pp=2, zero=1, ranks_per_node=4, grad_accum=4, model={"config": TINY})
    lay = layout(s, "cpu")
    assert (lay.stage, lay.shards, s.dp) == ("first", 2, 2)
    first = states_for(s, arch, lay)
    local = sum(r * c for r, c in arch.stage_param_shapes(1, 2, "first"))
    assert first.param_bytes == 4 * local and first.optimizer_state_bytes == pytest.approx(12 * local / 2, rel=0.01)
    est = estimate_memory(s, arch, "cpu")
    stages = [estimate_memory(s, arch, "cpu", stage=x) for x in ("first", "last")]
    assert est.device_bytes == max(e.device_bytes for e in stages)
    assert "logits_loss" not in stages[0].terms and "logits_loss" in stages[1].terms


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (dict(pp=3), ["pp", "model"]),
        (dict(pp=2, zero=2), ["pp", "zero"]),
        (dict(pp=2, fsdp="full_shard"), ["pp", "fsdp"]),
        (dict(pp=4, ranks_per_node=2), ["pp", "tp"]),
    ],
)
def test_the_planner_refuses_a_pipeline_deepspeed_cannot_train_with_rule_t11(overrides, keys):
    with pytest.raises(InvalidPoint) as e:
        pipeline_check(spec(model={"config": TINY}, **overrides))
    assert e.value.rule == "T11" and set(keys) <= set(e.value.keys), str(e.value)


def test_a_sweep_refuses_pp_and_points_to_the_planner():
    with pytest.raises(InvalidPoint) as e:
        check(spec(pp=2), CPU)
    assert e.value.rule == "T02" and "python -m sweeper.plan" in str(e.value) and "pp=2" in str(e.value)


def test_a_plan_of_llama_2_70b_with_pp_has_the_bubble_and_a_stage_per_row(loader):  # noqa: F811
    df = plan(loader, *SEVENTY_B_ZERO1, "pp=8")
    row = df.iloc[0]
    assert row["status"] == "planned" and row["engine"] == "ZeRO-1 + PP 8" and row["pp"] == 8 and row["dp"] == 8
    flat = plan(loader, *SEVENTY_B_ZERO1)
    # the same work per device on 1/8 of the layers, slowed by the bubble (7 / 23 idle) and the stage transfers
    assert row["predicted_peak_bytes"] < flat.iloc[0]["predicted_peak_bytes"] / 3
    ratio = row["predicted_tokens_per_s_per_device"] / flat.iloc[0]["predicted_tokens_per_s_per_device"]
    assert ratio < 1 - 7 / 23 + 0.02
