"""The gate, rule by rule: each refusal names every key involved; restatements and real settings pass.

Every test calls the real ``sweeper.point.gate.check`` on a spec built by the real Hydra schema; training_args
names and types come from the installed transformers through the real helper subprocess (cached per session).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check
from tests.unit.specs import make_spec as spec

VERSIONS = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "deepspeed": "0.19.8"}
CPU = Target("local", "cpu", None, VERSIONS)


def refusal(target: Target = CPU, **kw) -> InvalidPoint:
    with pytest.raises(InvalidPoint) as e:
        check(spec(**kw), target)
    return e.value


# (rule id, overrides, every key the refusal must name, words the message must hold)
REFUSED = [
    # dtype pairs (T02)
    ("G09", dict(model_dtype="bfloat16", precision="fp32"), ["model_dtype", "precision"], ["model_dtype=bfloat16"]),
    ("G09", dict(model_dtype="float16", precision="fp32"), ["model_dtype", "precision"], ["model_dtype=float32"]),
    ("G09", dict(model_dtype="float16", precision="bf16"), ["model_dtype", "precision"], ["pure bf16"]),
    ("G09", dict(model_dtype="bfloat16", precision="fp16"), ["model_dtype", "precision"], ["precision=bf16"]),
    ("G06", dict(model_dtype="float16", precision="fp16"), ["model_dtype", "precision"], ["fp32 master"]),
    ("G10", dict(model_dtype="bfloat16", precision="bf16", fsdp="full_shard"), ["model_dtype", "fsdp"], ["up-casts"]),
    ("G10", dict(model_dtype="bfloat16", precision="bf16", zero=2), ["model_dtype", "zero"], ["DeepSpeed casts"]),
    # training_args sweeper owns
    (
        "P01",
        dict(training_args={"per_device_train_batch_size": 8}),
        ["training_args.per_device_train_batch_size", "per_device_batch_size"],
        ["per_device_batch_size instead"],
    ),
    ("P01", dict(training_args={"bf16": True}), ["training_args.bf16", "precision"], ["precision"]),
    ("P01", dict(training_args={"output_dir": "/tmp/x"}), ["training_args.output_dir", "hydra.sweep.dir"], []),
    ("P01", dict(training_args={"gradient_checkpointing": True}), ["training_args.gradient_checkpointing", "gc"], []),
    (
        "P02",
        dict(training_args={"report_to": ["wandb"]}),
        ["training_args.report_to"],
        ["tracking, saving and logging"],
    ),  # T06
    ("P02", dict(training_args={"report_to": "all"}), ["training_args.report_to"], ["timed window"]),
    (
        "P02",
        dict(training_args={"save_strategy": "steps", "logging_steps": 5}),
        ["training_args.save_strategy", "training_args.logging_steps"],
        [],
    ),
    (
        "P02",
        dict(training_args={"push_to_hub": True, "hub_model_id": "me/x"}),
        ["training_args.push_to_hub", "training_args.hub_model_id"],
        [],
    ),
    (
        "P02",
        dict(training_args={"logging_dir": "/tmp/tb"}),
        ["training_args.logging_dir"],
        [],
    ),  # gone from transformers 5
    ("P02", dict(training_args={"eval_strategy": "steps"}), ["training_args.eval_strategy"], ["eval=true"]),
    # training_args against the installed TrainingArguments
    ("P03", dict(training_args={"not_a_field": 1}), ["training_args.not_a_field"], ["transformers 5"]),  # T04
    (
        "P03",
        dict(training_args={"learning_rat": 0.1, "zzz": 1}),
        ["training_args.learning_rat", "training_args.zzz"],
        ["did you mean learning_rate"],
    ),
    ("P04", dict(training_args={"learning_rate": "abc"}), ["training_args.learning_rate"], ["float", '"abc"']),
    ("P04", dict(training_args={"torch_compile": [True]}), ["training_args.torch_compile"], ["bool"]),
    ("P04", dict(training_args={"dataloader_num_workers": 1.5}), ["training_args.dataloader_num_workers"], ["int"]),
    (
        "P04",
        dict(training_args={"lr_scheduler_type": "cosine_typo"}),
        ["training_args.lr_scheduler_type"],
        ["one of linear, cosine"],
    ),
    ("P04", dict(training_args={"max_grad_norm": True}), ["training_args.max_grad_norm"], ["float"]),
    # fsdp_config
    ("P05", dict(fsdp_config={"cpu_offload": True}), ["fsdp", "fsdp_config.cpu_offload"], ["silently ignored"]),
    (
        "P06",
        dict(fsdp="shard_grad_op", fsdp_config={"reshard_after_forward": True}),
        ["fsdp", "fsdp_config.reshard_after_forward"],
        ["fsdp=full_shard"],
    ),  # T01
    (
        "P06",
        dict(fsdp="full_shard", fsdp_config={"reshard_after_forward": "false"}),
        ["fsdp", "fsdp_config.reshard_after_forward"],
        ["fsdp=shard_grad_op"],
    ),
    (
        "P06",
        dict(fsdp="full_shard", fsdp_config={"fsdp_reshard_after_forward": False}),
        ["fsdp", "fsdp_config.fsdp_reshard_after_forward"],
        [],
    ),
    (
        "P06",
        dict(fsdp="full_shard", fsdp_config={"sharding_strategy": "SHARD_GRAD_OP"}),
        ["fsdp", "fsdp_config.sharding_strategy"],
        ["fsdp=shard_grad_op"],
    ),
    ("P06", dict(fsdp="full_shard", fsdp_config={"version": 1}), ["fsdp", "fsdp_config.version"], ["sweeper chooses"]),
    ("P06", dict(fsdp="full_shard", fsdp_config={"fsdp_version": 1}), ["fsdp", "fsdp_config.fsdp_version"], []),
    ("P06", dict(fsdp="full_shard", fsdp_config={"xla": True}), ["fsdp", "fsdp_config.xla"], ["torch_xla"]),
    (
        "P07",
        dict(fsdp="full_shard", fsdp_config={"activation_checkpointing": True}),
        ["gc", "fsdp_config.activation_checkpointing"],
        ["gc=true"],
    ),
    (
        "P07",
        dict(fsdp="full_shard", fsdp_config={"transformer_layer_cls_to_wrap": ["GPT2Block"]}),
        ["model", "fsdp_config.transformer_layer_cls_to_wrap"],
        ["decoder_layer"],
    ),
    (
        "P08",
        dict(fsdp="full_shard", fsdp_config={"reshard_after_fwd": True}),
        ["fsdp_config.reshard_after_fwd"],
        ["known keys"],
    ),
    (
        "P08",
        dict(fsdp="full_shard", fsdp_config={"forward_prefetch": True}),
        ["fsdp", "fsdp_config.forward_prefetch"],
        ["FSDP1"],
    ),
    # deepspeed_config
    (
        "P09",
        dict(deepspeed_config={"zero_optimization": {"stage": 2}}),
        ["zero", "deepspeed_config.zero_optimization.stage"],
        ["zero=1|2|3"],
    ),
    (
        "P10",
        dict(zero=2, deepspeed_config={"zero_optimization": {"stage": 3}}),
        ["zero", "deepspeed_config.zero_optimization.stage"],
        ["zero=2"],
    ),
    (
        "P11",
        dict(zero=1, deepspeed_config={"train_micro_batch_size_per_gpu": 8}),
        ["per_device_batch_size", "deepspeed_config.train_micro_batch_size_per_gpu"],
        [],
    ),
    (
        "P11",
        dict(zero=1, grad_accum=2, deepspeed_config={"gradient_accumulation_steps": 1}),
        ["grad_accum", "deepspeed_config.gradient_accumulation_steps"],
        [],
    ),
    (
        "P11",
        dict(zero=1, deepspeed_config={"train_batch_size": 16}),
        ["per_device_batch_size", "grad_accum", "ranks_per_node", "nodes", "deepspeed_config.train_batch_size"],
        ["which make it 8"],
    ),
    (
        "P12",
        dict(zero=2, deepspeed_config={"bf16": {"enabled": True}}),
        ["precision", "deepspeed_config.bf16.enabled"],
        ["precision=fp32"],
    ),
    (
        "P12",
        dict(zero=2, precision="bf16", deepspeed_config={"bf16": {"enabled": False}}),
        ["precision", "deepspeed_config.bf16.enabled"],
        [],
    ),
    (
        "P12",
        dict(zero=2, deepspeed_config={"bfloat16": {"enabled": True}}),
        ["precision", "deepspeed_config.bfloat16.enabled"],
        [],
    ),
    (
        "P13",
        dict(zero=2, deepspeed_config={"gradient_clipping": 0.5}),
        ["training_args.max_grad_norm", "deepspeed_config.gradient_clipping"],
        ["1.0"],
    ),
    (
        "P13",
        dict(zero=2, deepspeed_config={"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}),
        ["training_args.learning_rate", "deepspeed_config.optimizer.params.lr"],
        [],
    ),
    (
        "P14",
        dict(zero=2, deepspeed_config={"wandb": {"enabled": True, "project": "x"}}),
        ["deepspeed_config.wandb.enabled"],
        ["timed window"],
    ),
    (
        "P14",
        dict(zero=2, deepspeed_config={"wall_clock_breakdown": True}),
        ["deepspeed_config.wall_clock_breakdown"],
        [],
    ),
    (
        "P15",
        dict(zero=2, deepspeed_config={"zero_optimisation": {"stage": 2}}),
        ["deepspeed_config.zero_optimisation"],
        ["deepspeed.ai"],
    ),
    (
        "P15",
        dict(zero=3, deepspeed_config={"zero_optimization": {"stage3_prefetch_bucketsize": 10}}),
        ["deepspeed_config.zero_optimization.stage3_prefetch_bucketsize"],
        [],
    ),
    # launcher (T05) and the known-incompatible table (T03)
    ("L01", dict(nodes=2), ["nodes", "launcher"], ["launcher=slurm"]),
    (
        "K01",
        dict(gc=True, use_reentrant=True, training_args={"ddp_find_unused_parameters": True}),
        ["gc", "use_reentrant", "training_args.ddp_find_unused_parameters"],
        ["mark a variable ready only once", "use_reentrant=false"],
    ),
]


@pytest.mark.parametrize(
    ("rule_id", "overrides", "keys", "words"), REFUSED, ids=[f"{r[0]}-{i}" for i, r in enumerate(REFUSED)]
)
def test_each_refusal_names_every_key_involved_and_what_to_use(rule_id, overrides, keys, words):
    e = refusal(**overrides)
    assert e.rule == rule_id, (e.rule, str(e))
    assert set(keys) <= set(e.keys), (e.keys, str(e))
    for word in words:
        assert word in str(e), str(e)
    for key in e.keys:  # every key named in the message itself too, not only in the key list
        assert key.split(".")[-1] in str(e) or key in ("launcher", "model", "nodes", "ranks_per_node"), (key, str(e))
    assert e.status == "invalid"
    assert e.kind == ("incompatible" if rule_id == "K01" else None)


PASSES = [
    dict(model_dtype="bfloat16", precision="bf16"),  # pure bf16 under plain DDP
    dict(precision="bf16"),
    dict(fsdp="full_shard", fsdp_config={"reshard_after_forward": True}),  # restates full_shard
    dict(fsdp="shard_grad_op", fsdp_config={"reshard_after_forward": "false", "fsdp_version": 2}),
    dict(fsdp="full_shard", fsdp_config={"sharding_strategy": "FULL_SHARD", "cpu_offload": False}),
    dict(fsdp="full_shard", gc=True, fsdp_config={"activation_checkpointing": "true"}),
    dict(fsdp="full_shard", fsdp_config={"transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}),
    dict(zero=2, deepspeed_config={"zero_optimization": {"stage": 2, "overlap_comm": True}}),
    dict(zero=3, deepspeed_config={"train_batch_size": 8, "train_micro_batch_size_per_gpu": "auto"}),
    dict(zero=2, precision="bf16", deepspeed_config={"bf16": {"enabled": True}}),
    dict(zero=2, deepspeed_config={"gradient_clipping": 0.5}, training_args={"max_grad_norm": 0.5}),
    dict(zero=2, deepspeed_config={"wandb": {"enabled": False}}),
    dict(training_args={"report_to": "none", "save_strategy": "no", "per_device_train_batch_size": 4}),
    dict(training_args={"report_to": []}),
    dict(training_args={"max_grad_norm": 0.5, "lr_scheduler_type": "cosine", "torch_compile": False}),
    dict(training_args={"learning_rate": 1, "optim": "adamw_torch"}),  # an int is a float
    dict(gc=True, use_reentrant=True, training_args={"ddp_find_unused_parameters": True, "ddp_static_graph": True}),
    dict(gc=True, use_reentrant=True, ranks_per_node=1, training_args={"ddp_find_unused_parameters": True}),  # no DDP
    dict(gc=True, use_reentrant=False, training_args={"ddp_find_unused_parameters": True}),
]


@pytest.mark.parametrize("overrides", PASSES, ids=[str(i) for i in range(len(PASSES))])
def test_restatements_and_real_settings_pass(overrides):
    check(spec(**overrides), CPU)


def test_the_zero3_frozen_parameter_row_never_refuses_a_point_before_launch():
    """Frozen parameters are invisible in the spec: the gate does not refuse every ZeRO-3 + gc point for them."""
    check(spec(zero=3, gc=True), Target("local", "cpu", None, {**VERSIONS, "deepspeed": "0.19.2"}))


def test_hardware_rules_give_unsupported_after_every_configuration_rule():
    e = refusal(precision="fp16")
    assert (e.rule, e.status) == ("H01", "unsupported")
    e = refusal(precision="fp16", zero=1, deepspeed_config={"fp16": {"enabled": False}})  # configuration first
    assert (e.rule, e.status) == ("P12", "invalid")


def test_fsdp_cpu_offload_runs_on_gpus_and_is_unsupported_on_cpu():
    """H04: FSDP2's CPU offload pins host memory, which needs an accelerator (a real setup error on this machine)."""
    kw = dict(fsdp="full_shard", fsdp_config={"cpu_offload": True})
    check(spec(**kw), Target("slurm", "cuda", "NVIDIA H100 80GB HBM3", VERSIONS))
    e = refusal(CPU, **kw)
    assert (e.rule, e.status) == ("H04", "unsupported")
    assert e.keys == ("fsdp_config.cpu_offload", "device")


def test_bf16_on_an_old_gpu_is_unsupported_naming_the_cluster_gpu():
    e = refusal(Target("slurm", "cuda", "Tesla V100-SXM2-32GB", VERSIONS), precision="bf16")
    assert e.rule == "H03" and set(e.keys) == {"precision", "cluster.gpu_name"}


def test_timed_steps_auto_in_a_spec_made_by_hand_is_refused_not_compared_with_3():
    """``from_config`` turns ``timed_steps=auto`` into ``timed_auto`` and the cap; a spec that still holds ``"auto"``
    (``PointSpec.from_dict`` of a hand-made spec) is refused by G03 instead of raising ``TypeError``."""
    hand_made = replace(spec(), timed_steps="auto")
    assert not hand_made.timed_auto
    with pytest.raises(InvalidPoint) as e:
        check(hand_made, CPU)
    assert (e.value.rule, e.value.keys) == ("G03", ("timed_steps",))


def test_a_sequence_over_the_models_positions_names_every_way_out_and_the_limit_fix_passes():
    """Issue 39: the fix offered was a shorter sequence only; raising the model's limit (the config key it holds)
    and another model are ways out too, and the one the message gives is accepted by the gate."""
    with pytest.raises(InvalidPoint) as refused:
        check(spec(seq_len=4096), Target())
    text = str(refused.value)
    assert "seq_len<=2048" in text and "model.config.max_position_embeddings=4096" in text and "model=<name>" in text
    check(spec(seq_len=4096, model={"config": {"max_position_embeddings": 4096}}), Target())
    gpt2 = replace(spec(seq_len=2048), model="gpt2", model_config={"n_positions": 1024})  # its config's own key
    with pytest.raises(InvalidPoint, match=r"model.config.n_positions=2048"):
        check(gpt2, Target())
