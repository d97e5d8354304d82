"""Every bad input meets the gate before any rank starts: real ``python -m sweeper`` commands, one point each.

Each case must exit 2, name every key involved on stderr, and leave no ``multirun/`` directory behind (Hydra made
no directory, no rank started). The commands run concurrently (4 at a time, about 2 s each); the installed
``TrainingArguments`` field list is built once, by the real helper subprocess, into a cache for the session.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import run_sweeper

# (case, overrides, every key the refusal must name); cases T01-T06 from shared/cases/turn2.md
CASES = [
    (
        "T01-reshard-contradicts-shard_grad_op",
        ["fsdp=shard_grad_op", "+fsdp_config.reshard_after_forward=true"],
        ["fsdp", "fsdp_config.reshard_after_forward"],
    ),
    ("T02-bf16-weights-fp32-label", ["model_dtype=bfloat16", "precision=fp32"], ["model_dtype", "precision"]),
    (
        "T03-ddp-reentrant-find-unused",
        ["gc=true", "use_reentrant=true", "+training_args.ddp_find_unused_parameters=true"],
        ["gc", "use_reentrant", "training_args.ddp_find_unused_parameters"],
    ),
    ("T04-unknown-training-arg", ["+training_args.not_a_field=1"], ["training_args.not_a_field"]),
    ("T05-two-nodes-local", ["nodes=2"], ["nodes", "launcher"]),
    ("T06-report-to-wandb", ["+training_args.report_to=[wandb]"], ["training_args.report_to"]),
    ("fsdp-and-zero", ["fsdp=full_shard", "zero=2"], ["fsdp", "zero"]),
    ("fp16-weights-bf16-label", ["model_dtype=float16", "precision=bf16"], ["model_dtype", "precision"]),
    (
        "pure-bf16-under-fsdp",
        ["model_dtype=bfloat16", "precision=bf16", "fsdp=full_shard"],
        ["model_dtype", "precision", "fsdp"],
    ),
    (
        "sharding-strategy-contradicts",
        ["fsdp=full_shard", "+fsdp_config.sharding_strategy=SHARD_GRAD_OP"],
        ["fsdp", "fsdp_config.sharding_strategy"],
    ),
    (
        "fsdp-version-chosen-by-sweeper",
        ["fsdp=full_shard", "+fsdp_config.fsdp_version=1"],
        ["fsdp", "fsdp_config.fsdp_version"],
    ),
    (
        "fsdp-checkpointing-owned-by-gc",
        ["fsdp=full_shard", "+fsdp_config.activation_checkpointing=true"],
        ["gc", "fsdp_config.activation_checkpointing"],
    ),
    (
        "fsdp-wrap-owned-by-model",
        ["fsdp=full_shard", "+fsdp_config.transformer_layer_cls_to_wrap=GPT2Block"],
        ["model", "fsdp_config.transformer_layer_cls_to_wrap"],
    ),
    ("fsdp-unknown-key", ["fsdp=full_shard", "+fsdp_config.reshard_after_fwd=true"], ["fsdp_config.reshard_after_fwd"]),
    ("fsdp-config-without-fsdp", ["+fsdp_config.cpu_offload=true"], ["fsdp", "fsdp_config.cpu_offload"]),
    (
        "deepspeed-config-without-zero",
        ["+deepspeed_config.zero_optimization.stage=2"],
        ["zero", "deepspeed_config.zero_optimization.stage"],
    ),
    (
        "deepspeed-stage-contradicts-zero",
        ["zero=2", "+deepspeed_config.zero_optimization.stage=3"],
        ["zero", "deepspeed_config.zero_optimization.stage"],
    ),
    (
        "deepspeed-micro-batch",
        ["zero=1", "+deepspeed_config.train_micro_batch_size_per_gpu=8"],
        ["per_device_batch_size", "deepspeed_config.train_micro_batch_size_per_gpu"],
    ),
    (
        "deepspeed-grad-accum",
        ["zero=1", "grad_accum=2", "+deepspeed_config.gradient_accumulation_steps=1"],
        ["grad_accum", "deepspeed_config.gradient_accumulation_steps"],
    ),
    (
        "deepspeed-train-batch",
        ["zero=1", "+deepspeed_config.train_batch_size=16"],
        ["per_device_batch_size", "grad_accum", "ranks_per_node", "nodes", "deepspeed_config.train_batch_size"],
    ),
    (
        "deepspeed-bf16-contradicts-precision",
        ["zero=1", "+deepspeed_config.bf16.enabled=true"],
        ["precision", "deepspeed_config.bf16.enabled"],
    ),
    (
        "deepspeed-clipping-vs-max-grad-norm",
        ["zero=1", "+deepspeed_config.gradient_clipping=0.5"],
        ["training_args.max_grad_norm", "deepspeed_config.gradient_clipping"],
    ),
    ("deepspeed-wandb-monitor", ["zero=1", "+deepspeed_config.wandb.enabled=true"], ["deepspeed_config.wandb.enabled"]),
    (
        "deepspeed-misspelt-block",
        ["zero=1", "+deepspeed_config.zero_optimisation.stage=1"],
        ["deepspeed_config.zero_optimisation"],
    ),
    (
        "training-arg-owned-batch",
        ["+training_args.per_device_train_batch_size=8"],
        ["training_args.per_device_train_batch_size", "per_device_batch_size"],
    ),
    ("training-arg-saving", ["+training_args.save_strategy=steps"], ["training_args.save_strategy"]),
    (
        "training-arg-hub-two-keys",
        ["+training_args.push_to_hub=true", "+training_args.hub_model_id=me/tiny"],
        ["training_args.push_to_hub", "training_args.hub_model_id"],
    ),
    ("training-arg-string-for-float", ["+training_args.learning_rate=abc"], ["training_args.learning_rate"]),
    (
        "training-arg-outside-enum",
        ["+training_args.lr_scheduler_type=cosine_typo"],
        ["training_args.lr_scheduler_type"],
    ),
    ("training-arg-list-for-bool", ["+training_args.torch_compile=[true]"], ["training_args.torch_compile"]),
    ("fp16-on-cpu-unsupported", ["precision=fp16", "device=cpu"], ["precision", "device"]),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every case's command, 4 at a time, each in its own empty working directory."""
    from sweeper.point.rules.ta_schema import load_schema

    load_schema()  # the helper runs once here, into the session's SWEEPER_CACHE_DIR; the commands read the cache
    cwds = {name: tmp_path_factory.mktemp(name) for name, _, _ in CASES}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_sweeper, args, cwds[name], 120) for name, args, _ in CASES}
        return {name: f.result() for name, f in futures.items()}


def test_at_least_25_distinct_bad_inputs_are_tried():
    assert len({tuple(args) for _, args, _ in CASES}) == len(CASES) >= 25


@pytest.mark.parametrize(("name", "args", "keys"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_exits_2_naming_every_key_before_any_rank(runs, name, args, keys):
    run = runs[name]
    assert run.proc.returncode == 2, run.output[-2000:]
    stderr = run.proc.stderr
    assert "invalid point (" in stderr or "unsupported point (" in stderr, stderr[-2000:]
    named = stderr.split(" point (", 1)[1].split("):", 1)[0].split(", ")
    for key in keys:
        assert key in named, (key, named)
    assert "Traceback" not in stderr
    assert not (run.cwd / "multirun").exists()  # no directory made, so no rank started
