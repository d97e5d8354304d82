"""The typed configuration schema, registered in Hydra's ConfigStore.

The YAML files in ``conf/`` give the defaults; this schema gives every key its type, so Hydra refuses a misspelt
value (``precision=bf61``) or a wrong type (``gc=maybe``; ``per_device_batch_size=four`` through
:func:`batch_size_error`) for *every* point of a grid before any job starts. Cross-key rules (FSDP together with
ZeRO, sequence length over the model's maximum, ...) live in :mod:`sweeper.point.gate`. Names follow
``TrainingArguments`` (``fsdp``, ``fsdp_config``, ``per_device_train_batch_size`` is spelled
``per_device_batch_size`` here as in the product brief) and DeepSpeed (``zero`` is ``zero_optimization.stage``).

This module imports neither torch nor transformers: composing a 1,000-point grid must not wait for them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sweeper.config.sections import ClusterConfig, PlanConfig, SearchConfig, TimingConfig, from_mapping

__all__ = [
    "ClusterConfig",
    "LauncherConfig",
    "PlanConfig",
    "PointKeys",
    "SearchConfig",
    "SweeperConfig",
    "TimingConfig",
    "WandbConfig",
    "from_mapping",
]


class Choice(str, Enum):
    """A key whose values are a fixed set of strings: Hydra refuses any other value for a whole grid, and a member *is*
    its value for every other purpose (``==``, hashing, ``str``, f-strings, ``repr``, JSON), so a spec holding
    ``Fsdp.full_shard`` prints, compares and serialises as ``"full_shard"`` on every Python version (3.12 changed
    ``str()`` and ``format()`` of mixed-in enums)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    def __repr__(self) -> str:
        return str.__repr__(self)

    __hash__ = str.__hash__


class Fsdp(Choice):
    """FSDP sharding strategy (``TrainingArguments.fsdp``; FSDP2 ``reshard_after_forward`` semantics)."""

    none = "none"
    full_shard = "full_shard"  # ZeRO-3-like: params, grads and optimizer state sharded
    shard_grad_op = "shard_grad_op"  # ZeRO-2-like: params kept unsharded between forward and backward
    hybrid_shard = "hybrid_shard"  # full_shard inside a node, replicate across nodes


class Precision(Choice):
    """The compute dtype: ``fp32``, or autocast (``bf16=True`` / ``fp16=True``). With ``model_dtype=float32`` autocast
    keeps fp32 master weights; ``model_dtype=bfloat16`` with ``bf16`` is pure bf16 training (no fp32 copy). Other
    pairs are refused by the gate (``docs/gate.md``)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Dtype(Choice):
    """The storage dtype of the weights (``dtype`` of ``from_config``); see :class:`Precision` for the pairs."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Device(Choice):
    """Where ranks run: ``auto`` picks CUDA when present, else CPU."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@dataclass
class ModelConfig:
    """An architecture, built with ``AutoModelForCausalLM.from_config`` (no weights are downloaded)."""

    name: str = "tiny"
    # transformers model_type, e.g. "llama", "gpt2"
    model_type: str = "llama"
    # class name of the repeated decoder block: FSDP auto-wrap unit and checkpointing unit
    decoder_layer: str = "LlamaDecoderLayer"
    # the published architecture numbers, passed to the config class
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LauncherConfig:
    """How points are launched: ``launcher=local`` (ranks on this machine) or ``launcher=slurm``."""

    name: str = "local"
    # slurm: block until every point has a final result (true), or submit and return at once (false)
    wait: bool = True
    # slurm: seconds between two looks at the queue while waiting
    poll_interval_s: float = 5.0
    # slurm: stop waiting after this many minutes with points still pending (null: until every point is final; a
    # job SLURM can never start, e.g. pending on PartitionTimeLimit, is final: recorded error/scheduler, cancelled)
    wait_timeout_min: float | None = None
    # re-launch points whose final status is one of these when resuming a sweep directory (e.g. [error, oom])
    rerun_statuses: list[str] = field(default_factory=list)


class WandbMode(Choice):
    """Where W&B runs go (``wandb=<mode>``, files in ``conf/wandb/``; docs/wandb.md)."""

    auto = "auto"  # offline when the wandb package is installed, else off
    off = "off"  # no W&B at all
    offline = "offline"  # runs written under <sweep dir>/wandb/, synced later with `wandb sync`
    online = "online"  # runs sent to the W&B server; offline when no API key or no network


@dataclass(frozen=True)
class WandbConfig:
    """W&B tracking of a sweep: one run per point, written from the records on the driver when the sweep ends and by
    ``python -m sweeper.report`` (never inside the ranks). Not part of any point's identity."""

    mode: WandbMode = WandbMode.auto
    # the W&B project and entity (team or user; null: the API key's default entity)
    project: str = "sweeper"
    entity: str | None = None


@dataclass(frozen=True, kw_only=True)
class PointKeys:
    """The keys of one grid point, defined once: their types (what Hydra validates), defaults and meanings.

    :class:`SweeperConfig` (the Hydra schema) is these keys plus the sections that say where and how a sweep runs
    (``model``, ``launcher``, ``cluster``, ``wandb``); :class:`sweeper.config.spec.PointSpec` (one point as plain data)
    is these keys plus the model's numbers. Neither restates a key, and ``conf/config.yaml`` holds no value: a default
    changes here and only here (``tests/unit/test_config_definition.py`` checks both).
    """

    # FSDP strategy (TrainingArguments.fsdp); "none" = DDP (or DeepSpeed when zero > 0)
    fsdp: Fsdp = Fsdp.none
    # extra keys merged into TrainingArguments.fsdp_config (version, auto-wrap and checkpointing are set for you)
    fsdp_config: dict[str, Any] = field(default_factory=dict)
    # gradient/activation checkpointing: HF's under DDP/DeepSpeed, FSDP-native under FSDP (docs/cases.md#p02)
    gc: bool = False
    # torch.utils.checkpoint use_reentrant, always passed explicitly (docs/cases.md#p01)
    use_reentrant: bool = False
    precision: Precision = Precision.fp32
    model_dtype: Dtype = Dtype.float32
    # DeepSpeed zero_optimization.stage; 0 = no DeepSpeed
    zero: int = 0
    # extra keys merged into the generated DeepSpeed config
    deepspeed_config: dict[str, Any] = field(default_factory=dict)
    # tensor-parallel degree: each decoder layer's linears sharded over tp ranks of one node (DeepSpeed AutoTP,
    # tensor_parallel.autotp_size, with zero=0|1|2); 1 = off. The data-parallel degree is world / (tp x sp)
    # (docs/parallelism.md)
    tp: int = 1
    # sequence-parallel degree (DeepSpeed Ulysses: the sequence sharded over sp ranks, all-to-all around attention);
    # 1 = off (docs/parallelism.md)
    sp: int = 1
    # pipeline-parallel degree: planned by python -m sweeper.plan only (the HF Trainer has no pipeline training
    # path); a sweep point with pp > 1 is refused (docs/parallelism.md)
    pp: int = 1
    # per-device micro-batch (TrainingArguments.per_device_train_batch_size), samples; "auto" = the largest that fits
    # (docs/batch-search.md). A str other than "auto" is refused by batch_size_error (grid and gate).
    per_device_batch_size: int | str = 4
    # tokens per sample
    seq_len: int = 128
    # TrainingArguments.gradient_accumulation_steps
    grad_accum: int = 1
    # ranks (processes, one per device) per node, and nodes
    ranks_per_node: int = 2
    nodes: int = 1
    device: Device = Device.auto
    # optimizer steps: warm-up (dropped), timed (step time), memory-tracked, profiled; run in that order.
    # timed_steps: a number, or "auto" (until the median's 95 % interval is within timing.ci_rel, see TimingConfig);
    # a str other than "auto" is refused by timed_steps_error (grid and gate)
    warmup_steps: int = 3
    timed_steps: int | str = 8
    memory_steps: int = 1
    profile_steps: int = 1  # the top-ops table and trace of one steady-state step (a budget, not identity)
    # evaluation after training (off by default; on: eval_accumulation_steps bounds eval memory, docs/cases.md#p05)
    eval: bool = False
    seed: int = 0
    # wall-clock limit of one point, seconds; a point past it is killed and recorded as timeout
    timeout_s: float = 900.0
    # any other TrainingArguments field, passed through (``+training_args.max_grad_norm=0.5``)
    training_args: dict[str, Any] = field(default_factory=dict)
    # extra TrainerCallbacks, as Hydra ``_target_`` dicts instantiated inside each rank
    callbacks: list[Any] = field(default_factory=list)
    # write a torch.profiler chrome trace per rank (large for big models)
    profile_trace: bool = True
    # host-memory limit of one local point (all its ranks together), GiB (2**30 bytes); null = derived from this
    # machine's memory (docs/measurement.md). Past it the point is stopped and recorded host_oom.
    host_mem_limit_gib: float | None = None
    # capacity planning: skip (status pruned) a point predicted not to fit in cluster.gpu_mem_gib
    prune: bool = False
    # tokens of the training run that plan and the report turn into days and GPU-hours
    train_tokens: float = 1.0e12
    plan: PlanConfig = field(default_factory=PlanConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    # how the multirun walks the grid: search=grid (every point) or search=frontier (docs/search.md); not identity
    search: SearchConfig = field(default_factory=SearchConfig)


@dataclass(frozen=True, kw_only=True)
class SweeperConfig(PointKeys):
    """The typed Hydra config of the sweep app (``sweeper_schema`` in ``conf/config.yaml``'s defaults list): one grid
    point's keys (:class:`PointKeys`; every one can be swept with ``-m key=a,b``) and the sections chosen by config
    group (``model=``, ``launcher=``, ``cluster=``, ``wandb=``). Frozen like its sections; :func:`schema_node` makes
    the node overridable (values still typed)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)


#: Keys shown in ``--help`` with a placeholder instead of a value list (what their numbers mean).
_HELP_PLACEHOLDERS = {
    "per_device_batch_size": "N|auto",
    "seq_len": "TOKENS",
    "grad_accum": "N",
    "tp": "N",
    "sp": "N",
    "pp": "N",
    "ranks_per_node": "N",
    "nodes": "N",
    "warmup_steps": "STEPS",
    "timed_steps": "STEPS|auto",
    "memory_steps": "STEPS",
    "profile_steps": "STEPS",
    "seed": "N",
    "timeout_s": "SECONDS",
    "host_mem_limit_gib": "GIB|null",
    "train_tokens": "TOKENS",
}
#: DeepSpeed ZeRO stages (``zero_optimization.stage``); 0 = DeepSpeed off.
ZERO_STAGES = (0, 1, 2, 3)
#: ``per_device_batch_size=auto``: search the largest per-device batch that fits (docs/batch-search.md).
AUTO_BATCH = "auto"


def batch_size_error(value: object) -> str | None:
    """Why ``value`` is not a ``per_device_batch_size``, or None: an int (samples; the gate checks it is >= 1) or
    :data:`AUTO_BATCH`. OmegaConf's structured configs cannot type ``int | Literal["auto"]``, so the schema types the
    key ``int | str`` and this refuses any other string (``per_device_batch_size=four``) for a whole grid before any
    job starts (:func:`sweeper.config.compose.compose_points`) and for a single point at the gate (rule G02)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if value == AUTO_BATCH:
        return None
    return (
        f"per_device_batch_size={value!r} is not a number of samples: use an integer >= 1, or "
        f"per_device_batch_size={AUTO_BATCH} to search the largest that fits"
    )


#: ``timed_steps=auto``: time steps until the median step time is known well enough (:class:`TimingConfig`).
AUTO_STEPS = "auto"


def timed_steps_error(value: object) -> str | None:
    """Why ``value`` is not a ``timed_steps``, or None: an int (steps; the gate checks it is >= 3) or
    :data:`AUTO_STEPS`. Like :func:`batch_size_error`: the schema types the key ``int | str`` and this refuses any
    other string (``timed_steps=lots``) for a whole grid before any job starts
    (:func:`sweeper.config.compose.compose_points`) and for a single point at the gate (rule G03)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if value == AUTO_STEPS:
        return None
    return (
        f"timed_steps={value!r} is not a number of steps: use an integer >= 3, or timed_steps={AUTO_STEPS} to time "
        "steps until the median step time is known within timing.ci_rel (at most timing.max_timed_steps)"
    )


def help_keys(width: int = 110) -> str:
    """The grid keys and their allowed values for ``--help``, derived from this schema (enums, bools, ZeRO stages),
    so the help never lists a value the schema refuses."""
    import typing

    hints = typing.get_type_hints(SweeperConfig)
    items = []
    for f in dataclasses.fields(SweeperConfig):
        kind = hints[f.name]
        if f.name == "zero":
            items.append("zero=" + "|".join(map(str, ZERO_STAGES)))
        elif isinstance(kind, type) and issubclass(kind, Enum):
            items.append(f"{f.name}=" + "|".join(v.value for v in kind))
        elif kind is bool:
            items.append(f"{f.name}=true|false")
        elif f.name in _HELP_PLACEHOLDERS:
            items.append(f"{f.name}={_HELP_PLACEHOLDERS[f.name]}")
    lines, line = [], ""
    for item in items:
        if line and len(line) + 3 + len(item) > width:
            lines.append(line)
            line = ""
        line = f"{line}   {item}" if line else item
    return "\n".join([*lines, line])


def schema_node() -> Any:
    """The schema as an OmegaConf node that the command line can override: the sections the point spec and the
    target hold as frozen dataclasses (``cluster``, ``plan``, ``timing``) would otherwise be read-only nodes
    (OmegaConf makes a frozen dataclass read-only); their values are still typed and validated."""
    return _writable_node(SweeperConfig)


def is_sweeper_config(cfg: Any) -> bool:
    """Whether ``cfg`` (a composed config) was composed from this schema (``conf/config.yaml``), not another Hydra
    app's config that selected sweeper's plugins (``hydra/sweeper=sweeper_basic``, ``hydra/launcher=sweeper_slurm``):
    only sweeper's own points are checked, gated and recorded as points."""
    from omegaconf import OmegaConf

    return OmegaConf.get_type(cfg) is SweeperConfig


@dataclass
class SlurmLauncherConf:
    """``hydra/launcher=sweeper_slurm``. sweeper's own points take the cluster from the app's ``cluster=<name>``;
    another Hydra app's task function (:mod:`sweeper.launchers.slurm.hydra_task`) takes it from
    ``hydra.launcher.cluster.<key>`` (partition, account, time_limit_min, ...), one SLURM task per job."""

    _target_: str = "hydra_plugins.sweeper_slurm.SweeperSlurmLauncher"
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


def _writable_node(cls: type) -> Any:
    """``OmegaConf.structured(cls)`` with the frozen root and every nested frozen section writable (its values still
    typed)."""
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.structured(cls)
    OmegaConf.set_readonly(node, False)  # a frozen root is read-only too

    def writable(n: Any) -> None:
        for key in n:
            child = n._get_node(key)
            if isinstance(child, DictConfig):
                OmegaConf.set_readonly(child, None)  # inherit the root's "writable"
                writable(child)

    writable(node)
    return node


def register_plugin_configs() -> None:
    """Register the nodes of sweeper's two Hydra plugins: ``hydra/launcher=sweeper_slurm`` and
    ``hydra/sweeper=sweeper_basic``.

    Called by :func:`register_configs` and when Hydra imports :mod:`hydra_plugins.sweeper_slurm` (plugin discovery,
    before any config is composed), so any Hydra app can select them, as Hydra's own plugins are selected."""
    from hydra.core.config_store import ConfigStore  # here: the report reads the defaults without Hydra

    cs = ConfigStore.instance()
    cs.store(group="hydra/launcher", name="sweeper_slurm", node=_writable_node(SlurmLauncherConf))
    cs.store(
        group="hydra/sweeper",
        name="sweeper_basic",
        node={"_target_": "hydra_plugins.sweeper_slurm.SweeperBasicSweeper", "max_batch_size": None, "params": None},
    )


def register_configs() -> None:
    """Register the schema as ``sweeper_schema`` (used by ``conf/config.yaml``'s defaults list), every named
    grid in ``sweeps/*.yaml`` as an option of the ``sweeps`` group (``+sweeps=fsdp-gc``) and the plugins' nodes
    (:func:`register_plugin_configs`)."""
    from omegaconf import OmegaConf

    from sweeper.paths import sweeps_dir

    if not OmegaConf.has_resolver("sweeper_help_keys"):
        OmegaConf.register_new_resolver("sweeper_help_keys", lambda: help_keys().replace("\n", "\n  "))
    from hydra.core.config_store import ConfigStore  # here: the report reads the defaults without Hydra

    cs = ConfigStore.instance()
    cs.store(name="sweeper_schema", node=schema_node())
    for path in sorted(sweeps_dir().glob("*.yaml")):
        cs.store(group="sweeps", name=path.stem, node=OmegaConf.load(path), package="_global_")
    register_plugin_configs()
