"""Calibrating the time model's efficiency on a sweep's measured ``ok`` points.

For each ``ok`` point with a measured step time and a device peak, the efficiency that would have predicted its step
exactly is::

    efficiency_i = FLOPs one device did per optimizer step (recompute included) / (peak FLOP/s × measured step s)

that is the point's hardware FLOP utilisation (communication not separated out: on one node it overlaps the
backward pass). The calibrated value is the median over the points (robust to one noisy point), reported with the
10th–90th percentile spread and the number of points, ready to pass back as ``plan.efficiency=``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sweeper.capacity.arch import Arch, UnknownArchitecture
from sweeper.capacity.timing import step_flops
from sweeper.config.spec import PointSpec


@dataclass(frozen=True)
class Calibration:
    """An efficiency fitted on measured points.

    Attributes:
        efficiency: the median of the per-point efficiencies (fraction of the dtype peak).
        n: points it was fitted on.
        p10, p90: the spread of the per-point efficiencies.
        peak_source: where the peaks came from (datasheet or measured), from the first point.
    """

    efficiency: float
    n: int
    p10: float
    p90: float
    peak_source: str


def point_efficiency(spec: PointSpec, metrics: dict[str, Any]) -> float | None:
    """The efficiency of one measured point (see the module doc), or None without a step time, a peak or a known
    architecture."""
    step = metrics.get("step_time_s_median")
    peak = metrics.get("mfu_peak_flops")
    if not step or not peak or step <= 0 or peak <= 0:
        return None
    try:
        arch = Arch.from_config(spec.model_type, spec.model_config)
    except (UnknownArchitecture, KeyError, TypeError, ValueError):
        return None
    flops = step_flops(arch, batch=spec.micro_batch, seq_len=spec.seq_len, grad_accum=spec.grad_accum, gc=spec.gc)
    return flops / (peak * step)


def calibrated_efficiency(records: Iterable[Any]) -> Calibration | None:
    """Fit the efficiency on the ``ok`` records of a sweep (:class:`sweeper.results.record.Record`).

    Returns:
        A :class:`Calibration`, or None when no ok point has a step time and a peak.
    """
    values: list[float] = []
    source = ""
    for r in records:
        if getattr(r, "status", None) != "ok" or not r.spec:
            continue
        try:
            spec = PointSpec.from_dict(r.spec)
        except TypeError:
            continue
        eff = point_efficiency(spec, r.metrics or {})
        if eff is not None:
            values.append(eff)
            source = source or str((r.metrics or {}).get("mfu_peak_source") or "")
    if not values:
        return None
    values.sort()
    if len(values) >= 2:
        deciles = statistics.quantiles(values, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = values[0]
    return Calibration(statistics.median(values), len(values), p10, p90, source)
