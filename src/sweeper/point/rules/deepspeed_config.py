"""Rules on ``deepspeed_config``: given without DeepSpeed, entries that contradict a labelled key or a
``TrainingArguments`` value, monitors in the timed window, unknown keys.

Sweeper generates the DeepSpeed config from its keys with ``"auto"`` sizes that the HF integration fills from
``TrainingArguments`` (:func:`sweeper.point.library_args.sweeper_deepspeed_config`); ``deepspeed_config`` is merged on
top, one level deep per block. An entry that restates the generated value (or what ``"auto"`` resolves to) passes
and is dropped from the identity; one that contradicts it is refused here, before any rank, instead of failing in
the HF integration's mismatch check at setup or silently changing what the label says.
"""

from __future__ import annotations

from typing import Any

from sweeper.config.spec import PointSpec, dotted_leaves
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.point.library_args import (
    deepspeed_restates,
    effective_training_args,
    hf_matched_deepspeed,
    truth,
)
from sweeper.point.rules.known_keys import (
    DEEPSPEED_MONITOR_BLOCKS,
    DEEPSPEED_MONITOR_FLAGS,
    DEEPSPEED_TOP_KEYS,
    DEEPSPEED_ZERO_KEYS,
)
from sweeper.point.rules.passthrough import show_value
from sweeper.point.rules.ta_schema import training_args_schema

#: DeepSpeed keys decided by sweeper's own keys (the rest of hf_matched_deepspeed comes from training_args).
LABEL_KEYS: dict[str, str] = {
    "zero_optimization.stage": "P10",
    "tensor_parallel.autotp_size": "T10",
    "sequence_parallel_size": "T10",
    "train_micro_batch_size_per_gpu": "P11",
    "gradient_accumulation_steps": "P11",
    "train_batch_size": "P11",
    "bf16.enabled": "P12",
    "fp16.enabled": "P12",
}


def _effective(spec: PointSpec) -> dict[str, Any]:
    schema = training_args_schema() if spec.deepspeed_config else None
    return effective_training_args(spec, schema.defaults() if schema is not None else None)


def _contradictions(spec: PointSpec, rule_id: str | None) -> list[tuple[str, Any, Any, tuple[str, ...]]]:
    """Entries of ``deepspeed_config`` that differ from the value the HF integration requires: (path, given,
    required, deciding keys), for the label keys of ``rule_id`` (None: the training_args-decided keys)."""
    if not spec.deepspeed or not spec.deepspeed_config:
        return []
    effective = _effective(spec)
    matched = hf_matched_deepspeed(spec, effective)
    out = []
    for path, value in sorted(dotted_leaves(spec.deepspeed_config).items()):
        if path not in matched or LABEL_KEYS.get(path) != rule_id or value == "auto":
            continue
        if not deepspeed_restates(spec, path, value, effective):
            required, keys = matched[path]
            out.append((path, value, required, keys))
    return out


def _refuse(spec: PointSpec, found: list[tuple[str, Any, Any, tuple[str, ...]]], fix: str):
    if not found:
        return None
    parts = []
    for path, value, required, keys in found:
        named = ", ".join(f"{k}={getattr(spec, k)}" if hasattr(spec, k) else k for k in keys)
        derived = required is not None and (len(keys) > 1 or "." in keys[0])  # not plain key=value: show it
        need = f" (which make it {show_value(required)})" if derived else ""
        parts.append(f"deepspeed_config.{path}={show_value(value)} contradicts {named}{need}")
    involved = [f"deepspeed_config.{p}" for p, *_ in found] + [k for *_, ks in found for k in ks]
    return "; ".join(parts) + f"; {fix}", tuple(dict.fromkeys(involved))


@rule(
    "P09",
    ("zero", "deepspeed_config.*"),
    "deepspeed_config is refused when DeepSpeed is off (zero=0 and tp=1): it would be silently ignored",
    "sweeper.job.trainer_setup (DeepSpeed for zero>0 or tp>1)",
)
def _deepspeed_off(spec: PointSpec, _: Target):
    if spec.deepspeed or not spec.deepspeed_config:
        return None
    keys = tuple(f"deepspeed_config.{p}" for p in sorted(dotted_leaves(spec.deepspeed_config)))
    return (
        f"{', '.join(keys)} with zero=0: DeepSpeed is off, so deepspeed_config would be silently ignored; remove "
        "it, or choose a ZeRO stage (zero=1|2|3) or DeepSpeed AutoTP (tp>1)",
        ("zero", *keys),
    )


@rule(
    "P10",
    ("zero", "deepspeed_config.zero_optimization.stage"),
    "deepspeed_config.zero_optimization.stage must equal zero",
    "sweeper.job.trainer_setup.deepspeed_config",
)
def _deepspeed_stage(spec: PointSpec, _: Target):
    return _refuse(spec, _contradictions(spec, "P10"), "the stage is the label: set zero=<stage> and drop the entry")


@rule(
    "T10",
    ("tp", "deepspeed_config.tensor_parallel.autotp_size"),
    "deepspeed_config.tensor_parallel.autotp_size must equal tp (and sequence_parallel_size sp)",
    "sweeper.point.library_args.sweeper_deepspeed_config (tp is the label of DeepSpeed AutoTP)",
)
def _deepspeed_tp(spec: PointSpec, _: Target):
    return _refuse(spec, _contradictions(spec, "T10"), "the degree is the label: set tp=<degree> and drop the entry")


@rule(
    "P11",
    (
        "per_device_batch_size",
        "grad_accum",
        "deepspeed_config.train_micro_batch_size_per_gpu",
        "deepspeed_config.gradient_accumulation_steps",
        "deepspeed_config.train_batch_size",
    ),
    "deepspeed_config batch sizes must equal per_device_batch_size, grad_accum and their product with the world size",
    "transformers.integrations.deepspeed (fill_match); DeepSpeed batch assertion",
)
def _deepspeed_batch(spec: PointSpec, _: Target):
    return _refuse(
        spec,
        _contradictions(spec, "P11"),
        "set per_device_batch_size / grad_accum (train_batch_size = per_device_batch_size x grad_accum x "
        'ranks_per_node x nodes) and drop the entry, or leave it "auto"',
    )


@rule(
    "P12",
    ("precision", "deepspeed_config.bf16.enabled", "deepspeed_config.fp16.enabled", "deepspeed_config.amp", "..."),
    "deepspeed_config precision entries (bf16, fp16, bfloat16, amp, torch_autocast) must agree with precision",
    "transformers.integrations.deepspeed (fill_match bf16/fp16.enabled); DeepSpeed config JSON docs",
)
def _deepspeed_precision(spec: PointSpec, _: Target):
    found = _contradictions(spec, "P12")
    found += [
        (p, v, None, ("precision",))
        for p, v in sorted(dotted_leaves(spec.deepspeed_config).items())
        if spec.deepspeed
        and p.split(".")[0] in ("bfloat16", "amp", "torch_autocast")
        and not (p.endswith(".enabled") and truth(v) is False)
    ]
    return _refuse(
        spec,
        found,
        "precision decides mixed precision (bf16: bf16.enabled, fp16: fp16.enabled, fp32: neither; DeepSpeed reads "
        "its bf16 block before the old bfloat16 spelling): set precision=fp32|bf16|fp16 and drop the entry",
    )


@rule(
    "P13",
    ("training_args.<field>", "deepspeed_config.gradient_clipping", "deepspeed_config.optimizer.params.*", "..."),
    "deepspeed_config values the HF integration fills from TrainingArguments must equal them",
    "transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_process (fill_match)",
)
def _deepspeed_training_args(spec: PointSpec, _: Target):
    return _refuse(
        spec,
        _contradictions(spec, None),
        'set the TrainingArguments field (+training_args.<field>=...) and leave the DeepSpeed entry "auto"',
    )


@rule(
    "P14",
    ("deepspeed_config.wandb", "deepspeed_config.tensorboard", "deepspeed_config.flops_profiler", "..."),
    "DeepSpeed monitors, profilers and per-step breakdowns may not run in the timed window",
    "docs/measurement.md (nothing runs in the timed window); DeepSpeed config JSON docs (Monitoring, Logging)",
)
def _deepspeed_monitors(spec: PointSpec, _: Target):
    if not spec.deepspeed:
        return None
    bad = []
    for block in DEEPSPEED_MONITOR_BLOCKS:
        cfg = spec.deepspeed_config.get(block)
        if isinstance(cfg, dict) and truth(cfg.get("enabled", False)) is not False:
            bad.append(f"{block}.enabled")
        elif cfg is not None and not isinstance(cfg, dict):
            bad.append(block)
    bad += [f for f in DEEPSPEED_MONITOR_FLAGS if f in spec.deepspeed_config and truth(spec.deepspeed_config[f])]
    if not bad:
        return None
    keys = tuple(f"deepspeed_config.{b}" for b in bad)
    return (
        f"{', '.join(keys)}: sweeper owns tracking, profiling and logging (nothing may run inside the timed window; "
        "sweeper's own profiler window and the records hold the numbers); remove it",
        keys,
    )


@rule(
    "P15",
    ("deepspeed_config.<key>", "deepspeed_config.zero_optimization.<key>"),
    "every deepspeed_config key (top level and zero_optimization) is one DeepSpeed reads (unknown keys are refused)",
    "DeepSpeed config JSON docs; deepspeed/runtime/zero/config.py (DEEPSPEED_*_KEYS in known_keys.py)",
)
def _deepspeed_unknown(spec: PointSpec, _: Target):
    if not spec.deepspeed:
        return None
    bad = [k for k in sorted(spec.deepspeed_config) if k not in DEEPSPEED_TOP_KEYS]
    zero = spec.deepspeed_config.get("zero_optimization")
    if isinstance(zero, dict):
        bad += [f"zero_optimization.{k}" for k in sorted(zero) if k not in DEEPSPEED_ZERO_KEYS]
    if not bad:
        return None
    keys = tuple(f"deepspeed_config.{b}" for b in bad)
    return (
        f"{', '.join(keys)}: not a key DeepSpeed reads (an unknown top-level key is silently ignored, an unknown "
        "zero_optimization key stops the run at setup); check the spelling against "
        "https://www.deepspeed.ai/docs/config-json/",
        keys,
    )
