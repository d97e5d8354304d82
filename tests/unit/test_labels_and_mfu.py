"""Truthful labels, hardware rules and MFU: the checks that keep a result from carrying a label it did not run."""

from __future__ import annotations

import pytest

from sweeper.config.target import Target
from sweeper.job.verify import mismatches
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.identity import point_id
from sweeper.results.mfu import Peak, flops_per_token, gpu_peak, mfu
from tests.unit.specs import make_spec as spec


def setup(**kw):
    base = {
        "world_size": 2,
        "wrapper": "DistributedDataParallel",
        "fsdp_enabled": False,
        "fsdp_version": None,
        "fsdp_sharded": False,
        "deepspeed_stage": 0,
        "compute_dtype": "float32",
        "device_type": "cpu",
        "checkpointing_impl": "none",
        "use_reentrant": None,
    }
    return {**base, **kw}


def test_a_truthful_ddp_point_has_no_mismatch():
    assert mismatches(spec(), setup()) == []


def test_a_sequence_parallel_label_whose_split_was_not_seen_or_not_halved_is_caught():
    """sp=2 must show each rank half of every sample; a rank that saw the whole sequence, or one whose embedding
    was never observed, does not prove the label."""
    base = setup(wrapper="DeepSpeedEngine", deepspeed_stage=2, mesh={"dp": 1, "tp": 1, "sp": 2}, tp_sharded_modules=0)
    sp = spec(sp=2, zero=2)
    assert mismatches(sp, {**base, "seq_len_per_rank": 64}) == []
    assert "128 tokens" in mismatches(sp, {**base, "seq_len_per_rank": 128})[0]
    assert "could not be observed" in mismatches(sp, {**base, "seq_len_per_rank": None})[0]
    assert "tp=1 sp=2" in mismatches(sp, {**base, "mesh": {"dp": 2, "tp": 1, "sp": 1}, "seq_len_per_rank": 64})[0]


def test_fsdp_that_silently_became_ddp_is_caught():
    problems = mismatches(spec(fsdp="full_shard"), setup())
    assert problems and "DistributedDataParallel" in problems[0] and "FSDP2" in problems[0]


def test_fsdp2_that_does_not_shard_is_caught():
    s = setup(wrapper="FSDPModule(fully_shard)", fsdp_enabled=True, fsdp_version=2, fsdp_sharded=False)
    assert any("not sharded" in p for p in mismatches(spec(fsdp="full_shard"), s))


def test_fewer_ranks_than_asked_is_caught():
    problems = mismatches(spec(ranks_per_node=2), setup(world_size=1))
    assert problems and "2 ranks asked" in problems[0] and "1 run" in problems[0]


def test_fp16_that_silently_computes_fp32_is_caught():
    problems = mismatches(spec(precision="fp16"), setup(compute_dtype="float32"))
    assert problems and "float32" in problems[0] and "autocast" in problems[0]


def test_a_wrong_deepspeed_stage_or_checkpointing_implementation_is_caught():
    assert any("stage 2" in p for p in mismatches(spec(zero=3), setup(wrapper="DeepSpeedEngine", deepspeed_stage=2)))
    s = setup(wrapper="FSDPModule(fully_shard)", fsdp_enabled=True, fsdp_version=2, fsdp_sharded=True)
    assert any(
        "checkpointing" in p for p in mismatches(spec(fsdp="full_shard", gc=True), {**s, "checkpointing_impl": "hf"})
    )


@pytest.mark.parametrize(
    ("kw", "device", "gpu", "words"),
    [
        ({"precision": "fp16"}, "cpu", None, ["fp16", "CPU"]),
        ({"fsdp": "hybrid_shard"}, "cpu", None, ["hybrid_shard", "FSDP1"]),
        ({"precision": "bf16"}, "cuda", "Tesla V100-SXM2-32GB", ["bf16", "8.0"]),  # case P04, from the cluster config
    ],
)
def test_what_this_hardware_cannot_run_is_unsupported_before_launch(kw, device, gpu, words):
    with pytest.raises(InvalidPoint) as e:
        check(spec(**kw), Target("slurm", device, gpu))
    assert e.value.status == "unsupported"
    for w in words:
        assert w in str(e.value)


def test_what_this_hardware_can_run_is_not_refused():
    check(spec(precision="bf16"), Target("local", "cpu"))
    check(spec(precision="bf16"), Target("slurm", "cuda", "NVIDIA H100 80GB HBM3"))
    check(spec(precision="fp16"), Target("slurm", "cuda", "NVIDIA H100 80GB HBM3"))


def test_gpu_peaks_are_dtype_aware_and_unknown_devices_get_no_mfu():
    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16").flops == 989.4e12
    assert gpu_peak("NVIDIA H100 80GB HBM3", "fp32").flops == 66.9e12
    assert gpu_peak("NVIDIA A100-SXM4-80GB", "bf16").flops == 312e12
    unknown = gpu_peak("NVIDIA GeForce RTX 9090", "bf16")
    assert unknown.flops is None and "unknown device" in unknown.source
    assert mfu(1000.0, 6e9, unknown) is None
    assert gpu_peak("Tesla V100-SXM2-32GB", "bf16").flops is None  # no bf16 on V100: no silent fallback


def test_flops_per_token_follows_palm_appendix_b():
    # tiny: N = 146,240 non-embedding params, L = 2, a = 4, d = 16, s = 128
    assert flops_per_token(146_240, 2, 4, 16, 128) == 6 * 146_240 + 12 * 2 * 4 * 16 * 128
    # 50 % MFU: 1000 tokens/s x 6e9 FLOPs/token = 6e12 FLOP/s on a 12e12 FLOP/s device
    assert mfu(1000.0, 6e9, Peak(12e12, "test")) == pytest.approx(0.5)


def test_point_ids_are_stable_and_change_with_any_key():
    assert point_id(spec()) == point_id(spec())
    assert len(point_id(spec())) == 12
    assert len({point_id(spec()), point_id(spec(gc=True)), point_id(spec(seq_len=256)), point_id(spec(seed=1))}) == 4
