"""Rules on sweeper's own keys: ranges, and cross-key combinations that cannot work."""

from __future__ import annotations

from enum import Enum

from sweeper.config.schema import ZERO_STAGES, Dtype, Fsdp, Precision, batch_size_error, timed_steps_error
from sweeper.config.spec import PointSpec, max_position_key, model_max_seq_len
from sweeper.config.target import Target
from sweeper.point.gate import rule


def _allowed(values: type[Enum]) -> str:
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
    "sizes and counts are at least 1 (per_device_batch_size: or auto)",
    "TrainingArguments",
)
def _positive(spec: PointSpec, _: Target):
    bad_batch = batch_size_error(spec.per_device_batch_size)
    if bad_batch:
        return bad_batch, ("per_device_batch_size",)
    for key in ("per_device_batch_size", "seq_len", "grad_accum", "ranks_per_node", "nodes"):
        if key == "per_device_batch_size" and spec.batch_search:
            continue
        if getattr(spec, key) < 1:
            return f"{key}={getattr(spec, key)} must be at least 1", (key,)
    return None


@rule(
    "G03",
    ("warmup_steps", "timed_steps", "memory_steps", "profile_steps", "timeout_s", "host_mem_limit_gib"),
    "step counts >= 0, timed_steps >= 3 (median, p10, p90) or auto, budgets > 0",
    "docs/measurement.md",
)
def _steps_and_budgets(spec: PointSpec, _: Target):
    for key in ("warmup_steps", "memory_steps", "profile_steps"):
        if getattr(spec, key) < 0:
            return f"{key}={getattr(spec, key)} must be at least 0", (key,)
    bad_steps = timed_steps_error(spec.timed_steps)
    if bad_steps:
        return bad_steps, ("timed_steps",)
    steps = spec.timed_steps
    if not spec.timed_auto and isinstance(steps, str):  # "auto" in a spec not made by from_config
        return (
            f"timed_steps={steps} without timed_auto=true: a spec made by hand; give timed_steps=auto on the "
            "command line (sweeper.config.spec.from_config sets timed_auto and the cap)",
            ("timed_steps",),
        )
    if not spec.timed_auto and isinstance(steps, int) and steps < 3:
        return (
            f"timed_steps={steps} must be at least 3 (median, p10 and p90 of the timed steps)",
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


@rule(
    "G11",
    ("timed_steps", "timing.ci_rel", "timing.min_timed_steps", "timing.max_timed_steps", "timing.contention_warn_frac"),
    "timed_steps=auto: 0 < timing.ci_rel < 1 and 3 <= timing.min_timed_steps <= timing.max_timed_steps; "
    "0 <= timing.contention_warn_frac < 1",
    "docs/measurement.md (the stop rule of timed_steps=auto; Contention)",
)
def _timing(spec: PointSpec, _: Target):
    ci_rel, low = spec.timing.ci_rel, spec.timing.min_timed_steps
    high = spec.timed_steps if spec.timed_auto else spec.timing.max_timed_steps  # auto: the spec holds the cap
    if not isinstance(ci_rel, (int, float)) or isinstance(ci_rel, bool) or not 0 < ci_rel < 1:
        return (
            f"timing.ci_rel={ci_rel!r} must be a fraction between 0 and 1 (0.02: the median's 95 % interval within "
            "±2 % of it)",
            ("timing.ci_rel",),
        )
    for key, v in (("timing.min_timed_steps", low), ("timing.max_timed_steps", high)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 3:
            return f"{key}={v!r} must be an integer of at least 3 (median, p10 and p90 of the timed steps)", (key,)
    if isinstance(high, int) and low > high:  # an int by now (checked above); isinstance for the type checker
        return (
            f"timing.min_timed_steps={low} is above timing.max_timed_steps={high}: the cap must allow the minimum",
            ("timing.min_timed_steps", "timing.max_timed_steps"),
        )
    warn = spec.timing.contention_warn_frac
    if not isinstance(warn, (int, float)) or isinstance(warn, bool) or not 0 <= warn < 1:
        return (
            f"timing.contention_warn_frac={warn!r} must be a fraction from 0 to below 1 (0.1: a point whose ranks "
            "waited over 10 % of the timed window for a CPU is reported as measured under contention)",
            ("timing.contention_warn_frac",),
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
        key = max_position_key(spec)
        return (
            f"seq_len={spec.seq_len} is over model={spec.model}'s maximum of {max_len} tokens (its {key}); use "
            f"seq_len<={max_len}, or raise the model's limit with model.config.{key}={spec.seq_len} (a longer "
            "context than the model was published with: no RoPE scaling is added for you, set "
            "+model.config.rope_scaling=... for that), or pick a model with a longer context (model=<name>)",
            ("seq_len", "model"),
        )
    return None


@rule(
    "G12",
    ("seq_len",),
    "seq_len is at least 2: a causal LM learns each token from those before it",
    "transformers ForCausalLMLoss (labels shifted by one: seq_len - 1 targets per sample); docs/cases.md#u03",
)
def _next_token_target(spec: PointSpec, _: Target):
    if spec.seq_len == 1:
        return (
            "seq_len=1: a causal LM predicts each token from the tokens before it, so one token has no next-token "
            "target (the loss and every gradient are 0 at every step, and the measured step would not be training); "
            "use seq_len>=2",
            ("seq_len",),
        )
    return None


@rule(
    "G06",
    ("precision", "model_dtype"),
    "fp16 autocast needs fp32 master weights (model_dtype=float32)",
    "docs/cases.md#p03 ('Attempting to unscale FP16 gradients')",
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
    "docs/cases.md#p02; accelerate FSDP2 activation checkpointing",
)
def _fsdp_reentrant(spec: PointSpec, _: Target):
    if spec.fsdp != "none" and spec.gc and spec.use_reentrant:
        return (
            f"fsdp={spec.fsdp} with gc=true and use_reentrant=true: under FSDP, gc means FSDP-native activation "
            "checkpointing (docs/cases.md#p02), which accelerate always runs non-reentrant; use use_reentrant=false, "
            "or "
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


#: What each (model_dtype, precision) pair means (docs/gate.md): precision is the compute dtype, model_dtype the
#: storage dtype of the weights. Pairs missing here are refused by G09 (float16 x fp16 by G06).
DTYPE_PAIRS: dict[tuple[str, str], str] = {
    ("float32", "fp32"): "fp32 training",
    ("float32", "bf16"): "bf16 autocast with fp32 master weights",
    ("float32", "fp16"): "fp16 autocast with fp32 master weights (loss scaling)",
    ("bfloat16", "bf16"): "pure bf16 training: bf16 weights, gradients and optimizer state, no fp32 master copy",
}

_DTYPE_FIX = {
    ("bfloat16", "fp32"): "nothing would compute in fp32 (no autocast up-casts bf16 weights), so the fp32 label would "
    "be false (transformers#24819)",
    ("float16", "fp32"): "nothing would compute in fp32, and pure fp16 training has no fp32 master weights "
    "(the optimizer step fails unscaling fp16 gradients)",
    ("float16", "bf16"): "fp16 weights under bf16 autocast: the weights would be stored in one half-precision "
    "format and computed in another, with no fp32 master copy",
    ("bfloat16", "fp16"): "bf16 weights under fp16 autocast: the weights would be stored in one half-precision "
    "format and computed in another, with no fp32 master copy",
}


@rule(
    "G09",
    ("model_dtype", "precision"),
    "model_dtype x precision is one of: float32 x fp32|bf16|fp16, bfloat16 x bf16 (pure bf16)",
    "docs/cases.md#t02 (transformers#24819); precision = compute dtype, model_dtype = storage dtype of the weights",
)
def _dtype_pair(spec: PointSpec, _: Target):
    pair = (spec.model_dtype, spec.precision)
    if pair in DTYPE_PAIRS or pair == ("float16", "fp16"):  # float16 x fp16 is G06's
        return None
    return (
        f"model_dtype={spec.model_dtype} with precision={spec.precision}: {_DTYPE_FIX.get(pair, 'an undefined pair')}; "
        "use precision=bf16 model_dtype=bfloat16 for pure bf16 training, or model_dtype=float32 with "
        "precision=fp32|bf16|fp16 (fp32 training, or autocast with fp32 master weights)",
        ("model_dtype", "precision"),
    )


@rule(
    "G10",
    ("model_dtype", "precision", "fsdp", "zero"),
    "pure bf16 (model_dtype=bfloat16) only without FSDP and DeepSpeed: both keep fp32 master weights under bf16",
    "accelerate fsdp2_prepare_model / FSDP1 prepare (upcast to fp32 under mixed precision); DeepSpeed bf16 "
    "(casts the model itself, fp32 master weights in the optimizer)",
)
def _pure_bf16_engines(spec: PointSpec, _: Target):
    if spec.model_dtype == "float32" or spec.precision == "fp32" or (spec.fsdp == "none" and not spec.deepspeed):
        return None
    engine = f"fsdp={spec.fsdp}" if spec.fsdp != "none" else f"zero={spec.zero}"
    how = (
        "accelerate up-casts the weights to fp32 master weights when FSDP runs mixed precision"
        if spec.fsdp != "none"
        else "DeepSpeed casts the model to half precision itself and keeps fp32 master weights in its optimizer"
    )
    return (
        f"model_dtype={spec.model_dtype} with precision={spec.precision} and {engine}: {how}, so the run is autocast "
        f"with fp32 master weights, not pure {spec.precision}; use model_dtype=float32 (the same run, labelled "
        "truthfully), or fsdp=none zero=0 for pure bf16 training",
        ("model_dtype", "precision", "fsdp" if spec.fsdp != "none" else "zero"),
    )
