"""The torch-free model numbers of sweeper.capacity.arch equal what transformers instantiates (real models, CPU)."""

from __future__ import annotations

import pytest
import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

from sweeper.capacity.arch import Arch, UnknownArchitecture
from sweeper.paths import conf_dir

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=500)
CASES = [
    ("llama", {**SMALL, "num_key_value_heads": 2}),
    ("llama", {**SMALL, "num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True, "head_dim": 32}),
    ("llama", {**SMALL, "tie_word_embeddings": True}),
    ("mistral", {**SMALL, "num_key_value_heads": 2}),
    ("qwen2", {**SMALL, "num_key_value_heads": 2}),
    ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=128)),
    (
        "gpt2",
        dict(n_embd=64, n_layer=3, n_head=4, vocab_size=500, n_positions=64, n_inner=100, tie_word_embeddings=False),
    ),
]
#: The meta device builds any size without memory: the numbers of every shipped config, at full size.
SHIPPED = sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml"))


def _instantiate(model_type: str, config: dict, meta: bool = False) -> torch.nn.Module:
    cfg = AutoConfig.for_model(model_type, **config)
    if meta:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg)
    return AutoModelForCausalLM.from_config(cfg)


def _check(arch: Arch, model: torch.nn.Module) -> None:
    params = list(model.parameters())
    assert arch.total_params == sum(p.numel() for p in params)
    assert arch.param_tensors == len(params)
    assert sorted(arch.param_shapes()) == sorted((p.shape[0], p.numel() // p.shape[0]) for p in params)
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is emb
    assert arch.tied == tied
    # the harness's MFU convention (sweeper.job.harness.model_flops_inputs): minus the input embedding, the output
    # projection counted even when tied
    assert arch.non_embedding_params == arch.total_params - emb.numel() + (emb.numel() if tied else 0)
    layer = next(m for m in model.modules() if type(m).__name__.endswith(("DecoderLayer", "Block")))
    assert arch.layer_params == sum(p.numel() for p in layer.parameters())
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"]
    assert arch.linear_params == sum(m.weight.numel() for m in linears)


@pytest.mark.parametrize(("model_type", "config"), CASES)
def test_counts_equal_the_instantiated_model(model_type: str, config: dict):
    _check(Arch.from_config(model_type, config), _instantiate(model_type, config))


@pytest.mark.parametrize("name", SHIPPED)
def test_counts_of_every_shipped_model_config_at_full_size_on_the_meta_device(name: str):
    m = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())
    _check(Arch.from_config(m["model_type"], m["config"]), _instantiate(m["model_type"], m["config"], meta=True))


def test_published_sizes():
    load = lambda n: yaml.safe_load((conf_dir() / "model" / f"{n}.yaml").read_text())  # noqa: E731
    assert Arch.from_config("llama", load("tiny")["config"]).total_params == 210_240
    assert Arch.from_config("gpt2", load("gpt2")["config"]).total_params == 124_439_808  # GPT-2 small, 124M
    assert Arch.from_config("llama", load("llama-2-7b")["config"]).total_params == 6_738_415_616  # Llama-2-7B


def test_sharding_splits_every_tensor_on_dim0_with_the_first_ranks_full():
    arch = Arch.from_config("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=501, n_positions=128))
    assert arch.sharded_params(1) == arch.total_params
    # 501 rows over 2 ranks: rank 0 holds 251 rows of the embedding
    assert arch.sharded_params(2) == sum(-(-r // 2) * c for r, c in arch.param_shapes()) > arch.total_params / 2


def test_flops_per_token_is_palm():
    arch = Arch.from_config("llama", SMALL)
    n = arch.non_embedding_params
    assert arch.flops_per_token(128) == 6 * n + 12 * 2 * 4 * 16 * 128
    assert arch.forward_flops_per_token(128) == pytest.approx(arch.flops_per_token(128) / 3)


def test_an_unknown_model_type_says_which_are_known():
    with pytest.raises(UnknownArchitecture, match=r"model_type='t5'.*llama"):
        Arch.from_config("t5", {})


MOE = {**SMALL, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize("full", [False, True])
def test_a_mixture_of_experts_counts_every_expert_and_computes_with_its_top_k(full: bool):
    """Issue 36: Mixtral (examples/models: the public config, at full size on the meta device) and a tiny one; the
    experts are transformers 5's two 3-D tensors per layer (dim 0: the expert)."""
    import json

    from tests.conftest import REPO

    config = json.loads((REPO / "examples/models/Mixtral-8x7B-v0.1/config.json").read_text()) if full else MOE
    config = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype", "transformers_version")}
    arch = Arch.from_config("mixtral", config)
    model = _instantiate("mixtral", {k: v for k, v in config.items() if k != "model_type"}, meta=full)
    params = list(model.parameters())
    assert arch.total_params == sum(p.numel() for p in params) and arch.param_tensors == len(params)
    assert sorted(arch.param_shapes()) == sorted((p.shape[0], p.numel() // p.shape[0]) for p in params)
    if full:
        assert arch.total_params == 46_702_792_704  # the published Mixtral-8x7B-v0.1
    # a token uses the router and top_k of the experts: the dense model of the same shape (one MLP) plus top_k - 1
    # MLPs and the router; Mixtral: 12.75 B without the input embedding (the published "12.9 B active" counts it)
    dense = Arch.from_config("mistral", {k: v for k, v in config.items() if "expert" not in k})
    h, i = arch.hidden, arch.intermediate
    extra = (arch.top_k - 1) * 3 * h * i + h * arch.experts
    assert arch.active_params == dense.non_embedding_params + arch.layers * extra
    assert arch.flops_per_token(128) == pytest.approx(6 * arch.active_params + 12 * arch.layers * arch.q_width * 128)
    for unknown in (lambda: arch.linear_params, lambda: arch.tp_param_shapes(2)):
        with pytest.raises(UnknownArchitecture, match="mixture of experts"):
            unknown()


def test_a_mixture_of_experts_plans_exact_states_and_says_the_rest_is_unknown():
    from sweeper.capacity.predict import predict
    from sweeper.config.target import Target
    from tests.unit.specs import make_spec

    spec = make_spec(model={"name": "moe", "config": MOE}, zero=2, precision="bf16")
    spec = __import__("dataclasses").replace(spec, model_type="mixtral", model_config=MOE)
    p = predict(spec, Target())
    arch = Arch.from_config("mixtral", MOE)
    assert p.fits is None and p.peak_bytes is None and p.tokens_per_s_per_device is None
    assert "mixture of experts" in p.note and "states are counted" in p.note
    # ZeRO-2 over 2 ranks: 16-bit weights whole (2 bytes), fp32 master + Adam moments partitioned (12 / 2 bytes)
    assert p.param_bytes_per_rank == 2 * arch.total_params
    assert p.optimizer_state_bytes_per_rank == pytest.approx(12 * arch.total_params / 2, rel=0.01)


def test_a_mixture_of_experts_whose_states_alone_exceed_the_device_does_not_fit_and_one_under_it_stays_unknown():
    """Issue 36: activations unknown, but the states (parameters, gradients, optimizer state, all alive at the
    optimizer step) are a lower bound of the peak: past the usable device memory the answer is "does not fit"."""
    import dataclasses

    from sweeper.capacity.predict import predict, states_floor_bytes
    from sweeper.capacity.states import layout, states_for
    from sweeper.config.schema import ClusterConfig
    from sweeper.config.target import Target
    from tests.unit.specs import make_spec

    spec = make_spec(model={"name": "moe", "config": MOE}, zero=2, precision="bf16")
    spec = dataclasses.replace(spec, model_type="mixtral", model_config=MOE)
    floor = states_floor_bytes(states_for(spec, Arch.from_config("mixtral", MOE), layout(spec, "cpu")))
    assert floor is not None and floor > 0

    def on(gib: float):
        return predict(spec, Target(cluster=ClusterConfig(gpu_mem_gib=gib)))

    small, large = on(floor * 0.9 / 2**30), on(floor * 10 / 2**30)
    assert small.fits is False and "does not fit whatever its activations" in small.note
    assert large.fits is None and "does not fit" not in large.note and large.peak_bytes is None
    just_over_margin = on(floor / 0.96 / 2**30)  # fits without the 5 % margin, not with it
    assert just_over_margin.fits is False
