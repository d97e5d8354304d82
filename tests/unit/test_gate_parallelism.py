"""The model-parallel axes (issue 34) at the gate, in the identity and in the model: each combination the stack
cannot train is refused before launch with its rule and keys; the derived degrees; the states per rank under TP."""

from __future__ import annotations

import pytest

from sweeper.capacity.arch import Arch, UnknownArchitecture
from sweeper.capacity.states import layout, states_for
from sweeper.capacity.timing import collectives, step_flops
from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.identity import point_id
from sweeper.point.library_args import sweeper_deepspeed_config
from tests.unit.specs import make_spec as spec

CPU = Target("local", "cpu", None, {"torch": "2.13.0+cpu", "transformers": "5.24.0", "deepspeed": "0.19.8"})


def refusal(**kw) -> InvalidPoint:
    with pytest.raises(InvalidPoint) as e:
        check(spec(**kw), CPU)
    return e.value


# (rule, status, overrides, keys the refusal names, words of the message)
REFUSED = [
    ("T01", "invalid", dict(tp=0), ["tp"], ["at least 1"]),
    ("T01", "invalid", dict(sp=-2), ["sp"], ["at least 1"]),
    ("T02", "unsupported", dict(pp=2), ["pp"], ["cannot train a pipeline", "pp=1"]),
    ("T03", "invalid", dict(tp=2, ranks_per_node=3), ["tp", "sp", "ranks_per_node", "nodes"], ["does not divide"]),
    ("T03", "invalid", dict(tp=4, ranks_per_node=2), ["tp", "ranks_per_node"], ["a multiple of 4"]),
    ("T04", "invalid", dict(tp=4, ranks_per_node=2, nodes=2), ["tp", "ranks_per_node"], ["one node"]),
    ("T05", "invalid", dict(tp=2, ranks_per_node=2, model={"config": {"num_attention_heads": 3}}), ["tp"], ["3"]),
    (
        "T05",
        "invalid",
        dict(tp=4, ranks_per_node=4, model={"config": {"num_key_value_heads": 2}}),
        ["tp", "model"],
        ["key/value heads", "use tp in 1, 2"],
    ),
    ("T07", "invalid", dict(tp=2, zero=3), ["tp", "zero"], ["ZeRO-3", "zero=1 or zero=2"]),
    ("T08", "unsupported", dict(tp=2, fsdp="full_shard"), ["tp", "fsdp"], ["fsdp=none"]),
    ("T09", "unsupported", dict(sp=2, fsdp="full_shard"), ["sp", "fsdp"], ["fsdp=none"]),
    ("T09", "unsupported", dict(sp=2, tp=2, ranks_per_node=4), ["sp", "tp"], ["tp=1 or sp=1"]),
    ("T06", "invalid", dict(sp=2, seq_len=127), ["sp", "seq_len"], ["multiple of 2"]),
    (
        "T10",
        "invalid",
        dict(tp=2, deepspeed_config={"tensor_parallel": {"autotp_size": 4}}),
        ["tp", "deepspeed_config.tensor_parallel.autotp_size"],
        ["tp=<degree>"],
    ),
    (
        "T10",
        "invalid",
        dict(zero=1, deepspeed_config={"tensor_parallel": {"autotp_size": 2}}),
        ["deepspeed_config.tensor_parallel.autotp_size"],
        ["tp=1"],
    ),
    (
        "T10",
        "invalid",
        dict(zero=2, deepspeed_config={"sequence_parallel_size": 2}),
        ["deepspeed_config.sequence_parallel_size"],
        ["sp=1"],
    ),
    ("P09", "invalid", dict(deepspeed_config={"tensor_parallel": {"autotp_size": 2}}), ["zero"], ["tp>1"]),
]


@pytest.mark.parametrize(("rule", "status", "overrides", "keys", "words"), REFUSED)
def test_each_combination_the_stack_cannot_train_is_refused_with_its_rule_and_keys(
    rule, status, overrides, keys, words
):
    e = refusal(**overrides)
    assert (e.rule, e.status) == (rule, status), str(e)
    assert set(keys) <= set(e.keys), (e.keys, str(e))
    for w in words:
        assert w in str(e), str(e)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(tp=2),
        dict(tp=2, zero=1),
        dict(tp=2, zero=2),
        dict(tp=2, ranks_per_node=4, zero=2),
        dict(tp=1, zero=3),
        dict(sp=2, zero=2),
        dict(sp=2, zero=3, ranks_per_node=4),
    ],
)
def test_what_deepspeed_autotp_and_ulysses_train_passes(overrides):
    check(spec(**overrides), CPU)


def test_the_data_parallel_degree_and_the_engine_are_derived():
    s = spec(tp=2, ranks_per_node=4, nodes=2)
    assert (s.world_size, s.dp, s.deepspeed) == (8, 4, True)
    assert spec().dp == 2 and not spec().deepspeed
    assert not spec(tp=1, fsdp="full_shard").deepspeed and spec(zero=1).deepspeed


def test_sweeper_sets_the_autotp_degree_and_an_equal_entry_is_not_a_second_point():
    assert sweeper_deepspeed_config(spec(tp=2))["tensor_parallel"] == {"autotp_size": 2}
    assert "tensor_parallel" not in sweeper_deepspeed_config(spec(zero=2))
    plain = spec(tp=2)
    restated = spec(tp=2, deepspeed_config={"tensor_parallel": {"autotp_size": 2}})
    check(restated, CPU)
    assert point_id(restated) == point_id(plain)


def test_the_axes_off_leave_every_existing_point_id_unchanged():
    """tp=sp=pp=1 are not in the identity: a default spec hashes as it did before the axes (a golden id)."""
    assert point_id(spec()) == point_id(spec(tp=1, sp=1, pp=1))
    assert point_id(spec(tp=2)) != point_id(spec())


TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
TINY.update(num_key_value_heads=4, vocab_size=1000, tie_word_embeddings=False)


def test_tp_shards_the_decoder_linears_and_the_head_and_keeps_the_embedding_and_norms_whole():
    arch = Arch.from_config("llama", TINY)
    assert sum(r * c for r, c in arch.tp_param_shapes(1)) == arch.total_params == 210_240
    # 64,000 embedding + 32,000 head half + 2 x (40,960 / 2) linears + 320 norm weights (measured: 137,280)
    assert sum(r * c for r, c in arch.tp_param_shapes(2)) == 64_000 + 32_000 + 40_960 + 320
    with pytest.raises(UnknownArchitecture, match="tied"):
        Arch.from_config("llama", {**TINY, "tie_word_embeddings": True}).tp_param_shapes(2)
    with pytest.raises(UnknownArchitecture, match="gpt2"):
        Arch.from_config("gpt2", {}).tp_param_shapes(2)


def test_zero_shards_divide_by_the_data_parallel_degree_not_the_world():
    arch = Arch.from_config("llama", TINY)
    s = spec(tp=2, ranks_per_node=4, zero=1, model={"config": TINY})
    lay = layout(s, "cpu")
    assert (lay.strategy, lay.shards, lay.tp) == ("zero1", 2, 2)
    local = sum(r * c for r, c in arch.tp_param_shapes(2))
    st = states_for(s, arch, lay)
    # fp32 masters + Adam moments over the local shard's ZeRO partition, 12 bytes/element / dp (not / world)
    assert st.optimizer_state_bytes == pytest.approx(12 * local / 2, rel=0.001)


def test_a_ulysses_group_all_to_alls_q_k_v_and_the_output_and_holds_half_the_tokens():
    arch = Arch.from_config("llama", TINY)
    s = spec(sp=2, zero=2, model={"config": TINY})
    lay = layout(s, "cpu")
    assert (lay.sp, lay.shards) == (2, 2)  # ZeRO over the sequence ranks too
    sp = [c for c in collectives(arch, lay, 1, 1, 4 * 128, False) if c.group == "sp"]
    assert [c.kind for c in sp] == ["all_to_all"] * 4 and all(c.count == 2 * 2 for c in sp)  # fwd + bwd, 2 layers
    assert sp[0].nbytes == 4 * 64 * 64 * 4  # this rank's 256 tokens x q width 64, fp32


def test_a_tp_group_all_reduces_activations_and_does_a_tp_th_of_the_flops():
    arch = Arch.from_config("llama", TINY)
    s = spec(tp=2, model={"config": TINY})
    found = collectives(arch, layout(s, "cpu"), 1, 1, 4 * 128, False)
    tp = [c for c in found if c.group == "tp"]
    assert [c.kind for c in tp] == ["all_reduce", "all_reduce", "all_gather"]
    assert tp[0].count == 2 * 2 and tp[0].nbytes == 4 * 128 * 64 * 4  # 2 per layer forward, tokens x h fp32
    assert not [c for c in found if c.group == "dp"]  # dp = 1: no gradient traffic
    full = step_flops(arch, batch=4, seq_len=128, grad_accum=1, gc=False)
    assert step_flops(arch, batch=4, seq_len=128, grad_accum=1, gc=False, tp=2) == full / 2


def test_a_degree_that_does_not_divide_the_ranks_gets_a_fix_the_other_rules_accept():
    """A newcomer followed "use ranks_per_node x nodes a multiple of 3" for tp=3 and met T05 (4 heads): the fix
    offered must be one the heads rule accepts too."""
    e = refusal(tp=3)
    assert e.rule == "T03" and "tp=2 on these ranks" in str(e) and "more ranks would not help" in str(e)
    assert "a multiple of 3" not in str(e)
    check(spec(tp=2), CPU)  # the fix offered passes
