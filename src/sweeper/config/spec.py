"""The point spec: one grid point as canonical plain data.

Flow: Hydra composes a config per point -> :func:`from_config` turns it into a :class:`PointSpec` (plain values,
no OmegaConf, no live objects, so it pickles for SLURM and replays exactly) -> :mod:`sweeper.point.gate` refuses
what cannot work, before any rank starts -> :func:`sweeper.point.identity.point_id` names it.

No torch import here: validating a large grid must stay fast.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import typing
from dataclasses import asdict, dataclass, replace
from typing import Any

from sweeper.config.frozen import Memoised, plain_copy
from sweeper.config.schema import Choice, PointKeys
from sweeper.config.sections import PlanConfig, SearchConfig, TimingConfig, from_mapping
from sweeper.redact import redact_tree

#: Spec fields that hold user text as trees (passthrough dicts, callbacks): where a secret may be given.
_USER_TREES = ("fsdp_config", "deepspeed_config", "training_args", "callbacks")

# Config keys that hold a model's maximum sequence length, by transformers' naming.
_MAX_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")


@dataclass(frozen=True, kw_only=True)
class PointSpec(PointKeys, Memoised):
    """Everything one point needs, as plain data: the point's keys as the schema defines them
    (:class:`sweeper.config.schema.PointKeys`: types, defaults and meanings, stated there once) and the model's
    numbers. ``model`` is the architecture's name; ``model_type``, ``decoder_layer`` and ``model_config`` carry its
    numbers; ``timed_auto`` records ``timed_steps=auto`` (then ``timed_steps`` holds its cap).

    A key with a fixed set of values holds its schema member (:class:`sweeper.config.schema.Choice`: it compares,
    prints and serialises as its string), so a spec from any source (a composed config, a ``spec.json``) is typed
    the same.

    Raises:
        ValueError: a value outside a key's choices (``fsdp="sharded"``).
        TypeError: a key the spec does not have.
    """

    model: str
    model_type: str
    decoder_layer: str
    model_config: dict[str, Any]
    # timed_steps=auto: the timed window ends when the median is known within timing.ci_rel (identity)
    timed_auto: bool = False

    def __post_init__(self) -> None:
        # plain data (a composed config's container, a spec.json of any version: partial sections) becomes the
        # frozen sections, the schema's defaults for the keys not given; an unknown key raises TypeError
        object.__setattr__(self, "plan", from_mapping(PlanConfig, self.plan))
        object.__setattr__(self, "timing", from_mapping(TimingConfig, self.timing))
        object.__setattr__(self, "search", from_mapping(SearchConfig, self.search))
        for name, choice in _choice_fields().items():
            object.__setattr__(self, name, choice(getattr(self, name)))

    @property
    def world_size(self) -> int:
        """Number of ranks = ranks_per_node x nodes."""
        return self.ranks_per_node * self.nodes

    @property
    def dp(self) -> int:
        """The data-parallel degree: ranks / (tp x sp x pp), the ranks that each train on a batch of their own (a TP
        or SP group shares one; a pipeline's stages pass one along). At least 1: a tp x sp that does not divide the
        world is refused by the gate (rule T03) before anything reads this (pp > 1: the planner's rule T11)."""
        return max(1, self.world_size // (self.tp * self.sp * self.pp))

    @property
    def deepspeed(self) -> bool:
        """The DeepSpeed engine trains this point: ``zero > 0``, or tensor parallelism without FSDP (AutoTP, at any
        ZeRO stage it supports, 0 included), or Ulysses sequence parallelism, or a pipeline (planned as DeepSpeed's
        ``PipelineModule``)."""
        return self.zero > 0 or self.sp > 1 or self.pp > 1 or (self.tp > 1 and self.fsdp == "none")

    @property
    def batch_search(self) -> bool:
        """``per_device_batch_size=auto``: the batch is the largest that fits, searched before the measurement
        (``docs/batch-search.md``)."""
        return self.per_device_batch_size == "auto"

    @property
    def micro_batch(self) -> int:
        """``per_device_batch_size`` as a number of samples.

        Raises:
            ValueError: for ``auto`` (a search or the model decides it first: :meth:`with_batch`).
        """
        if isinstance(self.per_device_batch_size, str):
            raise ValueError(f"per_device_batch_size={self.per_device_batch_size!r} is not a number of samples yet")
        return int(self.per_device_batch_size)

    def with_batch(self, batch: int) -> PointSpec:
        """This spec with ``per_device_batch_size=batch`` (samples): how a searched point runs at one batch."""
        return replace(self, per_device_batch_size=int(batch))

    @property
    def screening(self) -> bool:
        """This job measures the short window of the frontier search (``search.window=screen``, docs/search.md)."""
        return self.search.window == "screen"

    @property
    def timed_window(self) -> int:
        """Timed steps this job runs at most: ``search.screen_timed_steps`` for a screen (fixed, never above
        ``timed_steps``), else ``timed_steps`` (with ``timed_steps=auto``: its cap)."""
        if self.screening:
            return min(int(self.search.screen_timed_steps), int(self.timed_steps))
        return int(self.timed_steps)

    @property
    def total_steps(self) -> int:
        """Optimizer steps the Trainer runs at most (its ``max_steps``): warm-up + timed + memory + profiled; with
        ``timed_steps=auto`` the timed window counts at its cap (``timed_steps`` holds it) and the ranks stop
        training after the profile window that follows the window's real end; a screen counts its own window
        (:attr:`timed_window`)."""
        return self.warmup_steps + self.timed_window + self.memory_steps + self.profile_steps

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON-serialisable): a fresh copy, the caller's to change. The fields are walked
        once (``dataclasses.asdict``, ~0.2 ms; a submission asks several times per point) and each call copies that
        snapshot (:func:`~sweeper.config.frozen.plain_copy`)."""
        return plain_copy(self.memoised("plain", lambda: asdict(self, dict_factory=_plain_items)))

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text with sorted keys (values JSON cannot hold as their ``str``), computed once."""
        return self.memoised("json", lambda: json.dumps(self.to_dict(), sort_keys=True, default=str))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PointSpec:
        """Inverse of :meth:`to_dict`; also reads the specs of earlier versions, whose ``plan``/``timing`` held only
        the keys given (the schema's defaults fill the rest).

        Raises:
            TypeError: a key the spec (or its ``plan``/``timing`` section) does not have.
        """
        return cls(**data)


def from_config(cfg: Any) -> PointSpec:
    """Build a spec from a composed Hydra config (DictConfig or plain dict of :class:`SweeperConfig` shape).

    A secret value in a passthrough dict, the model config or a callback's arguments (:mod:`sweeper.redact`) is
    kept as its ``${oc.env:SWEEPER_SECRET_...}`` reference, the value in this process's environment: the spec, and
    so every file written from it, never holds it."""
    if not isinstance(cfg, dict):
        from omegaconf import OmegaConf

        if "hydra" in cfg:  # hydra's own node may not resolve outside a job (compose_points' configs lack it)
            cfg = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"])  # a copy: ~15 ms a point
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    cfg = dict(cfg)
    cfg.pop("hydra", None)
    model = cfg.pop("model")
    fields = {k: _plain(v) for k, v in cfg.items() if k in PointSpec.__dataclass_fields__}
    if fields.get("timed_steps") == "auto":  # the procedure is the identity; its cap sizes the windows (total_steps)
        fields["timed_auto"] = True
        fields["timed_steps"] = from_mapping(TimingConfig, fields.get("timing")).max_timed_steps
    # secrets (hub_token, a callback's api_key, ...) stay references to the environment (sweeper.redact)
    for key in _USER_TREES:
        if key in fields:
            fields[key] = redact_tree(fields[key], key)
    return PointSpec(
        model=model["name"],
        model_type=model["model_type"],
        decoder_layer=model["decoder_layer"],
        model_config=redact_tree(dict(model.get("config") or {}), "model.config"),
        **fields,
    )


def _plain(v: Any) -> Any:
    """Enums to their value, leave everything else."""
    return getattr(v, "value", v)


def _plain_items(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """``asdict``'s dict factory: a :class:`Choice` member becomes its plain ``str`` (what JSON, Parquet and every
    reader of :meth:`PointSpec.to_dict` see)."""
    return {k: _plain(v) if isinstance(v, Choice) else v for k, v in items}


@functools.cache
def _choice_fields() -> dict[str, type[Choice]]:
    """The spec's keys typed by a :class:`Choice` in the schema, and their type."""
    hints = typing.get_type_hints(PointSpec)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(PointSpec)
        if isinstance(hints[f.name], type) and issubclass(hints[f.name], Choice)
    }


def model_max_seq_len(spec: PointSpec) -> int | None:
    """The architecture's maximum sequence length in tokens, or None when its config does not state one."""
    key = max_position_key(spec)
    return int(spec.model_config[key]) if spec.model_config.get(key) else None


def max_position_key(spec: PointSpec) -> str:
    """The model config's key that states its maximum sequence length (``max_position_embeddings``, gpt2's
    ``n_positions``, ...): the first of them the config holds, else ``max_position_embeddings``."""
    return next((k for k in _MAX_POSITION_KEYS if spec.model_config.get(k)), "max_position_embeddings")


def replay_command(overrides: list[str], search_path: list[str] | tuple[str, ...] = ()) -> str:
    """A shell command that runs this point alone again: ``python -m sweeper <overrides>``, after
    ``hydra.searchpath=[...]`` when the sweep's command line added config folders (``search_path``: absolute
    ``file://`` entries; a model file of the user's own folder is found again)."""
    prefix = [f"hydra.searchpath=[{','.join(search_path)}]"] if search_path else []
    return shell_command([*prefix, *(_cli_value(o) for o in overrides)])


def shell_command(argv: list[str], program: str = "python -m sweeper") -> str:
    """A command line, each argument shell-quoted (``shlex.quote``): pasted into a shell it runs the same arguments,
    never a ``$(...)`` or a brace expansion inside one (``sweep.json``'s ``command``, the replay commands, the
    planner's). Secrets are references already (:func:`sweeper.redact.redact_command_line` rewrote ``sys.argv``)."""
    return " ".join([program, *(shlex.quote(a) for a in argv)])


def _cli_value(override: str) -> str:
    """``gc=True`` (how Hydra's sweeper spells a swept bool) back to the CLI's ``gc=true``."""
    key, sep, value = override.partition("=")
    return f"{key}={value.lower()}" if sep and value in ("True", "False") else override


def dotted_leaves(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The leaves of a nested dict by dotted path, as a passthrough key is spelled on the command line:
    ``{"zero_optimization": {"stage": 3}}`` -> ``{"zero_optimization.stage": 3}`` (an empty dict is a leaf)."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(dotted_leaves(v, f"{path}."))
        else:
            out[path] = v
    return out
