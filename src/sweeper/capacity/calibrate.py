"""Calibrating the time model on a sweep's measured ``ok`` points, per engine family, checkpointing and precision.

The model (:mod:`sweeper.capacity.timing`) predicts a step as ``overhead_s + FLOPs / (peak × efficiency) +
exposed communication``. For a group of measured points (same engine family: ``ddp`` (DDP or one rank), ``zero``
(DeepSpeed ZeRO-1/2/3), ``fsdp`` (FSDP2); same ``gc``; same ``precision``) the compute part of each step is::

    compute_i = measured step s_i − predicted exposed communication_i     (the host's link, :mod:`.hostcomm`)

and the group's parameters come from those points:

* two or more distinct FLOP counts (e.g. two batch sizes): least squares of ``compute_i = overhead_s + F_i / R``
  (R = FLOP/s achieved, efficiency = R / peak; the overhead is the per-step host cost that does not grow with the
  batch: Python dispatch, the optimizer's per-tensor loop, the Trainer's bookkeeping; clamped at 0);
* otherwise (one FLOP count) the overhead cannot be told from the rate on its own points: the group takes the
  median overhead of the groups that were fitted with two parameters (the per-step host cost is the same kind of
  work in every group of one model and host), and its efficiency is the median of ``F_i / (peak × (compute_i −
  overhead))`` (``fitted``: "rate, overhead borrowed from N group(s)"). Predicting another batch size from one
  point with no overhead at all put every second point of the frontier search's CPU grid 30-70 % off (2026-12-05,
  issue 21); with no two-parameter group (or an overhead as large as a point's compute) the overhead is 0 and the
  efficiency the median of ``F_i / (peak × compute_i)`` (robust to one noisy point).

Precision is part of the group because a CPU's measured matmul peak is not what its training reaches in that dtype:
here the bf16 peak is 4.6 × the fp32 one (AVX-512 BF16) while bf16 autocast steps are slower than fp32 ones (the
casts and elementwise ops dominate a small model). A point is predicted with its own group's numbers, else the
closest group (:func:`Calibration.group_for`: the same family and precision with the other gc; then the same gc
and precision in another family, DDP first; then any group of that precision), else the overall median, else
``plan.efficiency``; ``efficiency_source`` says which. The family comes before gc because an engine's host work is
its own (on the CPU benchmark grid a DDP bf16 point borrowed from a ZeRO-2 bf16 point came out 53 % too slow, while
gc's recomputation is in the FLOPs already; ``benchmarks/calibration_loo.py`` measures both orders side by side: with
a whole group left out, p90 error 22 % against 37 % on a grid with ZeRO-2, 20 % against 18 % on grids of DDP and
FSDP alone). The overhead is used only on the device type it was measured on.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.capacity.arch import Arch, UnknownArchitecture
from sweeper.capacity.hostcomm import HostComm, cached_comm
from sweeper.capacity.states import layout
from sweeper.capacity.timing import comm_time, engine_host_s, step_flops
from sweeper.config.spec import PointSpec

#: Families in the order a missing one borrows from (DDP's numbers are the plainest compute).
FAMILIES = ("ddp", "zero", "fsdp", "autotp", "ulysses")


def family(spec: PointSpec) -> str:
    """The engine family of a point: ``autotp`` (DeepSpeed AutoTP, ``tp > 1``: its own calibration group, since a
    tensor-parallel step runs half-size matmuls and a Python autograd function per sharded layer, neither of which a
    data-parallel point measures), ``ulysses`` (DeepSpeed Ulysses, ``sp > 1``: all-to-alls per layer and
    a shorter sequence per rank, likewise), ``zero`` (DeepSpeed), ``fsdp`` (FSDP2) or ``ddp`` (DDP, or one rank)."""
    if spec.tp > 1:
        return "autotp"
    if spec.sp > 1:
        return "ulysses"
    return "zero" if spec.zero else ("fsdp" if spec.fsdp != "none" else "ddp")


def group_key(fam: str, gc: bool, precision: str) -> str:
    """``"<family> gc=<true|false> <precision>"``: a calibration group's name (the key of
    :attr:`Calibration.groups`; :func:`group_label` says it in the grid's words)."""
    return f"{fam} gc={str(bool(gc)).lower()} {precision}"


#: Each family in the config keys a grid is swept over (``fsdp=none zero=0`` is what runs DDP), and its name.
FAMILY_WORDS = {
    "ddp": ("fsdp=none zero=0", "DDP"),
    "fsdp": ("fsdp=<strategy> zero=0", "FSDP"),
    "zero": ("zero=1|2|3", "DeepSpeed ZeRO"),
    "autotp": ("fsdp=none zero=0|1|2 tp>1", "DeepSpeed AutoTP"),
    "ulysses": ("fsdp=none sp>1", "DeepSpeed Ulysses"),
}


def group_label(key: str) -> str:
    """A :func:`group_key` in the grid's own words, for people: ``"ddp gc=false fp32"`` ->
    ``"fsdp=none zero=0 gc=false precision=fp32 (DDP)"``; a key of another shape is returned as it is."""
    fam, _, rest = key.partition(" ")
    gc, _, precision = rest.partition(" ")
    if fam not in FAMILY_WORDS or not gc.startswith("gc=") or not precision:
        return key
    words, name = FAMILY_WORDS[fam]
    return f"{words} {gc} precision={precision} ({name})"


@dataclass(frozen=True)
class Group:
    """The time model's parameters fitted on one group of points.

    Attributes:
        efficiency: achieved fraction of the dtype peak (recompute included).
        overhead_s: seconds per optimizer step that do not grow with the batch (0 when not fitted).
        n: points fitted on.
        fitted: ``"overhead + rate"`` (two-parameter fit), ``"rate (no overhead)"``, ``"rate, overhead borrowed
            from N group(s)"`` or ``"median"`` (module doc).
    """

    efficiency: float
    overhead_s: float
    n: int
    fitted: str


@dataclass(frozen=True)
class Calibration:
    """A time model fitted on measured points.

    Attributes:
        efficiency: the median of the per-point efficiencies (fraction of the dtype peak), all groups together.
        n: points it was fitted on.
        p10, p90: the spread of the per-point efficiencies.
        peak_source: where the peaks came from (datasheet or measured), from the first point.
        groups: :class:`Group` per :func:`group_key`.
        device_type: ``cpu`` or ``cuda``: where the points ran (the overhead applies there only).
        peaks: the measured peak per precision (FLOP/s, source), for a plan of the same kind of device.
        where: the sweep directory it came from, for the notes ("" when fitted on records given directly).
        device_name: the GPU the points ran on (torch's name; ``""`` for CPU points or when not recorded).
    """

    efficiency: float
    n: int
    p10: float
    p90: float
    peak_source: str
    groups: dict[str, Group] = field(default_factory=dict)
    device_type: str = ""
    peaks: dict[str, tuple[float, str]] = field(default_factory=dict)
    where: str = ""
    device_name: str = ""

    def group_for(self, spec: PointSpec) -> str | None:
        """The key of the group ``spec`` is predicted with (its own, else the closest: module doc's order), or None
        (the overall median)."""
        fam, gc, prec = family(spec), spec.gc, spec.precision
        others = [f for f in FAMILIES if f != fam]
        order = [(fam, gc, prec), (fam, not gc, prec), *[(f, gc, prec) for f in others]]
        order += [(f, not gc, prec) for f in others]
        return next((k for f, g, p in order if (k := group_key(f, g, p)) in self.groups), None)

    def lookup(self, spec: PointSpec, device_type: str) -> tuple[float, float, str]:
        """``(efficiency, overhead_s, efficiency_source)`` for ``spec`` on ``device_type`` (module doc's order)."""
        fam, gc, prec = family(spec), spec.gc, spec.precision
        key = self.group_for(spec)
        where = f" of {self.where}" if self.where else ""
        if key is not None:
            grp = self.groups[key]
            own = key == group_key(fam, gc, prec)
            overhead = grp.overhead_s if device_type == self.device_type else 0.0
            how = "calibrated" if own else f"calibrated, borrowed (no {group_label(group_key(fam, gc, prec))} point)"
            src = f"{how} on {grp.n} {group_label(key)} point(s){where}, {grp.fitted}"
            return grp.efficiency, overhead, src
        return self.efficiency, 0.0, f"calibrated: the overall median of {self.n} point(s){where} (no {prec} group)"


def point_efficiency(spec: PointSpec, metrics: dict[str, Any]) -> float | None:
    """The efficiency of one measured point with no overhead and no communication separated out, or None without a
    step time, a peak or a known architecture."""
    step = metrics.get("step_time_s_median")
    peak = metrics.get("mfu_peak_flops")
    if not step or not peak or step <= 0 or peak <= 0:
        return None
    try:
        arch = Arch.from_config(spec.model_type, spec.model_config)
    except (UnknownArchitecture, KeyError, TypeError, ValueError):
        return None
    flops = step_flops(
        arch, batch=spec.micro_batch, seq_len=spec.seq_len, grad_accum=spec.grad_accum, gc=spec.gc, tp=spec.tp * spec.sp
    )
    return flops / (peak * step)


def _device_type(r: Any) -> str:
    """``cpu`` or ``cuda``: where a record's point ran (``ran.device_type``, else ``env.device_type``; cpu)."""
    for part in ("ran", "env"):
        d = getattr(r, part, None)
        if isinstance(d, dict) and d.get("device_type"):
            return "cuda" if d["device_type"] == "cuda" else "cpu"
    return "cpu"


def load_calibration(sweep_dir: str | Path) -> Calibration:
    """:func:`fit_calibration` of a measured sweep directory's records (``plan.calibrate=<dir>``).

    Raises:
        ValueError: not a sweep directory, or no ``ok`` point with a step time and a peak (the message says which).
    """
    from sweeper.results.collect import collect_records
    from sweeper.results.sweepdir import SweepDir

    sweep = SweepDir.of(Path(sweep_dir).expanduser())
    if not sweep.is_sweep():
        raise ValueError(f"plan.calibrate={sweep_dir}: not a sweep directory (no points/ folder in it)")
    cal = fit_calibration(collect_records(sweep), where=str(sweep_dir))
    if cal is None:
        raise ValueError(f"plan.calibrate={sweep_dir}: no ok point with a measured step time and peak to calibrate on")
    return cal


#: The words an efficiency source carries when its calibration was measured on other hardware or in another
#: precision than the predicted point's (``plan.calibrate_across=true``); the plan's answer line repeats it.
ACROSS = "applied across hardware"


def calibration_mismatch(cal: Calibration, device_type: str, gpu_name: str | None, precisions: set[str]) -> str | None:
    """Why ``cal`` does not describe a plan for ``device_type`` (``cpu``/``cuda``), ``gpu_name`` (the cluster's) in
    ``precisions``, or None when it does: points measured on CPU ranks planning a GPU cluster (or the other way), on
    another GPU type (names compared as the datasheet catalogue resolves them), or in none of the plan's precisions
    (a group of another precision is another dtype's efficiency). ``plan.calibrate_across=true`` applies it anyway."""
    measured = cal.device_type or "cpu"
    if measured != device_type:
        where = "CPU ranks" if measured == "cpu" else f"GPUs ({cal.device_name or 'cuda'})"
        plan = "a GPU cluster" if device_type == "cuda" else "CPU ranks"
        return f"its points ran on {where} and the plan is for {plan}"
    if device_type == "cuda" and gpu_name and cal.device_name:
        from sweeper.results.mfu import gpu_model

        ours, theirs = gpu_model(gpu_name), gpu_model(cal.device_name)
        same = ours == theirs if ours and theirs else gpu_name.strip().lower() == cal.device_name.strip().lower()
        if not same:
            return f"its points ran on {cal.device_name} and the plan is for {gpu_name}"
    measured_precisions = set(cal.peaks) | {key.rsplit(" ", 1)[-1] for key in cal.groups}
    missing = sorted(precisions - measured_precisions)
    if missing:
        return (
            f"it measured precision={','.join(sorted(measured_precisions))} and the plan asks precision="
            f"{','.join(missing)}"
        )
    return None


def _two_flop_counts(points: list[tuple[float, float, float]]) -> bool:
    return len({round(f / p, 12) for f, p, _ in points}) >= 2


def _fit(points: list[tuple[float, float, float]], borrowed: list[float] | None = None) -> Group:
    """Fit one group on ``(FLOPs, peak, compute seconds)`` triples (module doc); ``borrowed``: the overheads
    (seconds) of the groups fitted with two parameters, for a group with one FLOP count."""
    effs = [f / (p * t) for f, p, t in points]
    flops = [f / p for f, p, _ in points]  # seconds at the full peak
    if not _two_flop_counts(points) and borrowed:
        overhead = statistics.median(borrowed)
        if all(t > overhead for _, _, t in points):
            eff = statistics.median(f / (p * (t - overhead)) for f, p, t in points)
            return Group(eff, overhead, len(points), f"rate, overhead borrowed from {len(borrowed)} group(s)")
    if _two_flop_counts(points):
        mx, my = statistics.fmean(flops), statistics.fmean(t for _, _, t in points)
        sxx = sum((x - mx) ** 2 for x in flops)
        slope = sum((x - mx) * (t - my) for x, (_, _, t) in zip(flops, points, strict=True)) / sxx
        overhead = my - slope * mx
        if slope > 0 and overhead >= 0:
            return Group(1.0 / slope, overhead, len(points), "overhead + rate")
        if slope > 0:  # a negative intercept: no overhead, the rate through the origin
            slope = sum(x * t for x, (_, _, t) in zip(flops, points, strict=True)) / sum(x * x for x in flops)
            return Group(1.0 / slope, 0.0, len(points), "rate (no overhead)")
    return Group(statistics.median(effs), 0.0, len(points), "median")


def fit_calibration(
    records: Iterable[Any], comm: HostComm | None = None, where: str = "", select: Any = None
) -> Calibration | None:
    """Fit the time model on the ``ok`` records of a sweep (:class:`sweeper.results.record.Record`).

    Args:
        comm: the link the points ran over (None: this host's cached gloo measurement for their world size; with
            neither, communication is not separated out).
        where: the sweep directory, for ``efficiency_source``.
        select: an optional predicate on a :class:`PointSpec`: only those points are fitted on (a benchmark
            calibrates on its DDP points alone).

    Returns:
        A :class:`Calibration`, or None when no ok point has a step time and a peak.
    """
    by_group: dict[str, list[tuple[float, float, float]]] = {}
    values: list[float] = []
    source, device, name = "", "", ""
    peaks: dict[str, tuple[float, str]] = {}
    for r in records:
        if getattr(r, "status", None) != "ok" or not r.spec:
            continue
        try:
            spec = PointSpec.from_dict(r.spec)
            arch = Arch.from_config(spec.model_type, spec.model_config)
        except (TypeError, UnknownArchitecture, KeyError, ValueError):
            continue
        if select is not None and not select(spec):
            continue
        m = r.metrics or {}
        step, peak = m.get("step_time_s_median"), m.get("mfu_peak_flops")
        if not step or not peak or step <= 0 or peak <= 0:
            continue
        dev = _device_type(r)
        lay = layout(spec, "cuda" if dev == "cuda" else "cpu")
        link = comm or (cached_comm(lay.world) if dev != "cuda" else None)
        comm_s, _, _ = comm_time(
            arch, lay, spec.nodes, spec.grad_accum, link, link, spec.micro_batch * spec.seq_len, spec.gc
        )
        compute = step - (comm_s or 0.0) - engine_host_s(arch, lay, link, spec.grad_accum)  # nothing hides on CPU ranks
        if compute <= 0:
            continue
        flops = step_flops(
            arch,
            batch=spec.micro_batch,
            seq_len=spec.seq_len,
            grad_accum=spec.grad_accum,
            gc=spec.gc,
            tp=spec.tp * spec.sp,
        )
        by_group.setdefault(group_key(family(spec), spec.gc, spec.precision), []).append((flops, peak, compute))
        values.append(flops / (peak * step))
        source = source or str(m.get("mfu_peak_source") or "")
        device = device or dev
        ran = getattr(r, "ran", None)
        name = name or (str(ran.get("device_name") or "") if isinstance(ran, dict) and dev == "cuda" else "")
        peaks.setdefault(spec.precision, (float(peak), str(m.get("mfu_peak_source") or "measured")))
    if not values:
        return None
    values.sort()
    if len(values) >= 2:
        deciles = statistics.quantiles(values, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = values[0]
    two = {k: _fit(v) for k, v in sorted(by_group.items()) if _two_flop_counts(v)}
    borrowed = [g.overhead_s for g in two.values() if g.fitted == "overhead + rate"]
    groups = {k: two.get(k) or _fit(v, borrowed) for k, v in sorted(by_group.items())}
    return Calibration(statistics.median(values), len(values), p10, p90, source, groups, device, peaks, where, name)


def calibrated_efficiency(records: Iterable[Any]) -> Calibration | None:
    """:func:`fit_calibration` of ``records`` with this host's link (the report's calibration line)."""
    return fit_calibration(records)
