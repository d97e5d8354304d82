"""What the libraries resolve a point's entries to, and which entries change nothing (the pre-flight's
``restating`` answer) or are parsed but never consumed on the Trainer's path (rule F03).

Two points whose resolved library objects are equal are one point (docs/architecture.md, "Identity"). The static
rules of :mod:`sweeper.point.library_args` drop the entries that restate what sweeper sets or a default it reads from
the installed ``TrainingArguments``; what only the libraries know is asked of them here, by building the point's
objects with and without each entry:

- ``training_args.<field>``: ``TrainingArguments.to_dict()`` after its ``__post_init__`` (normalised enums and
  derived fields), the DeepSpeed and FSDP parts compared below;
- ``deepspeed_config.<path>``: DeepSpeed's own parse (``DeepSpeedConfig``) of the config as the HF integration
  finalises it against the point's model (``"auto"`` resolved: ``reduce_bucket_size`` is hidden² for the model,
  so ``+deepspeed_config.zero_optimization.reduce_bucket_size=4096`` on a hidden-64 model is the default point);
- ``model.config.<key>`` added on the command line (absent from ``conf/model/<model>.yaml``):
  ``AutoConfig.for_model(...).to_dict()`` (``+model.config.rope_theta=10000.0`` restates Llama's default).

An entry whose removal leaves every object equal restates: the driver drops it from the point's identity
(:func:`sweeper.point.identity.point_id`). FSDP entries are not asked here: the pre-flight's F02 check already
refuses an ``fsdp_config`` entry that leaves accelerate's plugin arguments as they are (unless it restates the label).

**Parsed but never consumed** (:data:`DEEPSPEED_UNCONSUMED`): DeepSpeed parses these blocks, so the comparison above
sees them change its config, but nothing the Trainer runs reads them; each row names the source that shows it and is
tested against the installed DeepSpeed and accelerate (``tests/unit/test_preflight_unconsumed.py``). An entry under a
row that changes DeepSpeed's parse is refused (:func:`check_deepspeed_unconsumed`); one that restates DeepSpeed's
default is accepted and dropped from the identity like any other restatement.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any

#: DeepSpeed config blocks parsed by ``deepspeed.runtime.config.DeepSpeedConfig`` that the HF Trainer's path never
#: consumes, by dotted prefix: ``(why, source)``.
DEEPSPEED_UNCONSUMED: dict[str, tuple[str, str]] = {
    "dataloader_drop_last": (
        "DeepSpeed reads it only for the DataLoader it builds itself from deepspeed.initialize(training_data=...); "
        "the Trainer builds its own DataLoader and accelerate passes no training_data",
        "deepspeed/runtime/engine.py DeepSpeedEngine.deepspeed_io; accelerate/accelerator.py "
        "Accelerator._prepare_deepspeed",
    ),
    "data_efficiency.data_sampling": (
        "DeepSpeed's data sampling and curriculum learning act only through its own DataLoader "
        "(deepspeed.initialize(training_data=...)), which the Trainer's path never builds",
        "deepspeed/runtime/engine.py: deepspeed_io, and every other read behind 'self.training_dataloader is not None'",
    ),
    "pipeline": (
        "DeepSpeed reads it only in its PipelineEngine, which deepspeed.initialize builds only for a PipelineModule; "
        "a Hugging Face model never is one",
        "deepspeed/__init__.py initialize (isinstance(model, PipelineModule)); deepspeed/runtime/pipe/engine.py",
    ),
}


def plain(value: Any) -> Any:
    """``value`` as comparable plain data: pydantic models dumped, enums by value, objects by their attributes
    (private ones left out), containers item by item; anything else as it is."""
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return plain(value.model_dump())
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__dict__") and not callable(value):
        return {type(value).__name__: {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}}
    return repr(value) if not callable(value) else getattr(value, "__qualname__", repr(value))


def deepspeed_parse(spec: Any, args: Any, model: Any) -> dict[str, Any]:
    """DeepSpeed's own parse of the point's config (``vars(DeepSpeedConfig(...))`` as :func:`plain` data, without
    its copy of the raw dict), after the HF integration finalised it against ``model``; ``args`` are the point's
    ``TrainingArguments``."""
    from deepspeed.runtime.config import DeepSpeedConfig

    hf = args.hf_deepspeed_config
    hf.trainer_config_finalize(args, model, spec.total_steps)
    parsed = DeepSpeedConfig(copy.deepcopy(hf.config))
    return {k: plain(v) for k, v in vars(parsed).items() if not k.startswith("_")}


def _training_view(spec: Any, use_cpu: bool, model: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(TrainingArguments.to_dict() without its raw DeepSpeed and FSDP dicts, DeepSpeed's parse or None)``."""
    from sweeper.job.preflight_checks import OUT_DIR, no_deepspeed_global
    from sweeper.job.trainer_setup import training_arguments

    with no_deepspeed_global():
        args = training_arguments(spec, OUT_DIR, use_cpu)
        ta = {k: plain(v) for k, v in args.to_dict().items() if k not in ("deepspeed", "fsdp_config")}
        ta["fsdp_plugin_args"] = plain(args.fsdp_plugin_args) if spec.fsdp != "none" else None
        ds = deepspeed_parse(spec, args, model) if spec.zero else None
    return ta, ds


def _model_view(spec: Any) -> dict[str, Any]:
    """The model config transformers builds for the point (``AutoConfig.for_model``), without version stamps."""
    from transformers import AutoConfig

    from sweeper.redact import reveal

    cfg = AutoConfig.for_model(spec.model_type, **reveal(dict(spec.model_config))).to_dict()
    return {k: plain(v) for k, v in cfg.items() if k not in ("transformers_version", "_name_or_path")}


def added_model_keys(spec: Any) -> list[str]:
    """``model.config`` keys the point has that ``conf/model/<model>.yaml`` does not (added with ``+``)."""
    from omegaconf import OmegaConf

    from sweeper.paths import conf_dir

    path = conf_dir() / "model" / f"{spec.model}.yaml"
    base = OmegaConf.to_container(OmegaConf.load(path)).get("config", {}) if path.exists() else {}
    assert isinstance(base, dict)
    return sorted(k for k in spec.model_config if k not in base)


def restating(spec: Any, use_cpu: bool, model: Any) -> list[str]:
    """The dotted keys (``training_args.…``, ``deepspeed_config.…``, ``model.config.…``) of ``spec`` whose removal
    leaves every resolved object equal (module doc), in the order of the spec; ``use_cpu`` as the point's
    ``TrainingArguments`` were built. Call only for a point the pre-flight accepted (a refused point raises here as
    it did there)."""
    from sweeper.job.preflight_checks import passthrough_leaves, without_entry

    out: list[str] = []
    leaves = [(s, p) for s, p, _ in passthrough_leaves(spec) if s in ("training_args", "deepspeed_config")]
    if leaves:
        full = _training_view(spec, use_cpu, model)
        for section, path in leaves:
            if _training_view(without_entry(spec, section, path), use_cpu, model) == full:
                out.append(f"{section}.{path}")
    added = added_model_keys(spec)
    if added:
        full_model = _model_view(spec)
        for key in added:
            cfg = {k: v for k, v in spec.model_config.items() if k != key}
            if _model_view(dataclasses.replace(spec, model_config=cfg)) == full_model:
                out.append(f"model.config.{key}")
    return out


def unconsumed_row(path: str) -> str | None:
    """The :data:`DEEPSPEED_UNCONSUMED` prefix a ``deepspeed_config`` leaf ``path`` falls under, or None."""
    for prefix in DEEPSPEED_UNCONSUMED:
        if path == prefix or path.startswith(f"{prefix}."):
            return prefix
    return None


def check_deepspeed_unconsumed(spec: Any, args: Any, model: Any) -> None:
    """Refuse (:class:`~sweeper.job.preflight_checks.Refused`, check ``ds_unconsumed``) a ``deepspeed_config`` entry
    under a :data:`DEEPSPEED_UNCONSUMED` row that changes DeepSpeed's parse; one that restates its default passes."""
    from sweeper.config.spec import dotted_leaves
    from sweeper.job.preflight_checks import OUT_DIR, Refused, no_deepspeed_global, without_entry
    from sweeper.job.trainer_setup import training_arguments

    rows = [(p, unconsumed_row(p), v) for p, v in dotted_leaves(dict(spec.deepspeed_config)).items()]
    rows = [(p, r, v) for p, r, v in rows if r is not None]
    if not rows:
        return
    full = deepspeed_parse(spec, args, model)
    bad = []
    for path, row, value in rows:
        without = without_entry(spec, "deepspeed_config", path)
        with no_deepspeed_global():
            other = deepspeed_parse(without, training_arguments(without, OUT_DIR, args.use_cpu), model)
        if other != full:
            bad.append((path, row, value))
    if not bad:
        return
    parts = [
        f"deepspeed_config.{p}={v!r}: {DEEPSPEED_UNCONSUMED[r][0]} (source: {DEEPSPEED_UNCONSUMED[r][1]})"
        for p, r, v in bad
    ]
    raise Refused(
        tuple(f"deepspeed_config.{p}" for p, _, _ in bad),
        "; ".join(parts) + ": it would change nothing that runs, only the point's label; remove it",
        "ds_unconsumed",
    )
