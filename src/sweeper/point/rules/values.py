"""Rules on sweeper's own keys: ranges, and cross-key combinations that cannot work."""

from __future__ import annotations

from sweeper.grid.schema import Dtype, Fsdp, Precision
from sweeper.grid.spec import PointSpec, model_max_seq_len
from sweeper.point.gate import Target, rule

ZERO_STAGES = (0, 1, 2, 3)


def _allowed(values: type) -> str:
    return ", ".join(v.value for v in values)


@rule("G01", ("fsdp", "precision", "model_dtype", "zero"), "each value is one the schema allows", "schema")
def _enum_values(spec: PointSpec, _: Target):
    for key, enum in (("fsdp", Fsdp), ("precision", Precision), ("model_dtype", Dtype)):
        if getattr(spec, key) not in {v.value for v in enum}:
            return f"{key}={getattr(spec, key)!r} is not one of {_allowed(enum)}", (key,)
    if spec.zero not in ZERO_STAGES:
        return f"zero={spec.zero} is not a DeepSpeed ZeRO stage: use one of 0, 1, 2, 3 (0 = no DeepSpeed)", ("zero",)
    return None


@rule(
    "G02",
    ("per_device_batch_size", "seq_len", "grad_accum", "ranks_per_node", "nodes"),
    "sizes and counts are at least 1",
    "TrainingArguments",
)
def _positive(spec: PointSpec, _: Target):
    for key in ("per_device_batch_size", "seq_len", "grad_accum", "ranks_per_node", "nodes"):
        if getattr(spec, key) < 1:
            return f"{key}={getattr(spec, key)} must be at least 1", (key,)
    return None


@rule(
    "G03",
    ("warmup_steps", "timed_steps", "memory_steps", "profile_steps", "timeout_s", "host_mem_limit_gib"),
    "step counts >= 0, timed_steps >= 3 (median, p10, p90), budgets > 0",
    "docs/measurement.md",
)
def _steps_and_budgets(spec: PointSpec, _: Target):
    for key in ("warmup_steps", "memory_steps", "profile_steps"):
        if getattr(spec, key) < 0:
            return f"{key}={getattr(spec, key)} must be at least 0", (key,)
    if spec.timed_steps < 3:
        return (
            f"timed_steps={spec.timed_steps} must be at least 3 (median, p10 and p90 of the timed steps)",
            ("timed_steps",),
        )
    if spec.timeout_s <= 0:
        return f"timeout_s={spec.timeout_s} must be positive (seconds)", ("timeout_s",)
    if spec.host_mem_limit_gib is not None and spec.host_mem_limit_gib <= 0:
        return (
            f"host_mem_limit_gib={spec.host_mem_limit_gib} must be positive (GiB), or null for the default",
            ("host_mem_limit_gib",),
        )
    return None


@rule("G04", ("fsdp", "zero"), "FSDP and DeepSpeed ZeRO > 0 are exclusive (two sharding engines)", "accelerate")
def _fsdp_with_zero(spec: PointSpec, _: Target):
    if spec.fsdp != "none" and spec.zero > 0:
        return (
            f"fsdp={spec.fsdp} together with zero={spec.zero}: FSDP and DeepSpeed ZeRO both shard the model; "
            "choose one (fsdp=none with zero=1,2,3, or zero=0 with an FSDP strategy)",
            ("fsdp", "zero"),
        )
    return None


@rule("G05", ("seq_len", "model"), "seq_len is at most the model's max_position_embeddings", "model config")
def _seq_len(spec: PointSpec, _: Target):
    max_len = model_max_seq_len(spec)
    if max_len is not None and spec.seq_len > max_len:
        return (
            f"seq_len={spec.seq_len} is over model={spec.model}'s maximum of {max_len} tokens "
            f"(its max_position_embeddings); use seq_len<={max_len}",
            ("seq_len", "model"),
        )
    return None


@rule(
    "G06",
    ("precision", "model_dtype"),
    "fp16 autocast needs fp32 master weights (model_dtype=float32)",
    "case P03 ('Attempting to unscale FP16 gradients')",
)
def _fp16_weights(spec: PointSpec, _: Target):
    if spec.precision == "fp16" and spec.model_dtype == "float16":
        return (
            "precision=fp16 with model_dtype=float16: fp16 mixed precision needs fp32 master weights "
            "(the first optimizer step fails with 'Attempting to unscale FP16 gradients'); use model_dtype=float32",
            ("precision", "model_dtype"),
        )
    return None


@rule(
    "G07",
    ("fsdp", "gc", "use_reentrant"),
    "under FSDP, gc is FSDP-native checkpointing, always non-reentrant",
    "case P02; accelerate FSDP2 activation checkpointing",
)
def _fsdp_reentrant(spec: PointSpec, _: Target):
    if spec.fsdp != "none" and spec.gc and spec.use_reentrant:
        return (
            f"fsdp={spec.fsdp} with gc=true and use_reentrant=true: under FSDP, gc means FSDP-native activation "
            "checkpointing (case P02), which accelerate always runs non-reentrant; use use_reentrant=false, or "
            "fsdp=none to sweep use_reentrant",
            ("fsdp", "gc", "use_reentrant"),
        )
    return None


@rule("G08", ("fsdp", "ranks_per_node", "nodes"), "hybrid_shard needs at least 2 ranks", "torch FSDP docs")
def _hybrid_ranks(spec: PointSpec, _: Target):
    if spec.fsdp == "hybrid_shard" and spec.nodes < 2 and spec.ranks_per_node < 2:
        return (
            "fsdp=hybrid_shard needs at least 2 ranks to shard over (ranks_per_node>=2)",
            ("fsdp", "ranks_per_node"),
        )
    return None
