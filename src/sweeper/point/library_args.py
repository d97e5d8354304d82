"""The passthrough dicts (``training_args``, ``fsdp_config``, ``deepspeed_config``): what sweeper sets in them.

Sweeper builds ``TrainingArguments``, its ``fsdp_config`` and the DeepSpeed config from its own keys
(:mod:`sweeper.job.trainer_setup`, inside the ranks); the passthrough dicts are merged on top. This module states,
without importing torch or transformers, what sweeper sets for a spec (``sweeper_*``: mirrors of trainer_setup,
kept equal by ``tests/unit/test_gate_passthrough.py``), so that a passthrough entry can be told apart as

- **redundant**: it restates what sweeper sets (or the library default sweeper leaves in place): dropped from the
  point's identity (:func:`redundant_passthrough`), so it never makes a second point;
- **contradicting** a labelled key: refused by the gate (:mod:`sweeper.point.rules`);
- anything else: a real setting, passed through.

Values compare the way the libraries read them (:func:`same`, :func:`truth`, :func:`fsdp_value`).
"""

from __future__ import annotations

from typing import Any

from sweeper.config.spec import PointSpec, dotted_leaves

#: Learning rate and schedule sweeper trains with (the step time does not depend on them).
LEARNING_RATE = 1e-4


class _Invalid:
    """A value the library could not read (e.g. ``reshard_after_forward="maybe"``)."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Any = _Invalid()


# ------------------------------------------------------------------------------------------------ comparing values


def same(a: Any, b: Any) -> bool:
    """Equal as configuration values: a bool equals only a bool (``True != 1``), numbers compare by value
    (``1 == 1.0``), lists and tuples item by item, dicts key by key."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if a is None or b is None:
        return a is b
    return type(a) is type(b) and a == b


def truth(value: Any) -> bool | Any:
    """``value`` read as transformers' ``str_to_bool(str(value).lower())`` reads it: True for y/yes/t/true/on/1,
    False for n/no/f/false/off/0, else :data:`INVALID`."""
    text = str(value).lower()
    if text in ("y", "yes", "t", "true", "on", "1"):
        return True
    if text in ("n", "no", "f", "false", "off", "0"):
        return False
    return INVALID


def is_no_tracker(value: Any) -> bool:
    """``report_to`` values that mean "no tracker": None, ``"none"``, ``[]``, ``["none"]``."""
    return value is None or value == "none" or (isinstance(value, (list, tuple)) and list(value) in ([], ["none"]))


# ------------------------------------------------------------------------------------------------ training_args


def sweeper_training_args(spec: PointSpec) -> dict[str, Any]:
    """The ``TrainingArguments`` fields sweeper sets for ``spec`` (before the passthrough is merged), as
    :func:`sweeper.job.trainer_setup.training_arguments` sets them; ``output_dir`` and ``use_cpu`` (decided in the
    rank), ``fsdp``, ``fsdp_config`` and ``deepspeed`` (see the two functions below) are left out."""
    kw: dict[str, Any] = dict(
        max_steps=spec.total_steps,
        per_device_train_batch_size=spec.per_device_batch_size,
        per_device_eval_batch_size=spec.per_device_batch_size,
        gradient_accumulation_steps=spec.grad_accum,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        seed=spec.seed,
        data_seed=spec.seed,
        bf16=spec.precision == "bf16",
        fp16=spec.precision == "fp16",
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="steps",
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        ddp_timeout=int(min(spec.timeout_s, 1800)),
    )
    if spec.eval:
        kw["eval_accumulation_steps"] = 1
    if spec.fsdp == "none":
        kw["activation_checkpointing"] = spec.gc
        if spec.gc:
            kw["activation_checkpointing_kwargs"] = {"use_reentrant": spec.use_reentrant}
    return kw


def training_arg_restates(spec: PointSpec, field: str, value: Any, defaults: dict[str, Any] | None) -> bool:
    """True when ``training_args.<field>=value`` changes nothing: it equals what sweeper sets, or, for a field
    sweeper leaves alone, the installed ``TrainingArguments`` default (``defaults``: field -> default; None when
    the defaults are unknown, then only sweeper's own values count)."""
    ours = sweeper_training_args(spec)
    if field in ours:
        expected = ours[field]
    elif defaults is not None and field in defaults:
        expected = defaults[field]
    else:
        return False
    if field == "report_to":
        return is_no_tracker(value) and is_no_tracker(expected)
    return same(value, expected)


# ------------------------------------------------------------------------------------------------ fsdp_config


def fsdp_key(key: str) -> str:
    """An ``fsdp_config`` key as transformers reads it: the ``fsdp_`` prefix stripped (``fsdp_version`` is
    ``version``)."""
    return key[5:] if key.startswith("fsdp_") else key


def fsdp_version(spec: PointSpec) -> int:
    """The FSDP version sweeper runs: 1 for ``hybrid_shard`` (transformers runs it only with FSDP1), else 2."""
    return 1 if spec.fsdp == "hybrid_shard" else 2


def sweeper_fsdp_config(spec: PointSpec) -> dict[str, Any]:
    """The strategy-deciding ``fsdp_config`` entries as they end up for ``spec``'s label, canonical
    (:func:`fsdp_value`): what sweeper sets (``version``, ``transformer_layer_cls_to_wrap``,
    ``activation_checkpointing``) and what transformers derives from ``fsdp`` (``reshard_after_forward``: FSDP2
    True for full_shard, False for shard_grad_op; FSDP1 the strategy name), plus ``sharding_strategy`` (accelerate's
    FSDP1 name of the label). Empty for ``fsdp=none``."""
    if spec.fsdp == "none":
        return {}
    version = fsdp_version(spec)
    reshard: Any = spec.fsdp if version == 1 else spec.fsdp == "full_shard"
    return {
        "version": version,
        "transformer_layer_cls_to_wrap": [spec.decoder_layer],
        "activation_checkpointing": spec.gc,
        "reshard_after_forward": reshard,
        "sharding_strategy": spec.fsdp.upper(),
    }


def fsdp_value(key: str, value: Any, version: int) -> Any:
    """An ``fsdp_config`` value as transformers / accelerate read it (key without the ``fsdp_`` prefix), or
    :data:`INVALID`: booleans through ``str_to_bool``, ``version`` as an int, ``transformer_layer_cls_to_wrap`` as
    a list, ``reshard_after_forward`` a bool under FSDP2 and a lower-case strategy name under FSDP1,
    ``sharding_strategy`` an upper-case name (accelerate also takes its 1-based number)."""
    from sweeper.point.rules.known_keys import FSDP_CONFIG_DEFAULTS, FSDP_SHARDING_STRATEGIES

    if key == "version":
        try:
            return int(value)
        except (TypeError, ValueError):
            return INVALID
    if key == "transformer_layer_cls_to_wrap":
        return [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else INVALID
    if key == "reshard_after_forward":
        return truth(value) if version == 2 else str(value).lower()
    if key == "sharding_strategy":
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= len(FSDP_SHARDING_STRATEGIES):
            return FSDP_SHARDING_STRATEGIES[value - 1]
        return str(value).upper() if str(value).upper() in FSDP_SHARDING_STRATEGIES else INVALID
    if isinstance(FSDP_CONFIG_DEFAULTS.get(key), bool):
        return truth(value)
    return value


def fsdp_restates(spec: PointSpec, key: str, value: Any) -> bool:
    """True when ``fsdp_config.<key>=value`` only restates the label or the transformers default."""
    from sweeper.point.rules.known_keys import FSDP_CONFIG_DEFAULTS

    name = fsdp_key(key)
    version = fsdp_version(spec)
    ours = sweeper_fsdp_config(spec)
    expected = ours.get(name, FSDP_CONFIG_DEFAULTS.get(name))
    if name not in ours and (name not in FSDP_CONFIG_DEFAULTS or expected is None):
        return False
    got = fsdp_value(name, value, version)
    return got is not INVALID and same(got, fsdp_value(name, expected, version))


# ------------------------------------------------------------------------------------------------ deepspeed_config


def sweeper_deepspeed_config(spec: PointSpec) -> dict[str, Any]:
    """The DeepSpeed config sweeper generates for ``spec`` before ``deepspeed_config`` is merged, as
    :func:`sweeper.job.trainer_setup.deepspeed_config` generates it (``"auto"`` sizes, filled by the HF
    integration), with ``tensor_parallel.autotp_size`` for ``tp > 1`` (DeepSpeed AutoTP). Empty when DeepSpeed is
    off (:attr:`~sweeper.config.spec.PointSpec.deepspeed`)."""
    if not spec.deepspeed:
        return {}
    zero: dict[str, Any] = {"stage": spec.zero, "reduce_bucket_size": "auto"}
    if spec.zero == 3:
        zero.update(
            stage3_prefetch_bucket_size="auto",
            stage3_param_persistence_threshold="auto",
            stage3_gather_16bit_weights_on_model_save=False,
        )
    tensor_parallel = {"tensor_parallel": {"autotp_size": spec.tp}} if spec.tp > 1 else {}
    return {
        "zero_optimization": zero,
        **tensor_parallel,
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
    }


def hf_matched_deepspeed(spec: PointSpec, effective: dict[str, Any]) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """The DeepSpeed values the HF integration fills from (and requires to equal) ``TrainingArguments``, for
    ``spec``: dotted DeepSpeed key -> (value, the sweeper / ``training_args`` keys that decide it).

    Source: ``transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_process`` (its
    ``fill_match`` calls: a value that is not ``"auto"`` and differs stops the run at setup with "Please correct
    the following DeepSpeed config values that mismatch TrainingArguments values").

    Args:
        effective: the ``TrainingArguments`` values the rank will use (sweeper's, the passthrough's, else the
            defaults), for ``max_grad_norm``, ``learning_rate``, ``adam_beta1``/``adam_beta2``, ``adam_epsilon``,
            ``weight_decay``; a field missing from it is not matched.
    """
    out: dict[str, tuple[Any, tuple[str, ...]]] = {
        "zero_optimization.stage": (spec.zero, ("zero",)),
        "tensor_parallel.autotp_size": (spec.tp, ("tp",)),
        "sequence_parallel_size": (spec.sp, ("sp",)),
        "train_micro_batch_size_per_gpu": (spec.per_device_batch_size, ("per_device_batch_size",)),
        "gradient_accumulation_steps": (spec.grad_accum, ("grad_accum",)),
        "train_batch_size": (
            spec.per_device_batch_size * spec.grad_accum * spec.world_size,
            ("per_device_batch_size", "grad_accum", "ranks_per_node", "nodes"),
        ),
        "bf16.enabled": (spec.precision == "bf16", ("precision",)),
        "fp16.enabled": (spec.precision == "fp16", ("precision",)),
    }
    from_ta = {
        "gradient_clipping": ("max_grad_norm",),
        "optimizer.params.lr": ("learning_rate",),
        "scheduler.params.warmup_max_lr": ("learning_rate",),
        "optimizer.params.betas": ("adam_beta1", "adam_beta2"),
        "optimizer.params.eps": ("adam_epsilon",),
        "optimizer.params.weight_decay": ("weight_decay",),
    }
    for ds_key, fields in from_ta.items():
        if all(f in effective for f in fields):
            values = [effective[f] for f in fields]
            out[ds_key] = (values if len(values) > 1 else values[0], tuple(f"training_args.{f}" for f in fields))
    return out


def effective_training_args(spec: PointSpec, defaults: dict[str, Any] | None) -> dict[str, Any]:
    """The ``TrainingArguments`` values a rank of ``spec`` uses: ``defaults`` (field -> default, may be None),
    overridden by sweeper's values, overridden by ``spec.training_args``."""
    return {**(defaults or {}), **sweeper_training_args(spec), **spec.training_args}


def deepspeed_restates(spec: PointSpec, path: str, value: Any, effective: dict[str, Any]) -> bool:
    """True when ``deepspeed_config.<path>=value`` changes nothing: it equals the generated entry, or the value
    the HF integration would fill into an ``"auto"`` entry."""
    generated = dotted_leaves(sweeper_deepspeed_config(spec))
    if path in generated and same(value, generated[path]):
        return True
    matched = hf_matched_deepspeed(spec, effective)
    return path in matched and generated.get(path, "auto") == "auto" and same(value, matched[path][0])


# ------------------------------------------------------------------------------------------------ identity


def redundant_passthrough(spec: PointSpec) -> dict[str, set[str]]:
    """Passthrough entries that only restate what sweeper sets from its own keys (or the library default sweeper
    leaves in place), by section; :mod:`sweeper.point.identity` drops them before hashing.

    ``training_args`` defaults come from the installed ``TrainingArguments``
    (:func:`sweeper.point.rules.ta_schema.training_args_schema`, a cached helper subprocess); when they cannot be
    read, only sweeper's own values count as restated.

    Returns:
        ``{"deepspeed_config": {"zero_optimization.stage", ...}, "fsdp_config": {...}, "training_args": {...}}``
        (dotted paths inside each dict); empty sets when nothing is redundant.
    """
    out: dict[str, set[str]] = {"deepspeed_config": set(), "fsdp_config": set(), "training_args": set()}
    defaults = None
    if spec.training_args or spec.deepspeed_config:
        from sweeper.point.rules.ta_schema import training_args_schema

        schema = training_args_schema()
        defaults = schema.defaults() if schema is not None else None
    for field, value in spec.training_args.items():
        if training_arg_restates(spec, field, value, defaults):
            out["training_args"].add(field)
    if spec.fsdp != "none":
        out["fsdp_config"] = {k for k, v in spec.fsdp_config.items() if fsdp_restates(spec, k, v)}
    if spec.deepspeed:
        effective = effective_training_args(spec, defaults)
        out["deepspeed_config"] = {
            p for p, v in dotted_leaves(spec.deepspeed_config).items() if deepspeed_restates(spec, p, v, effective)
        }
    return out
