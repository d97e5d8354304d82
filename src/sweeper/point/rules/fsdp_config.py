"""Rules on ``fsdp_config``: given without FSDP, entries that contradict the label, unknown keys.

The strategy is the label: ``fsdp=full_shard`` / ``shard_grad_op`` run FSDP2, where ``reshard_after_forward`` is
exactly what separates them (True: full_shard, False: shard_grad_op; docs/cases.md#t01, pytorch/pytorch#149029);
``hybrid_shard`` runs FSDP1. An entry that restates the label passes and is dropped from the identity; one that
contradicts it is refused, so a label never differs from what ran.
"""

from __future__ import annotations

from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.point.library_args import INVALID, fsdp_key, fsdp_restates, fsdp_value, fsdp_version, sweeper_fsdp_config
from sweeper.point.rules.known_keys import FSDP1_ONLY_KEYS, FSDP_CONFIG_DEFAULTS
from sweeper.point.rules.passthrough import show_value

#: fsdp_config keys that decide the strategy or how it runs (after the ``fsdp_`` prefix is stripped).
STRATEGY_KEYS = ("reshard_after_forward", "sharding_strategy", "version", "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt")
#: fsdp_config keys another sweeper key owns: key -> (owner keys, what the owner sets it from).
OWNED_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "activation_checkpointing": (("gc",), "gc (FSDP-native activation checkpointing under FSDP)"),
    "transformer_layer_cls_to_wrap": (("model",), "the model's decoder_layer (the FSDP auto-wrap unit)"),
}


@rule(
    "P05",
    ("fsdp", "fsdp_config.*"),
    "fsdp_config is refused with fsdp=none (it would be silently ignored)",
    "transformers reads fsdp_config only when fsdp is set",
)
def _fsdp_config_without_fsdp(spec: PointSpec, _: Target):
    if spec.fsdp != "none" or not spec.fsdp_config:
        return None
    keys = tuple(f"fsdp_config.{k}" for k in sorted(spec.fsdp_config))
    return (
        f"{', '.join(keys)} with fsdp=none: fsdp_config is read only under FSDP, so it would be silently ignored; "
        "remove it, or choose an FSDP strategy (fsdp=full_shard|shard_grad_op|hybrid_shard)",
        ("fsdp", *keys),
    )


def _strategy_fix(spec: PointSpec, name: str, value: Any) -> str:
    """What to use instead of a strategy entry that contradicts the label."""
    version = fsdp_version(spec)
    got = fsdp_value(name, value, version)
    if name == "reshard_after_forward" and version == 2:
        if got is INVALID:
            return "under FSDP2 it is a bool (true: full_shard, false: shard_grad_op); drop it, fsdp decides it"
        other = "full_shard" if got else "shard_grad_op"
        return f"reshard_after_forward={str(got).lower()} is what fsdp={other} means; use fsdp={other}"
    if name in ("reshard_after_forward", "sharding_strategy"):
        label = str(got).lower() if got is not INVALID else ""
        if label in ("full_shard", "shard_grad_op", "hybrid_shard"):
            return f"the strategy is the label: use fsdp={label} and drop the entry"
        if label == "no_shard":
            return "NO_SHARD is plain data parallelism: use fsdp=none (DDP) and drop the entry"
        return "the strategy is the label (fsdp=full_shard|shard_grad_op|hybrid_shard): drop the entry"
    if name == "version":
        return (
            f"sweeper chooses the FSDP version: FSDP{version} for fsdp={spec.fsdp} (hybrid_shard runs FSDP1, the "
            "others FSDP2); drop the entry"
        )
    return "sweeper runs FSDP through accelerate on CUDA or CPU, not through torch_xla; drop the entry"


@rule(
    "P06",
    ("fsdp", "fsdp_config.reshard_after_forward", "fsdp_config.sharding_strategy", "fsdp_config.version", "..."),
    "fsdp_config entries that decide the strategy (reshard_after_forward, sharding_strategy, version, xla) "
    "must agree with fsdp",
    "docs/cases.md#t01; pytorch/pytorch#149029; transformers TrainingArguments._process_fsdp_args",
)
def _fsdp_strategy(spec: PointSpec, _: Target):
    if spec.fsdp == "none":
        return None
    bad = [k for k, v in spec.fsdp_config.items() if fsdp_key(k) in STRATEGY_KEYS and not fsdp_restates(spec, k, v)]
    if not bad:
        return None
    parts = [
        f"fsdp_config.{k}={show_value(spec.fsdp_config[k])} contradicts fsdp={spec.fsdp}: "
        f"{_strategy_fix(spec, fsdp_key(k), spec.fsdp_config[k])}"
        for k in sorted(bad)
    ]
    return "; ".join(parts), ("fsdp", *(f"fsdp_config.{k}" for k in sorted(bad)))


@rule(
    "P07",
    ("gc", "model", "fsdp_config.activation_checkpointing", "fsdp_config.transformer_layer_cls_to_wrap"),
    "fsdp_config may not change what gc (activation_checkpointing) or the model (transformer_layer_cls_to_wrap) sets",
    "sweeper.job.trainer_setup (fsdp_config from gc and the model's decoder_layer); docs/cases.md#p02",
)
def _fsdp_owned(spec: PointSpec, _: Target):
    if spec.fsdp == "none":
        return None
    bad = sorted(k for k, v in spec.fsdp_config.items() if fsdp_key(k) in OWNED_KEYS and not fsdp_restates(spec, k, v))
    if not bad:
        return None
    ours = sweeper_fsdp_config(spec)
    parts = []
    for k in bad:
        owners, what = OWNED_KEYS[fsdp_key(k)]
        parts.append(
            f"fsdp_config.{k}={show_value(spec.fsdp_config[k])} differs from what sweeper sets from {what} "
            f"({show_value(ours[fsdp_key(k)])}); set {', '.join(owners)} instead"
            + (" (gc=true|false)" if owners == ("gc",) else " (model=<architecture>)")
        )
    keys = [f"fsdp_config.{k}" for k in bad] + [o for k in bad for o in OWNED_KEYS[fsdp_key(k)][0]]
    return "; ".join(parts), tuple(dict.fromkeys(keys))


@rule(
    "P08",
    ("fsdp_config.<key>",),
    "every fsdp_config key is one transformers reads for this FSDP version (unknown keys are refused, not ignored)",
    "transformers TrainingArguments._process_fsdp_args / fsdp_config docs (FSDP_CONFIG_DEFAULTS in known_keys.py)",
)
def _fsdp_unknown(spec: PointSpec, _: Target):
    if spec.fsdp == "none":
        return None
    version = fsdp_version(spec)
    unknown, v1_only = [], []
    for k, v in sorted(spec.fsdp_config.items()):
        name = fsdp_key(k)
        if name in STRATEGY_KEYS or name in OWNED_KEYS or fsdp_restates(spec, k, v):
            continue
        if name not in FSDP_CONFIG_DEFAULTS:
            unknown.append(k)
        elif version == 2 and name in FSDP1_ONLY_KEYS:
            v1_only.append(k)
    if not unknown and not v1_only:
        return None
    parts = []
    if unknown:
        parts.append(
            f"{', '.join(f'fsdp_config.{k}' for k in unknown)}: not a key transformers reads from fsdp_config "
            f"(it would be silently ignored); known keys: {', '.join(sorted(FSDP_CONFIG_DEFAULTS))}"
        )
    if v1_only:
        parts.append(
            f"{', '.join(f'fsdp_config.{k}' for k in v1_only)}: read only by FSDP1, but fsdp={spec.fsdp} runs FSDP2 "
            "(it would be silently ignored); remove it"
        )
    keys = [f"fsdp_config.{k}" for k in unknown + v1_only]
    if v1_only:
        keys.insert(0, "fsdp")
    return "; ".join(parts), tuple(keys)
