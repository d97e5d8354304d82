"""Passthrough entries and the point's identity: what sweeper sets, what restates it, the installed field list.

The mirrors of what sweeper sets (``sweeper.point.library_args``) are checked against the real
``sweeper.job.trainer_setup`` and the real ``TrainingArguments``; the field list comes from the real helper
subprocess.
"""

from __future__ import annotations

import enum

import pytest

from sweeper.point.identity import normalised, point_id
from sweeper.point.library_args import (
    is_no_tracker,
    redundant_passthrough,
    same,
    sweeper_deepspeed_config,
    sweeper_fsdp_config,
    sweeper_training_args,
)
from sweeper.point.rules.ta_schema import conforms
from tests.unit.specs import make_spec as spec

# ------------------------------------------------------------------------------------------- mirrors of trainer_setup


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(gc=True, use_reentrant=True), dict(precision="bf16", eval=True, grad_accum=2), dict(timeout_s=60)],
)
def test_sweeper_training_args_are_what_trainer_setup_really_passes(tmp_path, kw):
    from sweeper.job.trainer_setup import training_arguments

    args = training_arguments(spec(**kw), str(tmp_path), use_cpu=True)
    for field, ours in sweeper_training_args(spec(**kw)).items():
        real = getattr(args, field)
        real = real.value if isinstance(real, enum.Enum) else real
        if field == "report_to":
            assert is_no_tracker(real) and is_no_tracker(ours)
        else:
            assert same(real, ours), (field, real, ours)


@pytest.mark.parametrize("fsdp", ["full_shard", "shard_grad_op"])
@pytest.mark.parametrize("gc", [False, True])
def test_sweeper_fsdp_config_is_what_transformers_derives_from_the_label(tmp_path, fsdp, gc):
    """FSDP2: reshard_after_forward is True for full_shard, False for shard_grad_op (case T01)."""
    from sweeper.job.trainer_setup import training_arguments

    real = training_arguments(spec(fsdp=fsdp, gc=gc), str(tmp_path), use_cpu=True).fsdp_config
    ours = sweeper_fsdp_config(spec(fsdp=fsdp, gc=gc))
    for key in ("version", "transformer_layer_cls_to_wrap", "activation_checkpointing", "reshard_after_forward"):
        assert same(real[key], ours[key]), (key, real[key], ours[key])
    assert ours["reshard_after_forward"] is (fsdp == "full_shard")


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_sweeper_deepspeed_config_is_what_trainer_setup_generates(zero):
    from sweeper.job.trainer_setup import deepspeed_config

    assert sweeper_deepspeed_config(spec(zero=zero)) == deepspeed_config(spec(zero=zero))
    assert sweeper_deepspeed_config(spec()) == {}


# ------------------------------------------------------------------------------------------- the installed field list


@pytest.mark.parametrize(
    ("value", "desc", "ok"),
    [
        (1, {"t": "float"}, True),
        ("1.0", {"t": "float"}, False),
        (True, {"t": "int"}, False),
        (2.0, {"t": "int"}, False),
        (["wandb"], {"t": "bool"}, False),
        (None, {"t": "union", "of": [{"t": "none"}, {"t": "str"}]}, True),
        ("cosine", {"t": "choice", "values": ["linear", "cosine"]}, True),
        ("Cosine", {"t": "choice", "values": ["linear", "cosine"]}, False),
        (0, {"t": "choice", "values": [False]}, False),
        ({"a": True}, {"t": "dict", "value": {"t": "bool"}}, True),
        ({"a": 1}, {"t": "dict", "value": {"t": "bool"}}, False),
        ({}, {"t": "class", "name": "ParallelismConfig"}, False),
    ],
)
def test_conforms_reads_values_as_the_field_types_take_them(value, desc, ok):
    assert conforms(value, desc) is ok


# ------------------------------------------------------------------------------------------- identity (T09, T10)


def test_use_reentrant_without_checkpointing_is_one_point():
    """Case T09: -m gc=false use_reentrant=false,true is one configuration."""
    assert point_id(spec(gc=False, use_reentrant=True)) == point_id(spec(gc=False, use_reentrant=False))
    assert point_id(spec(gc=True, use_reentrant=True)) != point_id(spec(gc=True, use_reentrant=False))


def test_budgets_are_not_part_of_what_a_configuration_is():
    """Case T10: timeout_s and host_mem_limit_gib bound a run without changing it."""
    base = point_id(spec())
    assert point_id(spec(timeout_s=6)) == base
    assert point_id(spec(host_mem_limit_gib=3.5)) == base
    assert point_id(spec(profile_trace=False)) == base
    # the profile window comes after the timed and memory windows: its length changes no measured number
    assert point_id(spec(profile_steps=0)) == point_id(spec(profile_steps=3)) == base
    assert point_id(spec(memory_steps=2)) != base and point_id(spec(warmup_steps=1)) != base
    assert point_id(spec(seq_len=64)) != base


@pytest.mark.parametrize(
    ("restated", "plain"),
    [
        (dict(zero=2, deepspeed_config={"zero_optimization": {"stage": 2}}), dict(zero=2)),
        (dict(zero=3, deepspeed_config={"train_batch_size": 8, "bf16": {"enabled": "auto"}}), dict(zero=3)),
        (dict(zero=1, deepspeed_config={"gradient_clipping": 1.0}), dict(zero=1)),
        (dict(fsdp="full_shard", fsdp_config={"reshard_after_forward": True}), dict(fsdp="full_shard")),
        (dict(fsdp="shard_grad_op", fsdp_config={"fsdp_reshard_after_forward": "false"}), dict(fsdp="shard_grad_op")),
        (dict(fsdp="full_shard", fsdp_config={"cpu_offload": False, "version": 2}), dict(fsdp="full_shard")),
        (dict(training_args={"report_to": "none"}), dict()),
        (dict(training_args={"report_to": ["none"], "save_strategy": "no"}), dict()),
        (dict(training_args={"max_grad_norm": 1}), dict()),  # the TrainingArguments default
        (dict(training_args={"learning_rate": 1e-4}), dict()),  # what sweeper sets
        (dict(training_args={"per_device_train_batch_size": 4}), dict()),
    ],
)
def test_an_entry_that_restates_what_runs_is_the_same_point(restated, plain):
    assert point_id(spec(**restated)) == point_id(spec(**plain))


@pytest.mark.parametrize(
    ("changed", "plain"),
    [
        (dict(zero=2, deepspeed_config={"zero_optimization": {"overlap_comm": True}}), dict(zero=2)),
        (dict(fsdp="full_shard", fsdp_config={"cpu_offload": True}), dict(fsdp="full_shard")),
        (dict(training_args={"max_grad_norm": 0.5}), dict()),
        (dict(training_args={"learning_rate": 5e-05}), dict()),  # the TrainingArguments default, not sweeper's
    ],
)
def test_a_real_setting_is_another_point(changed, plain):
    assert point_id(spec(**changed)) != point_id(spec(**plain))


def test_fsdp_prefixed_keys_are_one_spelling():
    a = spec(fsdp="full_shard", fsdp_config={"fsdp_cpu_offload": True})
    b = spec(fsdp="full_shard", fsdp_config={"cpu_offload": True})
    assert point_id(a) == point_id(b)
    assert normalised(a)["fsdp_config"] == {"cpu_offload": True}


def test_redundant_passthrough_names_dotted_paths_per_section():
    s = spec(
        zero=2,
        deepspeed_config={"zero_optimization": {"stage": 2, "overlap_comm": True}, "train_micro_batch_size_per_gpu": 4},
        training_args={"report_to": "none", "max_grad_norm": 0.5},
    )
    assert redundant_passthrough(s) == {
        "deepspeed_config": {"zero_optimization.stage", "train_micro_batch_size_per_gpu"},
        "fsdp_config": set(),
        "training_args": {"report_to"},
    }
    assert normalised(s)["deepspeed_config"] == {"zero_optimization": {"overlap_comm": True}}
