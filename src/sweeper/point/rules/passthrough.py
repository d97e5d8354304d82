"""Rules on the passthrough dicts: ``training_args``, ``fsdp_config``, ``deepspeed_config``."""

from __future__ import annotations

from sweeper.grid.spec import PointSpec
from sweeper.point.gate import Target, rule

# TrainingArguments fields that sweeper derives from its own keys: the passthrough may not set them.
OWNED_TRAINING_ARGS = {
    "per_device_train_batch_size": "per_device_batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "fsdp": "fsdp",
    "fsdp_config": "fsdp_config",
    "deepspeed": "zero / deepspeed_config",
    "bf16": "precision",
    "fp16": "precision",
    "gradient_checkpointing": "gc",
    "activation_checkpointing": "gc",
    "gradient_checkpointing_kwargs": "use_reentrant",
    "activation_checkpointing_kwargs": "use_reentrant",
    "max_steps": "warmup_steps / timed_steps",
    "seed": "seed",
    "output_dir": "the sweep directory",
}


@rule(
    "P01",
    ("training_args.*",),
    "training_args may not set a field sweeper sets from its own key",
    "sweeper owns these TrainingArguments fields",
)
def _owned_training_args(spec: PointSpec, _: Target):
    bad = sorted(set(spec.training_args) & set(OWNED_TRAINING_ARGS))
    if bad:
        return (
            f"training_args.{bad[0]} is set by sweeper from its own key; use {OWNED_TRAINING_ARGS[bad[0]]} instead",
            tuple(f"training_args.{k}" for k in bad),
        )
    return None
