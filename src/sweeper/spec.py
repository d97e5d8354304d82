"""The point spec: one grid point as canonical plain data, its validation and its identity.

Flow: Hydra composes a config per point -> :func:`from_config` turns it into a :class:`PointSpec` (plain values,
no OmegaConf, no live objects, so it pickles for SLURM and replays exactly) -> :func:`validate` refuses combinations
that cannot work, before any rank starts -> :func:`point_id` names it.

No torch import here: validating a large grid must stay fast.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

FSDP_STRATEGIES = ("none", "full_shard", "shard_grad_op", "hybrid_shard")
PRECISIONS = ("fp32", "bf16", "fp16")
MODEL_DTYPES = ("float32", "bfloat16", "float16")
ZERO_STAGES = (0, 1, 2, 3)

# Config keys that hold a model's maximum sequence length, by transformers' naming.
_MAX_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")


class InvalidPoint(ValueError):
    """A grid point that cannot run as configured.

    Attributes:
        keys: the config keys involved, e.g. ``("fsdp", "zero")``.
    """

    def __init__(self, message: str, keys: tuple[str, ...]) -> None:
        super().__init__(message)
        self.keys = keys


@dataclass(frozen=True)
class PointSpec:
    """Everything one point needs, as plain data (see :class:`sweeper.config.SweeperConfig` for each key).

    ``model`` is the architecture's name; ``model_type``, ``decoder_layer`` and ``model_config`` carry its numbers.
    """

    model: str
    model_type: str
    decoder_layer: str
    model_config: dict[str, Any]
    fsdp: str
    fsdp_config: dict[str, Any]
    gc: bool
    use_reentrant: bool
    precision: str
    model_dtype: str
    zero: int
    deepspeed_config: dict[str, Any]
    per_device_batch_size: int
    seq_len: int
    grad_accum: int
    ranks_per_node: int
    nodes: int
    device: str
    warmup_steps: int
    timed_steps: int
    memory_steps: int
    profile_steps: int
    eval: bool
    seed: int
    timeout_s: float
    training_args: dict[str, Any] = field(default_factory=dict)
    callbacks: list[Any] = field(default_factory=list)
    profile_trace: bool = True

    @property
    def world_size(self) -> int:
        """Number of ranks = ranks_per_node x nodes."""
        return self.ranks_per_node * self.nodes

    @property
    def total_steps(self) -> int:
        """Optimizer steps the Trainer runs: warm-up + timed + memory + profiled."""
        return self.warmup_steps + self.timed_steps + self.memory_steps + self.profile_steps

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PointSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def from_config(cfg: Any) -> PointSpec:
    """Build a spec from a composed Hydra config (DictConfig or plain dict of :class:`SweeperConfig` shape)."""
    if not isinstance(cfg, dict):
        from omegaconf import OmegaConf

        keys = [k for k in cfg.keys() if k != "hydra"]  # hydra's own node may not resolve outside a job
        cfg = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True, enum_to_str=True)
    cfg = dict(cfg)
    cfg.pop("hydra", None)
    model = cfg.pop("model")
    return PointSpec(
        model=model["name"],
        model_type=model["model_type"],
        decoder_layer=model["decoder_layer"],
        model_config=dict(model.get("config") or {}),
        **{k: _plain(v) for k, v in cfg.items() if k in PointSpec.__dataclass_fields__},
    )


def _plain(v: Any) -> Any:
    """Enums to their value, leave everything else."""
    return getattr(v, "value", v)


def model_max_seq_len(spec: PointSpec) -> int | None:
    """The architecture's maximum sequence length in tokens, or None when its config does not state one."""
    for key in _MAX_POSITION_KEYS:
        if spec.model_config.get(key):
            return int(spec.model_config[key])
    return None


def validate(spec: PointSpec) -> None:
    """Refuse a point that cannot work, before any process starts.

    Raises:
        InvalidPoint: the message names the keys and the allowed values. Rules: FSDP together with ZeRO > 0
            (two sharding engines); batch size, sequence length, gradient accumulation, ranks, nodes < 1; timed
            steps < 3 (no median); sequence length over the model's maximum; fp16 weights with fp16 autocast (case
            P03, "Attempting to unscale FP16 gradients"); unknown strategy/precision/dtype/stage values.
    """
    if spec.fsdp not in FSDP_STRATEGIES:
        raise InvalidPoint(f"fsdp={spec.fsdp!r} is not one of {', '.join(FSDP_STRATEGIES)}", ("fsdp",))
    if spec.precision not in PRECISIONS:
        raise InvalidPoint(f"precision={spec.precision!r} is not one of {', '.join(PRECISIONS)}", ("precision",))
    if spec.model_dtype not in MODEL_DTYPES:
        raise InvalidPoint(
            f"model_dtype={spec.model_dtype!r} is not one of {', '.join(MODEL_DTYPES)}", ("model_dtype",)
        )
    if spec.zero not in ZERO_STAGES:
        raise InvalidPoint(
            f"zero={spec.zero} is not a DeepSpeed ZeRO stage: use one of 0, 1, 2, 3 (0 = no DeepSpeed)",
            ("zero",),
        )
    if spec.fsdp != "none" and spec.zero > 0:
        raise InvalidPoint(
            f"fsdp={spec.fsdp} together with zero={spec.zero}: FSDP and DeepSpeed ZeRO both shard the model; "
            "choose one (fsdp=none with zero=1,2,3, or zero=0 with an FSDP strategy)",
            ("fsdp", "zero"),
        )
    for key in ("per_device_batch_size", "seq_len", "grad_accum", "ranks_per_node", "nodes"):
        if getattr(spec, key) < 1:
            raise InvalidPoint(f"{key}={getattr(spec, key)} must be at least 1", (key,))
    for key in ("warmup_steps", "memory_steps", "profile_steps"):
        if getattr(spec, key) < 0:
            raise InvalidPoint(f"{key}={getattr(spec, key)} must be at least 0", (key,))
    if spec.timed_steps < 3:
        raise InvalidPoint(
            f"timed_steps={spec.timed_steps} must be at least 3 (median, p10 and p90 of the timed steps)",
            ("timed_steps",),
        )
    if spec.timeout_s <= 0:
        raise InvalidPoint(f"timeout_s={spec.timeout_s} must be positive (seconds)", ("timeout_s",))
    max_len = model_max_seq_len(spec)
    if max_len is not None and spec.seq_len > max_len:
        raise InvalidPoint(
            f"seq_len={spec.seq_len} is over model={spec.model}'s maximum of {max_len} tokens "
            f"(its max_position_embeddings); use seq_len<={max_len}",
            ("seq_len", "model"),
        )
    if spec.precision == "fp16" and spec.model_dtype == "float16":
        raise InvalidPoint(
            "precision=fp16 with model_dtype=float16: fp16 mixed precision needs fp32 master weights "
            "(the first optimizer step fails with 'Attempting to unscale FP16 gradients'); use model_dtype=float32",
            ("precision", "model_dtype"),
        )
    if spec.fsdp != "none" and spec.gc and spec.use_reentrant:
        raise InvalidPoint(
            f"fsdp={spec.fsdp} with gc=true and use_reentrant=true: under FSDP, gc means FSDP-native activation "
            "checkpointing (case P02), which accelerate always runs non-reentrant; use use_reentrant=false, or "
            "fsdp=none to sweep use_reentrant",
            ("fsdp", "gc", "use_reentrant"),
        )
    if spec.fsdp == "hybrid_shard" and spec.nodes < 2 and spec.ranks_per_node < 2:
        raise InvalidPoint(
            "fsdp=hybrid_shard needs at least 2 ranks to shard over (ranks_per_node>=2)",
            ("fsdp", "ranks_per_node"),
        )
    bad_ta = sorted(set(spec.training_args) & _OWNED_TRAINING_ARGS)
    if bad_ta:
        raise InvalidPoint(
            f"training_args.{bad_ta[0]} is set by sweeper from its own key; use "
            f"{_OWNED_TRAINING_ARGS_HINT.get(bad_ta[0], 'the sweeper key')} instead",
            tuple(f"training_args.{k}" for k in bad_ta),
        )


# TrainingArguments fields that sweeper derives from its own keys: the passthrough may not set them.
_OWNED_TRAINING_ARGS_HINT = {
    "per_device_train_batch_size": "per_device_batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "fsdp": "fsdp",
    "fsdp_config": "fsdp_config",
    "deepspeed": "zero / deepspeed_config",
    "bf16": "precision",
    "fp16": "precision",
    "gradient_checkpointing": "gc",
    "activation_checkpointing": "gc",
    "gradient_checkpointing_kwargs": "use_reentrant",
    "activation_checkpointing_kwargs": "use_reentrant",
    "max_steps": "warmup_steps / timed_steps",
    "seed": "seed",
    "output_dir": "the sweep directory",
}
_OWNED_TRAINING_ARGS = frozenset(_OWNED_TRAINING_ARGS_HINT)


def canonical_json(spec: PointSpec) -> str:
    """The spec as canonical JSON (sorted keys, no whitespace): the input of :func:`point_id`."""
    return json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"), default=str)


def point_id(spec: PointSpec) -> str:
    """12 hex digits of SHA-256 over the canonical spec: equal specs share an id, any change gives a new one."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:12]


def replay_command(overrides: list[str]) -> str:
    """A shell command that runs this point alone again: ``python -m sweeper <overrides>``."""
    return " ".join(["python -m sweeper", *(shlex.quote(_cli_value(o)) for o in overrides)])


def _cli_value(override: str) -> str:
    """``gc=True`` (how Hydra's sweeper spells a swept bool) back to the CLI's ``gc=true``."""
    key, sep, value = override.partition("=")
    return f"{key}={value.lower()}" if sep and value in ("True", "False") else override
