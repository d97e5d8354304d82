"""The sections of the configuration that a point spec and a target hold as frozen dataclasses: the cluster
(:class:`ClusterConfig`), capacity planning's assumptions (:class:`PlanConfig`) and the timing budgets
(:class:`TimingConfig`).

They are part of the typed schema (:class:`sweeper.config.schema.SweeperConfig`, re-exported there) but live in a module
of their own that imports nothing heavy (no Hydra), because the ranks read specs too. Frozen: a spec, a target and a
SLURM payload never change after the gate; they pickle as plain module-level classes. OmegaConf would make a frozen
dataclass a read-only node: :func:`sweeper.config.schema.schema_node` keeps them overridable on the command line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterConfig:
    """Where SLURM jobs go and what each asks for (``cluster=<name>``, files in ``conf/cluster/``).

    Names follow sbatch (https://slurm.schedmd.com/sbatch.html); ranks per node and nodes belong to the point.
    """

    name: str = "local"
    # sbatch --partition / --account / --qos / --constraint
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    # GPUs per node (sbatch --gpus-per-node); 0 = CPU ranks
    gpus_per_node: int = 0
    # the partition's GPU model, e.g. "NVIDIA H100 80GB HBM3": bf16 support (docs/cases.md#p04), memory lines in the
    # report
    gpu_name: str | None = None
    # memory per device as torch reports it (torch.cuda.get_device_properties().total_memory), GiB (2**30 bytes):
    # capacity planning's "fits", pruning and the report's memory line. On CPU ranks (gpus_per_node=0) a value here
    # is a tensor-byte budget per rank that the harness enforces like a GPU's memory (tests, demos); null = none.
    gpu_mem_gib: float | None = None
    # the vendor's label for that memory, decimal GB ("80" for an "80 GB" card), shown beside gpu_mem_gib
    gpu_mem_vendor_gb: float | None = None
    # host (CPU) memory per node, GiB (2**30 bytes): capacity planning's host fit for offloaded states (ZeRO-Offload,
    # FSDP cpu_offload); null = unknown (the host fit is not decided)
    host_mem_gib: float | None = None
    # collective bandwidth per device inside one node and between nodes, GB/s (10**9 bytes/s), as NCCL's
    # all_reduce_perf "busbw" reports it; null = communication is not modelled (plan says so)
    intra_node_bandwidth_gb_s: float | None = None
    inter_node_bandwidth_gb_s: float | None = None
    # sbatch --cpus-per-task (per rank)
    cpus_per_task: int = 1
    # sbatch --mem, per node, sbatch syntax ("4G", "500M"); null = the partition's default
    mem: str | None = None
    # sbatch --time in minutes; null = ceil(timeout_s / 60) of the point
    time_limit_min: int | None = None
    # sbatch --array=...%P: how many points run at once
    array_parallelism: int = 64
    # shell lines run before the job in the sbatch script (module loads, venv activation)
    setup: list[str] = field(default_factory=list)
    # any other sbatch parameter, e.g. {exclusive: true, reservation: abc}
    sbatch_extra: dict[str, Any] = field(default_factory=dict)
    # seconds before the time limit that SLURM signals the job (USR2) so it records a timeout itself
    signal_delay_s: int = 30
    # times a preempted point is requeued before it is recorded as preempted
    max_requeues: int = 2
    # price of one GPU-hour on this cluster, in your currency (null: unknown); the inverse question ranks clusters by
    # cost when every answering cluster has a price, by GPU-hours otherwise
    price_per_gpu_hour: float | None = None


@dataclass(frozen=True)
class PlanConfig:
    """Capacity planning's assumptions (``plan.<key>=V``); see ``docs/planning.md`` for each one's source.

    None of these changes what a point runs, so none is part of a point's identity.
    """

    # achieved fraction of the device's dense peak FLOP/s in the compute dtype, recompute included (hardware FLOP
    # utilisation); a sweep prints the value calibrated on its ok points, to pass back here
    efficiency: float = 0.4
    # fraction of a step's compute time that can hide communication (the backward pass is 2/3 of the FLOPs)
    comm_overlap: float = 0.67
    # fraction of device memory held back when deciding "fits" (pruning, largest batch)
    memory_margin: float = 0.05
    # allocator reserve over the allocated peak (reserved / allocated - 1), GPU only
    fragmentation: float = 0.1
    # per-process CUDA context (not in max_memory_allocated), GiB, GPU only
    cuda_context_gib: float = 0.5
    # NCCL's buffers per rank when world size > 1, GiB, GPU only
    nccl_gib: float = 0.25
    # the inverse question (python -m sweeper.plan ... train_tokens=T plan.deadline_days=D): per cluster, the fewest
    # nodes and the cheapest configuration that trains train_tokens within this many days (null: a plain plan)
    deadline_days: float | None = None
    # the most nodes the inverse question considers per cluster
    max_nodes: int = 256
    # a measured sweep directory to calibrate the time model on (efficiency and per-step overhead per engine family,
    # gc and precision; sweeper.capacity.calibrate); null = plan.efficiency
    calibrate: str | None = None
    # apply a plan.calibrate sweep measured on another kind of device (CPU vs GPU), another GPU type or in another
    # precision than the plan's (refused otherwise: a CPU's fp32 efficiency is not an H100's in bf16); the plan's
    # answer line then says what it applied
    calibrate_across: bool = False
    # pipeline schedule of a pp > 1 plan: 1f1b (stage i holds min(m, pp - i) micro-batches in flight) or gpipe (all
    # m); m = grad_accum, the micro-batches of one optimizer step (docs/parallelism.md)
    pp_schedule: str = "1f1b"


@dataclass(frozen=True)
class TimingConfig:
    """How ``timed_steps=auto`` sizes the timed window (``timing.<key>=V``; docs/measurement.md).

    After each timed step the window ends once the 95 % confidence interval of the median step time (order
    statistics, :mod:`sweeper.results.stats`) lies within ``±ci_rel`` of the median, with at least
    ``min_timed_steps`` steps, or at ``max_timed_steps``. Budgets: none is part of a point's identity (the
    procedure ``timed_steps=auto`` is). Ignored with a fixed ``timed_steps``, except ``contention_warn_frac``, which
    applies to every point: above it a point is marked ``contended`` (a rank's training thread waited that share of the
    timed window for a CPU, ``runqueue_wait_frac``; docs/measurement.md, "Contention").
    """

    # allowed deviation of each bound of the median's 95 % interval from the median (fraction: 0.02 = ±2 %)
    ci_rel: float = 0.02
    # fewest timed steps (at least 3; the 95 % interval needs 6)
    min_timed_steps: int = 8
    # most timed steps (the cap; the Trainer's max_steps counts it)
    max_timed_steps: int = 64
    # a point whose runqueue_wait_frac (share of the timed window a rank's training thread waited for a CPU, max
    # over ranks) is above this is marked contended (fraction: 0.1 = 10 %; an idle 2-core machine running 2 ranks
    # measures ~4 %); every point, fixed timed_steps too
    contention_warn_frac: float = 0.1


@dataclass(frozen=True)
class SearchConfig:
    """How a multirun walks its grid (``search=grid|frontier``, files in ``conf/search/``; docs/search.md).

    ``grid`` runs every point. ``frontier`` (:mod:`sweeper.search`) predicts every point, measures in the order of
    the predicted fronts, screens each point with a short timed window first and promotes to the full window only
    the points that could still be on the frontier; the rest get a ``skipped`` record with the reason. None of
    these keys is part of a point's identity (a screen is the same point measured with a shorter window).
    """

    # grid (every point) or frontier (the planner-ordered, successive-halving search)
    name: str = "grid"
    # which window a job measures: full (the point's timed_steps) or screen (screen_timed_steps); set per job by
    # the frontier search, never by hand
    window: str = "full"
    # screen each point with a short window first: auto (when the steps it saves outweigh a second start-up, by the
    # measured per-point overhead: docs/search.md), always, never
    screen: str = "auto"
    # timed steps of a screen (the warm-up and memory windows are the point's own: peak memory and OOM are exact)
    screen_timed_steps: int = 3
    # points launched together in one batch (SLURM runs a batch's jobs at once; locally they run one by one)
    batch_size: int = 4
    # floor of the relative throughput margin around a prediction (fraction); the model's own error on the
    # measured points of this sweep raises it
    throughput_margin: float = 0.15
    # the share of new points whose error the margins should cover: each margin is the jackknife prediction
    # interval of the model's out-of-sample errors on this sweep at this level (fraction in (0, 1); docs/search.md)
    coverage: float = 0.9
    # floor of the relative memory margin below a prediction (fraction); raised the same way (the memory model's
    # largest shortfall over 240 CPU points was 1.5 %, docs/search.md)
    memory_margin: float = 0.02
    # a screen's throughput upper bound is its fastest step's tokens/s times (1 + this), or more when the promoted
    # points showed the screens to be further off (fraction)
    screen_margin: float = 0.1
    # stop after this many full-window measurements without a change of the frontier (null: no such limit)
    patience: int | None = None


def from_mapping(cls: type[T], data: Mapping[str, Any] | T | None) -> T:
    """One of the frozen sections (:class:`ClusterConfig`, :class:`PlanConfig`, :class:`TimingConfig`) from plain data
    (a composed config's container, a ``spec.json``/``result.json`` of any version, a payload): the schema's
    defaults for the keys not given; an instance is returned as it is.

    Raises:
        TypeError: a key the section does not have (names it).
    """
    if isinstance(data, cls):
        return data
    data = dict(cast("Mapping[str, Any]", data or {}))
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
    if unknown:
        raise TypeError(f"{cls.__name__} has no key {', '.join(unknown)}")
    return cls(**data)
