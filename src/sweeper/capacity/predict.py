"""One point's prediction: memory (:mod:`sweeper.capacity.memory`) and time (:mod:`sweeper.capacity.timing`)
together, for the target it would run on. Used by ``python -m sweeper.plan``, by every record (``Record.predicted``)
and by the gate's pruning rule. Never raises for a point: what cannot be predicted is None with the reason in ``note``.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeper.capacity.arch import Arch, UnknownArchitecture
from sweeper.capacity.calibrate import ACROSS, Calibration, calibration_mismatch, load_calibration
from sweeper.capacity.hostcomm import HostComm, cached_comm
from sweeper.capacity.memory import MemoryEstimate, estimate_memory
from sweeper.capacity.offload import offload_of
from sweeper.capacity.optimizers import OptimizerModel, UnknownOptimizer
from sweeper.capacity.states import ModelStates, layout, model_states, states_for
from sweeper.capacity.timing import NCCL_STEP_LATENCY_S, estimate_time
from sweeper.config.schema import PlanConfig
from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.results.mfu import gpu_peak
from sweeper.units import GIB, peak_text, percent

#: A stand-in optimizer without state: the parameter and gradient bytes of a point whose optimizer is unknown.
NO_STATE = OptimizerModel("unknown", "sgd", 0, None, 0, "no state counted")
#: Where an offloaded state lives (:mod:`sweeper.capacity.offload`): the time model does not cover either.
OFFLOADED = frozenset({"cpu", "nvme"})
#: The largest micro-batch :func:`max_batch_size` considers (samples).
MAX_BATCH = 1 << 16


def plan_settings(spec: PointSpec) -> PlanConfig:
    """``spec.plan``: capacity planning's assumptions (:class:`~sweeper.config.schema.PlanConfig`)."""
    return spec.plan


@dataclass(frozen=True)
class Prediction:
    """The memory/time model's numbers for one point on one target. Bytes are bytes; times are seconds.

    Attributes:
        peak_bytes: predicted peak tensor bytes per rank (GPU: ``max_memory_allocated``; CPU: MemTracker's peak).
        device_bytes: what must fit on the device (GPU: peak × (1 + fragmentation) + CUDA context + NCCL).
        device_mem_bytes: capacity per device (``cluster.gpu_mem_gib``), None when unknown.
        margin: ``plan.memory_margin`` used for ``fits``.
        fits: ``device_bytes <= device_mem_bytes × (1 − margin)``; None when the capacity is unknown, or the
            optimizer is one the model does not know (every memory number that depends on it is then None, the
            parameter and gradient bytes are still given; ``note`` says which optimizer and why).
        peak_phase: ``forward-backward`` or ``end of backward`` (sweeper.capacity.memory.PHASE_*).
        param_bytes_per_rank, grad_bytes_per_rank, optimizer_state_bytes_per_rank: model states (as measured).
        terms: the breakdown of the peak, bytes (GPU-only terms left out on CPU), plus the GPU overheads.
        host_bytes_per_node: offloaded states in host memory per node (bytes per rank × ``ranks_per_node``;
            pinned by default; 0 without offload); None when unknown (NVMe offload, unknown optimizer).
        host_mem_bytes: host memory per node (``cluster.host_mem_gib`` × 2**30 bytes), None when unknown.
        host_fits: ``host_bytes_per_node <= host_mem_bytes × (1 − margin)``; None when either is unknown.
        max_per_device_batch_size: largest micro-batch that fits (None: capacity unknown; 0: none fits).
        step_time_s, tokens_per_s_per_device, mfu, compute_s, comm_s: the time model's numbers (None without a
            peak); ``comm_s`` None also when the bandwidth is unknown.
        efficiency, efficiency_source: the efficiency used and where it comes from.
        peak_flops, peak_source: the device peak used (FLOP/s) and its source.
        train_days, gpu_hours: time to train ``train_tokens`` on ``world_size`` devices.
        note: why a number is missing, or None.
    """

    peak_bytes: int | None = None
    device_bytes: int | None = None
    device_mem_bytes: int | None = None
    margin: float = 0.0
    fits: bool | None = None
    peak_phase: str | None = None
    param_bytes_per_rank: int | None = None
    grad_bytes_per_rank: int | None = None
    optimizer_state_bytes_per_rank: int | None = None
    terms: dict[str, int] = field(default_factory=dict)
    host_bytes_per_node: int | None = None
    host_mem_bytes: int | None = None
    host_fits: bool | None = None
    max_per_device_batch_size: int | None = None
    step_time_s: float | None = None
    tokens_per_s_per_device: float | None = None
    mfu: float | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    efficiency: float | None = None
    efficiency_source: str | None = None
    peak_flops: float | None = None
    peak_source: str | None = None
    train_days: float | None = None
    gpu_hours: float | None = None
    note: str | None = None

    def to_record(self) -> dict[str, Any]:
        """Flat JSON-able dict for ``Record.predicted`` (terms as ``<term>_bytes``; the row prefixes
        ``predicted_``)."""
        out = {k: v for k, v in asdict(self).items() if k != "terms"}
        out.update({f"{k}_bytes": v for k, v in self.terms.items()})
        return out


def _peak(
    spec: PointSpec, target: Target, measured: float | None, measured_source: str | None, cal: Calibration | None
) -> tuple:
    if measured:
        return measured, measured_source or "measured"
    if target.device_type != "cuda":
        if cal is not None and cal.device_type == "cpu" and spec.precision in cal.peaks:
            flops, source = cal.peaks[spec.precision]
            return flops, f"{source} (from the calibrating sweep {cal.where})"
        return None, "no datasheet peak for a CPU: throughput is predicted after the run, from its measured peak"
    name = target.gpu_name or target.cluster.gpu_name
    if not name:
        return None, "the cluster names no gpu_name: no peak FLOP/s, so no throughput prediction"
    p = gpu_peak(name, spec.precision)
    return p.flops, p.source


@functools.lru_cache(maxsize=8)
def _calibration(where: str | None) -> Calibration | None:
    """The calibration of the sweep directory ``plan.calibrate`` names (read once per process), or None."""
    return load_calibration(where) if where else None


def _links(spec: PointSpec, target: Target, device: str, overlap: float) -> tuple:
    """``(intra-node link, inter-node link, overlap)`` of the time model (:mod:`sweeper.capacity.timing`): a GPU
    cluster's bandwidths from its config with NCCL's per-step latency; CPU ranks on this host: the measured gloo
    cost (:func:`sweeper.capacity.hostcomm.cached_comm`) unless the cluster config gives a bandwidth, and no
    overlap (gloo computes on the ranks' own cores)."""
    cluster = target.cluster
    bws = (cluster.intra_node_bandwidth_gb_s, cluster.inter_node_bandwidth_gb_s)
    if device == "cpu" and bws[0] is None:
        host = cached_comm(spec.ranks_per_node) if spec.nodes <= 1 else None
        return host, None, 0.0
    links = [
        HostComm(NCCL_STEP_LATENCY_S[k], bw, f"cluster.{k}_node_bandwidth_gb_s") if bw else None
        for k, bw in zip(("intra", "inter"), bws, strict=True)
    ]
    return links[0], links[1], overlap if device == "cuda" else 0.0


def resolve_auto_batch(spec: PointSpec, target: Target) -> tuple[PointSpec, str | None]:
    """A ``per_device_batch_size=auto`` spec at the largest batch predicted to fit on ``target`` (1 when none does or
    the model cannot say), with a note saying so; any other spec unchanged, with no note. In a plan and in a
    prediction ``auto`` is the model's answer; a sweep searches it with real trials (``docs/batch-search.md``)."""
    if not spec.batch_search:
        return spec, None
    try:
        best = max_batch_size(spec.with_batch(1), target)
    except Exception:  # noqa: BLE001 - a point the gate refuses may not be modelled: predicted at 1
        best = None
    if best:
        return spec.with_batch(best), f"per_device_batch_size=auto: the largest batch predicted to fit ({best})"
    if best == 0:
        return spec.with_batch(1), "per_device_batch_size=auto: no batch is predicted to fit (predicted at 1)"
    return spec.with_batch(
        1
    ), "per_device_batch_size=auto: the largest batch is unknown without a device memory or a model (predicted at 1)"


def states_floor_bytes(st: ModelStates) -> int | None:
    """A lower bound of a rank's device peak (bytes) from its model states alone: parameters, gradients (DeepSpeed:
    its gradient partitions at the step) and optimizer state, all alive together at the optimizer step, whatever
    the activations. None when part of them is offloaded (where they live then is the memory model's to say)."""
    if st.params_offload != "none" or st.optimizer_offload != "none":
        return None
    grads = st.grad_bytes if st.grad_bytes is not None else st.step_grad_bytes
    return st.param_bytes + grads + st.optimizer_state_bytes


def _fits(device_bytes: int, capacity: int | None, margin: float) -> bool | None:
    return None if capacity is None else device_bytes <= capacity * (1.0 - margin)


def host_capacity_bytes(target: Target) -> int | None:
    """Host memory per node from the cluster config (``host_mem_gib`` × 2**30 bytes), or None."""
    gib = target.cluster.host_mem_gib
    return int(float(gib) * GIB) if gib else None


def _memory(spec: PointSpec, arch: Arch, device: str, settings: PlanConfig, batch: int | None = None) -> MemoryEstimate:
    return estimate_memory(
        spec,
        arch,
        device,
        batch=batch,
        fragmentation=settings.fragmentation,
        cuda_context_bytes=int(settings.cuda_context_gib * GIB),
        nccl_bytes=int(settings.nccl_gib * GIB),
    )


def capacity_bytes(target: Target) -> int | None:
    """Device memory per rank from the cluster config (``gpu_mem_gib`` × 2**30 bytes), or None."""
    gib = target.cluster.gpu_mem_gib
    return int(float(gib) * GIB) if gib else None


def predict(
    spec: PointSpec,
    target: Target,
    *,
    measured_peak_flops: float | None = None,
    peak_source: str | None = None,
    with_max_batch: bool = True,
    calibration: Calibration | None = None,
) -> Prediction:
    """Predict ``spec`` on ``target`` (device type, GPU name, ``target.cluster``'s memory and bandwidths).

    Args:
        measured_peak_flops, peak_source: a measured device peak (FLOP/s) to use instead of the datasheet (CPU
            points, after their run).
        with_max_batch: also search the largest micro-batch that fits (a few dozen memory evaluations).
        calibration: the time model's calibration (:mod:`sweeper.capacity.calibrate`); default: the sweep directory
            ``plan.calibrate`` names, else none (``plan.efficiency``).

    Returns:
        A :class:`Prediction`; never raises for an unknown architecture, device or missing capacity (the numbers
        are None and ``note`` says why).
    """
    settings = plan_settings(spec)
    try:
        arch = Arch.from_config(spec.model_type, spec.model_config)
        arch.tp_param_shapes(spec.tp)  # a tensor-parallel layout the model does not count: unknown, not guessed
    except (UnknownArchitecture, KeyError, TypeError, ValueError) as e:
        return Prediction(margin=settings.memory_margin, note=str(e))
    spec, auto_note = resolve_auto_batch(spec, target)
    device = "cuda" if target.device_type == "cuda" else "cpu"
    capacity, host_capacity = capacity_bytes(target), host_capacity_bytes(target)
    notes = [auto_note] if auto_note else []
    out: dict[str, Any] = dict(
        device_mem_bytes=capacity,
        host_mem_bytes=host_capacity,
        margin=settings.memory_margin,
        efficiency=settings.efficiency,
        efficiency_source="plan.efficiency",
    )
    try:
        mem: MemoryEstimate | None = _memory(spec, arch, device, settings)
    except UnknownArchitecture as e:  # a mixture of experts: its states are exact, what it saves is unknown
        mem = None
        notes.append(f"{e}: peak memory, fit and throughput unknown (never pruned); the model states are counted")
        try:
            st = states_for(spec, arch, layout(spec, device))
            out.update(
                param_bytes_per_rank=st.param_bytes,
                grad_bytes_per_rank=st.grad_bytes,
                optimizer_state_bytes_per_rank=st.optimizer_state_bytes,
            )
            floor = states_floor_bytes(st)
            if floor is not None and _fits(floor, capacity, settings.memory_margin) is False:
                out["fits"] = False  # a lower bound past the device: no activation count can make it fit
                notes.append(
                    f"does not fit whatever its activations: the model states alone, {peak_text(floor)} per rank "
                    f"(parameters, gradients and optimizer state, all alive at the optimizer step), exceed "
                    f"{percent(1 - settings.memory_margin, 0)} of the device's {peak_text(capacity or 0)}"
                )
        except UnknownOptimizer as why:
            notes.append(f"{why}: optimizer state unknown")
    except UnknownOptimizer as e:
        mem = None
        notes.append(f"{e}: memory not predicted, fits unknown (never pruned)")
        # the parameters and gradients do not depend on the optimizer: still given
        st = model_states(arch, layout(spec, device), NO_STATE)
        out.update(param_bytes_per_rank=st.param_bytes, grad_bytes_per_rank=st.grad_bytes)
    if mem is not None:
        out.update(_memory_numbers(spec, mem, device, capacity, host_capacity, settings.memory_margin, notes))
        if with_max_batch and capacity is not None:
            out["max_per_device_batch_size"] = max_batch_size(spec, target, arch=arch)
    cal = calibration if calibration is not None else _calibration(settings.calibrate)
    peak, source = _peak(spec, target, measured_peak_flops, peak_source, cal)
    out["peak_source"] = source
    offloaded = (
        device == "cuda" and mem is not None and OFFLOADED & {mem.states.params_offload, mem.states.optimizer_offload}
    )
    if peak and offloaded:
        # the host<->device copies and the optimizer step on the host CPU (DeepSpeedCPUAdam, FSDP's CPU step) are
        # not in the time model: a number here would be the un-offloaded point's, too fast by an unknown factor
        notes.append("offload: the host-device copies and the host CPU's optimizer step are not in the time model, so "
                     "throughput and days are unknown")  # fmt: skip
    elif peak and not arch.experts:  # a mixture of experts: no time model (said with its memory above)
        intra, inter, overlap = _links(spec, target, device, settings.comm_overlap)
        efficiency, overhead, out["efficiency_source"] = (
            cal.lookup(spec, device) if cal is not None else (settings.efficiency, 0.0, "plan.efficiency")
        )
        if cal is not None:
            across = calibration_mismatch(cal, device, target.gpu_name or target.cluster.gpu_name, {spec.precision})
            if across:  # only with plan.calibrate_across=true (the plan refuses it otherwise): said with the number
                out["efficiency_source"] += f"; {ACROSS}: {across} (plan.calibrate_across=true)"
        out["efficiency"] = efficiency
        t = estimate_time(
            arch,
            layout(spec, device),
            batch=spec.micro_batch,
            seq_len=spec.seq_len,
            grad_accum=spec.grad_accum,
            gc=spec.gc,
            nodes=spec.nodes,
            peak_flops=peak,
            efficiency=efficiency,
            comm_overlap=overlap,
            intra=intra,
            inter=inter,
            overhead_s=overhead,
        )
        world = spec.ranks_per_node * spec.nodes
        seconds = spec.train_tokens / (t.tokens_per_s_per_device * world)
        out.update(
            peak_flops=peak,
            step_time_s=t.step_s,
            tokens_per_s_per_device=t.tokens_per_s_per_device,
            mfu=t.mfu,
            compute_s=t.compute_s,
            comm_s=t.comm_s,
            train_days=seconds / 86400.0,
            gpu_hours=seconds * world / 3600.0,
        )
        if t.comm_s is None:
            notes.append("no bandwidth for this cluster: communication not modelled")
    else:
        notes.append(source)
    out["note"] = "; ".join(notes) or None
    return Prediction(**out)


def _memory_numbers(
    spec: PointSpec,
    mem: MemoryEstimate,
    device: str,
    capacity: int | None,
    host_capacity: int | None,
    margin: float,
    notes: list[str],
) -> dict[str, Any]:
    """The :class:`Prediction` fields of one memory estimate; appends to ``notes`` what is unknown and why."""
    terms = {k: t.bytes for k, t in mem.terms.items() if device == "cuda" or not t.gpu_only}
    terms.update(mem.overhead)
    if capacity is None:
        notes.append("no device memory known (cluster.gpu_mem_gib): fits not decided")
    st = mem.states
    if st.optimizer.note:
        notes.append(st.optimizer.note)
    off = offload_of(spec.fsdp, spec.zero, spec.fsdp_config, spec.deepspeed_config)
    notes.extend(off.notes)
    if off.any and device != "cuda":
        notes.append("offload on a CPU device: host and device are one memory, the offloaded states stay in the peak")
    host = None if mem.host_bytes is None else mem.host_bytes * spec.ranks_per_node
    if mem.host_bytes is None:
        notes.append("states offloaded to NVMe: on neither the device nor the host; DeepSpeed's pinned swap buffers "
                     "are not modelled, so the host fit is unknown")  # fmt: skip
    elif host and host_capacity is None:
        notes.append("no host memory known (cluster.host_mem_gib): host fit not decided")
    return dict(
        peak_bytes=mem.peak_bytes,
        device_bytes=mem.device_bytes,
        fits=_fits(mem.device_bytes, capacity, margin),
        peak_phase=mem.peak_phase,
        param_bytes_per_rank=st.param_bytes,
        grad_bytes_per_rank=st.grad_bytes,
        optimizer_state_bytes_per_rank=st.optimizer_state_bytes,
        terms=terms,
        host_bytes_per_node=host,
        host_fits=None if host is None else _fits(host, host_capacity, margin),
    )


def max_batch_size(spec: PointSpec, target: Target, *, arch: Arch | None = None) -> int | None:
    """The largest micro-batch per device (samples) whose predicted ``device_bytes`` fits the target's device memory
    with ``plan.memory_margin`` held back: bisection over ``1 … MAX_BATCH`` (the peak grows with the batch).

    Returns:
        The batch; 0 when not even one sample fits; None when the device memory, the architecture or the optimizer
        is unknown.
    """
    capacity = capacity_bytes(target)
    if capacity is None:
        return None
    if arch is None:
        try:
            arch = Arch.from_config(spec.model_type, spec.model_config)
        except (UnknownArchitecture, KeyError, TypeError, ValueError):
            return None
    settings = plan_settings(spec)
    device = "cuda" if target.device_type == "cuda" else "cpu"

    def fits(b: int) -> bool:
        mem = _memory(spec, arch, device, settings, batch=b)
        return bool(_fits(mem.device_bytes, capacity, settings.memory_margin))

    try:
        one = fits(1)
    except UnknownOptimizer:
        return None
    if not one:
        return 0
    lo, hi = 1, 2
    while hi <= MAX_BATCH and fits(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        return MAX_BATCH
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
