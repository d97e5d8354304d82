"""The spec -> TrainingArguments / DeepSpeed config mapping (job side; builds real TrainingArguments, no training)."""

from __future__ import annotations

import pytest

from sweeper.job.trainer_setup import deepspeed_config, training_arguments
from tests.unit.specs import make_spec as _spec


def _ta(tmp_path, **kw):
    return training_arguments(_spec(**kw), str(tmp_path), use_cpu=True)


def test_sweeper_keys_map_to_their_trainingarguments_names(tmp_path):
    args = _ta(tmp_path, per_device_batch_size=3, grad_accum=2, seed=7, warmup_steps=1, timed_steps=4)
    assert args.per_device_train_batch_size == 3
    assert args.gradient_accumulation_steps == 2
    assert args.seed == 7 and args.data_seed == 7
    assert args.max_steps == 1 + 4 + 1 + 1  # warm-up + timed + memory + profiled (default profile_steps=1)
    assert not args.bf16 and not args.fp16
    # nothing runs in the timed window: no tracker, no saving, no evaluation
    assert args.report_to == [] and args.save_strategy == "no" and args.eval_strategy == "no"


def test_bf16_precision_sets_the_bf16_flag_only(tmp_path):
    args = _ta(tmp_path, precision="bf16")
    assert args.bf16 and not args.fp16


def test_ddp_checkpointing_passes_use_reentrant_explicitly(tmp_path):
    args = _ta(tmp_path, gc=True, use_reentrant=True)
    assert args.activation_checkpointing is True
    assert args.activation_checkpointing_kwargs == {"use_reentrant": True}
    assert not args.fsdp


@pytest.mark.parametrize("strategy", ["full_shard", "shard_grad_op"])
def test_fsdp_uses_fsdp2_native_checkpointing_and_wraps_the_decoder_layer(tmp_path, strategy):
    args = _ta(tmp_path, fsdp=strategy, gc=True)
    assert args.fsdp  # transformers 5.x turns the strategy string into fsdp=True + reshard_after_forward (FSDP2)
    assert args.fsdp_config["reshard_after_forward"] is (strategy == "full_shard")
    assert args.fsdp_config["version"] == 2
    assert args.fsdp_config["activation_checkpointing"] is True
    assert args.fsdp_config["transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert not args.activation_checkpointing  # never both (case P02)


def test_the_deepspeed_config_carries_the_stage_and_auto_sizes_and_merges_the_passthrough():
    cfg = deepspeed_config(_spec(zero=3, deepspeed_config={"zero_optimization": {"overlap_comm": False}}))
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["zero_optimization"]["overlap_comm"] is False
    assert cfg["zero_optimization"]["stage3_prefetch_bucket_size"] == "auto"
    assert cfg["train_micro_batch_size_per_gpu"] == "auto" and cfg["gradient_accumulation_steps"] == "auto"
    assert "optimizer" not in cfg  # AdamW is built by the HF side
