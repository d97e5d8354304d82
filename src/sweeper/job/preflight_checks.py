"""The pre-flight's checks (:mod:`sweeper.job.preflight`), one per library object, each raising :class:`Refused`
with the sweeper keys it is about (see that module's doc for the order and the attribution of a refusal to a key).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

#: fsdp_config switches (and the values tried) under which an entry without effect might be read.
SWITCHES: dict[str, list[Any]] = {
    "auto_wrap_policy": ["SIZE_BASED_WRAP", "TRANSFORMER_BASED_WRAP", "NO_WRAP"],
    "version": [1, 2],
    "cpu_offload": [True],
    "activation_checkpointing": [True],
}


#: ``output_dir`` of the TrainingArguments built here (never written: nothing trains or saves).
OUT_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "sweeper-preflight")


class Refused(Exception):
    """A library refused the point: ``keys`` (sweeper's names), ``message``, ``check`` (which step)."""

    def __init__(self, keys: tuple[str, ...], message: str, check: str) -> None:
        super().__init__(message)
        self.keys, self.message, self.check = keys, message, check


#: The spec sections a refusal's keys name, by their dotted prefix (as on the command line).
_SECTIONS = {
    "model.config": "model_config",
    "training_args": "training_args",
    "fsdp_config": "fsdp_config",
    "deepspeed_config": "deepspeed_config",
}


def _label(spec: Any, keys: tuple[str, ...]) -> str:
    """``model.config.num_key_value_heads=3``: each key with the point's value (a key without one as it is)."""
    from sweeper.config.spec import dotted_leaves

    values = {
        f"{prefix}.{path}": value
        for prefix, section in _SECTIONS.items()
        for path, value in dotted_leaves(dict(getattr(spec, section))).items()
    }
    return ", ".join(f"{k}={values[k]!r}" if k in values else k for k in keys)


def error_text(e: BaseException) -> str:
    """An exception as one line: ``ValueError: message`` (whitespace collapsed, at most 600 characters)."""
    return " ".join(f"{type(e).__name__}: {e}".split())[:600]


def check_seed(spec: Any) -> None:
    """``seed`` as transformers' ``set_seed`` takes it (the Trainer calls it).

    Raises:
        Refused: naming ``seed``.
    """
    from transformers import set_seed

    try:
        set_seed(spec.seed)
    except (ValueError, TypeError, OverflowError) as e:
        raise Refused(
            ("seed",), f"seed={spec.seed}: transformers' set_seed refuses it ({error_text(e)})", "seed"
        ) from e


def check_callbacks(spec: Any) -> None:
    """Each ``callbacks[i]``: its ``_target_`` imported (a missing module and a missing class told apart), callable,
    its arguments bound to its signature. A ``TrainerCallback`` subclass is not required: transformers' callback
    handler calls the hooks by name (duck typing).

    Raises:
        Refused: naming ``callbacks[i]``.
    """
    import importlib

    for i, cb in enumerate(spec.callbacks):
        key = f"callbacks[{i}]"
        target = cb.get("_target_") if isinstance(cb, dict) else None
        if not isinstance(target, str) or "." not in target:
            raise Refused((key,), f"{key}: needs _target_: <module>.<Class>, got {target!r}", "callbacks")
        module_name, _, name = target.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise Refused(
                (key,),
                f"{key}: _target_={target}: no module named {e.name!r} where sweeper runs (install it, or fix the "
                "module path)",
                "callbacks",
            ) from e
        except Exception as e:
            raise Refused((key,), f"{key}: importing {module_name} fails: {error_text(e)}", "callbacks") from e
        cls = getattr(module, name, None)
        if cls is None:
            raise Refused(
                (key,),
                f"{key}: _target_={target}: module {module_name} exists but has no {name!r} (a missing class or a "
                "misspelt name, not a missing package)",
                "callbacks",
            )
        if not callable(cls):
            raise Refused((key,), f"{key}: _target_={target} is not a class or a callable", "callbacks")
        kwargs = {k: v for k, v in cb.items() if not k.startswith("_")}
        try:
            inspect.signature(cls).bind(**kwargs)
        except TypeError as e:
            raise Refused((key,), f"{key}: {target}({', '.join(kwargs)}): {e}", "callbacks") from e


def _model_overrides(spec: Any) -> dict[str, Any]:
    """The ``model.config`` values that differ from ``conf/model/<model>.yaml`` (what the command line changed)."""
    from omegaconf import OmegaConf

    from sweeper.paths import conf_dir

    path = conf_dir() / "model" / f"{spec.model}.yaml"
    base = OmegaConf.to_container(OmegaConf.load(path)).get("config", {}) if path.exists() else {}
    assert isinstance(base, dict)
    return {k: v for k, v in spec.model_config.items() if k not in base or base[k] != v}


def _meta_model(spec: Any) -> Any:
    import torch

    from sweeper.job.trainer_setup import build_model

    with torch.device("meta"):
        model = build_model(spec)
        ids = torch.zeros((1, max(2, min(spec.seq_len, 8))), dtype=torch.long)
        # an explicit mask: without one (and without a cache) transformers looks for packed sequences with a
        # data-dependent .item(), which a meta tensor cannot answer
        n = ids.shape[1]
        model(input_ids=ids, attention_mask=torch.zeros((1, 1, n, n)))
    return model


_MODELS: dict[str, Any] = {}


def meta_model_of(spec: Any) -> Any:
    """The point's model on the meta device, after one meta forward; cached per architecture."""
    key = json.dumps([spec.model_type, spec.model_config, spec.model_dtype], sort_keys=True, default=str)
    if key not in _MODELS:
        try:
            _MODELS[key] = _meta_model(spec)
        except Exception as e:  # noqa: BLE001 - any library refusal becomes the point's refusal
            changed = _model_overrides(spec)
            keys = tuple(f"model.config.{k}" for k in _culprits(changed, spec, e)) or ("model.config",)
            why = f"{_label(spec, keys)}: transformers cannot build the model: {error_text(e)}"
            _MODELS[key] = Refused(keys, why, "model")
    found = _MODELS[key]
    if isinstance(found, Refused):
        raise found
    return found


def _culprits(changed: dict[str, Any], spec: Any, e: BaseException) -> list[str]:
    """The changed ``model.config`` keys the message names, else the one whose default makes the model build."""
    named = [k for k in changed if k in str(e)]
    if named:
        return named
    from omegaconf import OmegaConf

    from sweeper.paths import conf_dir

    base = OmegaConf.to_container(OmegaConf.load(conf_dir() / "model" / f"{spec.model}.yaml")).get("config", {})
    assert isinstance(base, dict)
    for k in changed:
        cfg = dict(spec.model_config)
        if k in base:
            cfg[k] = base[k]
        else:
            cfg.pop(k)
        trial = dataclasses.replace(spec, model_config=cfg)
        try:
            _meta_model(trial)
            return [k]
        except Exception:  # noqa: BLE001 - still refused without it: not this key
            continue
    return []


@contextlib.contextmanager
def no_deepspeed_global() -> Iterator[None]:
    """TrainingArguments with a DeepSpeed config registers it globally (ZeRO-3 would then build every later model
    under ``deepspeed.zero.Init``): undone after each point."""
    try:
        yield
    finally:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()


def passthrough_leaves(spec: Any) -> list[tuple[str, str, Any]]:
    """Every passthrough leaf as ``(section, dotted path inside it, value)``."""
    from sweeper.config.spec import dotted_leaves

    out = []
    for section in ("training_args", "fsdp_config", "deepspeed_config"):
        for path, value in dotted_leaves(dict(getattr(spec, section))).items():
            out.append((section, path, value))
    return out


def without_entry(spec: Any, section: str, path: str) -> Any:
    """``spec`` without the passthrough leaf ``<section>.<path>``."""
    tree = copy.deepcopy(getattr(spec, section))
    node = tree
    parts = path.split(".")
    for p in parts[:-1]:
        node = node[p]
    node.pop(parts[-1], None)
    return dataclasses.replace(spec, **{section: tree})


def _attribute(spec: Any, build: Callable[[Any], Any], e: BaseException, sections: tuple[str, ...]) -> tuple[str, ...]:
    """The passthrough keys (dotted, with their section) ``e`` is about: named in its message, else the one whose
    removal lets ``build`` succeed."""
    leaves = [(s, p, v) for s, p, v in passthrough_leaves(spec) if s in sections]
    named = [f"{s}.{p}" for s, p, _ in leaves if p.rsplit(".", 1)[-1] in str(e)]
    if named:
        return tuple(named)
    for s, p, _ in leaves:
        try:
            with no_deepspeed_global():
                build(without_entry(spec, s, p))
            return (f"{s}.{p}",)
        except Exception:  # noqa: BLE001 - still refused without it: not this key
            continue
    return ()


def check_training_args(spec: Any, device: str, notes: list[str]) -> Any:
    """``TrainingArguments`` as the ranks build them; None when this host cannot check them for a GPU point."""
    import torch

    from sweeper.job.trainer_setup import training_arguments

    # a GPU point on a host without one is built for the CPU: its device checks cannot be asked here
    here = device == "cpu" or torch.cuda.is_available()
    use_cpu = device == "cpu" or not torch.cuda.is_available()

    def build(s: Any) -> Any:
        return training_arguments(s, OUT_DIR, use_cpu)

    try:
        return build(spec)
    except Exception as e:
        if not here:
            notes.append(f"TrainingArguments not checked here (no GPU on this host): {error_text(e)}")
            return None
        keys = _attribute(spec, build, e, ("training_args", "fsdp_config", "deepspeed_config")) or ("training_args",)
        why = f"{_label(spec, keys)}: transformers' TrainingArguments refuses it: {error_text(e)}"
        raise Refused(keys, why, "args") from e


def check_dataloader(spec: Any, args: Any) -> None:
    """The DataLoader arguments the Trainer derives from ``args`` (``Trainer.get_train_dataloader``), checked by
    torch's ``DataLoader`` itself."""
    from torch.utils.data import DataLoader

    kw: dict[str, Any] = dict(
        batch_size=1, num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory
    )
    if isinstance(args.dataloader_num_workers, int) and args.dataloader_num_workers > 0:
        kw.update(
            persistent_workers=args.dataloader_persistent_workers, prefetch_factor=args.dataloader_prefetch_factor
        )
    try:
        DataLoader(list(range(4)), **kw)
    except (ValueError, TypeError) as e:
        keys = tuple(f"training_args.{k}" for k in spec.training_args if k.startswith("dataloader_")) or (
            "training_args",
        )
        raise Refused(
            keys, f"{_label(spec, keys)}: torch's DataLoader refuses it: {error_text(e)}", "dataloader"
        ) from e


def check_deepspeed(spec: Any, args: Any, model: Any) -> None:
    """The DeepSpeed config as HF finalises it against the model, validated by DeepSpeed's ``DeepSpeedConfig``."""
    from deepspeed.runtime.config import DeepSpeedConfig

    hf = args.hf_deepspeed_config
    try:
        hf.trainer_config_finalize(args, model, spec.total_steps)
        DeepSpeedConfig(hf.config)
    except Exception as e:
        keys = _pydantic_keys(spec, e) or tuple(
            f"deepspeed_config.{p}" for s, p, _ in passthrough_leaves(spec) if s == "deepspeed_config"
        )
        keys = keys or ("deepspeed_config",)
        raise Refused(keys, f"{_label(spec, keys)}: DeepSpeed refuses its config: {error_text(e)}", "deepspeed") from e


def _pydantic_keys(spec: Any, e: BaseException) -> tuple[str, ...]:
    """The ``deepspeed_config.<path>`` a pydantic ValidationError's locations point at (matched on the path's end)."""
    errors = getattr(e, "errors", None)
    if not callable(errors):
        return ()
    mine = [p for s, p, _ in passthrough_leaves(spec) if s == "deepspeed_config"]
    out = []
    for err in errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        out += [f"deepspeed_config.{p}" for p in mine if loc and (p == loc or p.endswith(f".{loc}"))]
    return tuple(dict.fromkeys(out))


def check_fsdp_effect(spec: Any, args: Any) -> None:
    """Refuse an ``fsdp_config`` entry that leaves accelerate's FSDP plugin arguments (and the Trainer's own
    ``fsdp_config`` reads) as they are without it, naming the setting under which transformers would read it."""
    from sweeper.job.trainer_setup import training_arguments
    from sweeper.point.library_args import fsdp_restates

    def plugin(s: Any) -> Any:
        with no_deepspeed_global():
            a = training_arguments(s, OUT_DIR, True)
        return a.fsdp_plugin_args, {k: a.fsdp_config.get(k) for k in ("xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt")}

    full = plugin(spec)
    for key, value in spec.fsdp_config.items():
        if fsdp_restates(spec, key, value):
            continue  # restates what sweeper sets: dropped from the identity, never refused
        without = without_entry(spec, "fsdp_config", key)
        if plugin(without) != full:
            continue
        raise Refused(
            (f"fsdp_config.{key}",),
            f"fsdp_config.{key}={value!r} has no effect on this point: transformers builds the same FSDP plugin "
            f"arguments with and without it{_condition(spec, key)}",
            "fsdp_effect",
        )


def _condition(spec: Any, key: str) -> str:
    """``"; it is read only with fsdp_config.auto_wrap_policy=SIZE_BASED_WRAP"``: the first switch value under
    which the entry changes the plugin arguments (asked of transformers), else why nothing reads it here."""
    from sweeper.job.trainer_setup import training_arguments

    def plugin(s: Any) -> Any:
        return training_arguments(s, OUT_DIR, True).fsdp_plugin_args

    for switch, values in SWITCHES.items():
        if switch == key:
            continue
        for v in values:
            trial = dataclasses.replace(spec, fsdp_config={**spec.fsdp_config, switch: v})
            try:
                if plugin(trial) != plugin(without_entry(trial, "fsdp_config", key)):
                    return f"; it is read only with fsdp_config.{switch}={v}"
            except Exception:  # noqa: BLE001 - that switch value is refused itself: try the next
                continue
    if key.startswith("xla"):
        return "; it is read only on TPU (torch_xla)"
    return "; nothing in transformers or accelerate reads it for this point"
