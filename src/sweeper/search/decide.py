"""The frontier search's records and figures: the prediction of a point with the sweep's own calibration, the
``skipped`` record of each decision (reason and numbers), and the cost in point-seconds (docs/search.md).

A ``skipped`` record is written like every record (:func:`sweeper.point.lifecycle.write`: atomically, never over a
final one); an ``ok`` screen it replaces is set aside first (``result.<n>.json``, history kept).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sweeper.capacity.calibrate import Calibration, fit_calibration
from sweeper.capacity.predict import Prediction, predict
from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.lifecycle import Prepared, predicted_for, refuse, write
from sweeper.point.preflight import refusals
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.search.order import Measured, overhead_estimate
from sweeper.search.state import history
from sweeper.units import in_unit

if TYPE_CHECKING:
    from sweeper.search.driver import Point

#: The statuses of a point refused before launch (the gate, the pre-flight, ``prune``): no point-seconds.
REFUSED = ("invalid", "unsupported", "pruned")
#: Prefix of every reason the search writes.
BY = "skipped by search=frontier"


def calibration(records: Iterable[Record | None]) -> Calibration | None:
    """The time model fitted on every ``ok`` record given (screens included: a step time is a step time), or None
    before any."""
    return fit_calibration([r for r in records if r is not None and r.status == "ok"])


def guess(spec: PointSpec, target: Target, cal: Calibration | None) -> Prediction:
    """The model's prediction of ``spec`` on ``target`` with ``cal`` (None: ``plan.calibrate`` or
    ``plan.efficiency``); a failure of the model is a prediction without numbers (never skipped)."""
    try:
        return predict(spec, target, with_max_batch=False, calibration=cal)
    except Exception as e:  # noqa: BLE001 - an unpredictable point is measured, never skipped
        return Prediction(note=f"no prediction: {type(e).__name__}: {e}")


def standing(spec: PointSpec, cal: Calibration | None) -> str:
    """How well ``cal`` knows the group ``spec`` is predicted with (:data:`sweeper.search.order.STANDINGS`):
    ``fitted`` (its own group, measured at two or more FLOP counts: overhead and rate both fitted), ``one batch
    size`` (its own group at one FLOP count: the rate on a borrowed overhead), ``borrowed`` (another group of its
    engine family), ``another engine`` (a group of another engine family, whose host work differs), ``none`` (no
    group: the overall median, or no calibration)."""
    from sweeper.capacity.calibrate import family, group_key

    key = cal.group_for(spec) if cal is not None else None
    if key is None or cal is None:
        return "none"
    if key == group_key(family(spec), spec.gc, spec.precision):
        return "fitted" if cal.groups[key].fitted in ("overhead + rate", "rate (no overhead)") else "one batch size"
    return "borrowed" if key.split(" ")[0] == family(spec) else "another engine"


def loo_errors(
    points: list[Point], recs: dict[str, Record | None], order: list[str], predict: Any = None, last: int = 20
) -> list[tuple[str, float]]:
    """The model's leave-one-out relative throughput errors on this sweep (measured / predicted − 1), each with the
    :func:`standing` of the point's group in that refit: each of the ``last`` latest points measured over their full
    window (``order``: point ids by launch, oldest first) predicted by ``predict`` (``(spec, target,
    calibration)``: :func:`guess` by default) calibrated on every other ``ok`` record (:func:`calibration`), as it
    would have been predicted had it not been measured. Oldest first. ``last`` bounds the refits per decision (each
    refit reads every record)."""
    predict = predict or guess
    ok = {pid: r for pid, r in recs.items() if r is not None and r.status == "ok"}
    by_id = {p.pid: p for p in points}
    full = [pid for pid in order if pid in ok and pid in by_id and not ok[pid].screen
            and (ok[pid].metrics or {}).get("tokens_per_s_per_device")]  # fmt: skip
    out = []
    for pid in full[-last:]:
        p = by_id[pid]
        cal = calibration(r for q, r in ok.items() if q != pid)
        pred = predict(p.spec, p.target, cal).tokens_per_s_per_device
        if pred:
            out.append((standing(p.spec, cal), ok[pid].metrics["tokens_per_s_per_device"] / pred - 1))  # type: ignore[index]
    return out


def _tps(x: float) -> str:
    return f"{x:,.1f} tokens/s per device"


def _mib(x: float) -> str:
    """Bytes as MiB (2**20 bytes, the report's unit on CPU), to the KiB: near-equal peaks stay apart."""
    return in_unit(x, "MiB", 3)


def refuse_many(points: Sequence[tuple[PointSpec, list[str], Target]], sweep: SweepDir) -> list[Record | None]:
    """Step 4 of :func:`sweeper.point.lifecycle.begin` alone, for points that have no final record yet (the search
    does it before it predicts any: a configuration that cannot run is recorded as refused, never skipped for being
    slow): the gate, then the pre-flight together for the points the gate passed. Each refused point's record is
    written as ``begin`` writes it and returned; None for a point that passes (nothing written for it)."""
    sweep = sweep.resolved()
    out: list[Record | None] = [None] * len(points)
    gated = []
    for i, (spec, overrides, target) in enumerate(points):
        try:
            check(spec, target)
            gated.append(i)
        except InvalidPoint as e:
            out[i] = refuse(sweep, spec, overrides, target, e)
    for i, refused in zip(gated, refusals([(points[i][0], points[i][2]) for i in gated]), strict=True):
        if refused is not None:
            out[i] = refuse(sweep, points[i][0], points[i][1], points[i][2], refused)
    return out


def write_skipped(sweep: SweepDir, p: Point, reason: str, detail: dict[str, Any]) -> Record:
    """Write ``p``'s ``skipped`` record (an ``ok`` screen in its place set aside first, named in
    ``search["screen_record"]``)."""
    if sweep.final_status(p.pid):
        current = sweep.read_record(p.pid)
        if not (current.screen and current.status == "ok"):
            return current  # decided already (a resumed search): the record stays
        detail["screen_record"] = f"result.{len(list(sweep.point(p.pid).glob('result.*.json')))}.json"
        sweep.set_aside(p.pid)
    base = Prepared(sweep, p.pid, list(p.overrides), p.spec, p.target).base({})
    record = Record(status="skipped", reason=reason, predicted=predicted_for(p.spec, p.target), search=detail, **base)
    return write(sweep, record)


def skip_predicted(
    sweep: SweepDir,
    p: Point,
    pred: Prediction,
    measured: list[Measured],
    mt: float,
    mm: float,
    width: float = 0.0,
    standing: str = "",
) -> Record | None:
    """Skip ``p`` when it is predicted not to fit with margin ``mm`` (its predicted device bytes less ``mm`` still
    above the usable capacity), or predicted dominated with margins (``mt`` on throughput, ``mm`` on memory;
    fractions) by a measured point (:func:`sweeper.search.order.surely_dominated`); ``width`` (fraction): the
    narrowest relative half-width below its median the point's interval is expected to have
    (:func:`sweeper.search.order.width_floor`), so its low end is at most the throughput bound less that;
    ``standing``: the prediction's, named in the reason. Returns the record written, or None."""
    cap, dev = pred.device_mem_bytes, pred.device_bytes
    if pred.fits is False and cap and dev and math.isfinite(mm) and dev * (1 - mm) > cap * (1 - pred.margin):
        usable = cap * (1 - pred.margin)
        reason = (f"{BY}: predicted not to fit: {_mib(dev)} per device, {_mib(dev * (1 - mm))} with the memory "
                  f"margin {mm:.1%}, above the usable {_mib(usable)} (cluster.gpu_mem_gib less plan.memory_margin "
                  f"{pred.margin:.0%}); measure it with search=grid")  # fmt: skip
        detail = {"decision": "predicted-no-fit", "device_bytes": dev, "usable_bytes": usable, "memory_margin": mm}
        return write_skipped(sweep, p, reason, detail)
    t, m = pred.tokens_per_s_per_device, pred.peak_bytes
    if not t or not m or not math.isfinite(mt) or not math.isfinite(mm):
        return None
    from sweeper.search.order import surely_dominated

    upper, low = t * (1 + mt), m * (1 - mm)
    low_upper = upper * (1 - width)
    by = surely_dominated(upper, low, measured, low_upper)
    if by is None:
        return None
    slower = by.memory <= low and by.low > upper  # else tied with a frontier point of less memory, or slower
    of = f", the margin of {standing!r} predictions" if standing else ""
    bound = f"at most {_tps(upper)} (predicted {t:,.1f} + {mt:.1%}{of})"
    if not slower and low_upper < upper:
        bound += (f", its interval starting at most at {_tps(low_upper)} (the narrowest interval measured on this "
                  f"sweep reaches {width:.1%} below its median)")  # fmt: skip
    relation = (f"slower than {by.pid} with no less memory" if slower else
                f"tied with {by.pid} or slower (the report ties points whose intervals overlap) with more memory, "
                f"and {by.pid} is on the measured frontier")  # fmt: skip
    reason = (f"{BY}: predicted dominated by point {by.pid}: {bound} with at least {_mib(low)} (predicted "
              f"{_mib(m)} - {mm:.1%}), while {by.pid} measured {by.low:,.1f}-{by.high:,.1f} tokens/s per device "
              f"with {_mib(by.memory)}: {relation}; measure it with search=grid")  # fmt: skip
    detail = {"decision": "predicted-dominated", "dominated_by": by.pid, "upper_tokens_per_s_per_device": upper,
              "low_upper_tokens_per_s_per_device": low_upper, "mem_low_bytes": low, "throughput_margin": mt,
              "width_floor": width, "memory_margin": mm, "by_low": by.low, "by_high": by.high,
              "by_peak_bytes": by.memory}  # fmt: skip
    return write_skipped(sweep, p, reason, detail)


def skip_screen(sweep: SweepDir, p: Point, screen: Record, upper: float, sm: float, by: Measured) -> Record:
    """Skip a screened point whose upper bound ``upper`` (its screen's fastest tokens/s per device, plus the screen
    margin ``sm``) at its measured peak is dominated by ``by``."""
    m = screen.metrics or {}
    steps = m.get("timed_steps")
    reason = (f"{BY}: screened with a short window ({steps} timed steps): at most {_tps(upper)} (its fastest step + "
              f"{sm:.1%}) at a measured peak of {_mib(m.get('peak_mem_bytes') or 0)}, dominated by point {by.pid} "
              f"({by.low:,.1f}-{by.high:,.1f} tokens/s per device with {_mib(by.memory)}); not measured in full: "
              "the screen is in the point's result.<n>.json")  # fmt: skip
    detail = {"decision": "screen-dominated", "dominated_by": by.pid, "upper_tokens_per_s_per_device": upper,
              "screen_margin": sm, "screen_peak_mem_bytes": m.get("peak_mem_bytes"),
              "screen_tokens_per_s_per_device": m.get("tokens_per_s_per_device"), "screen_timed_steps": steps,
              "by_low": by.low, "by_high": by.high, "by_peak_bytes": by.memory}  # fmt: skip
    return write_skipped(sweep, p, reason, detail)


def skip_stopped(sweep: SweepDir, p: Point, pred: Prediction, patience: int) -> Record:
    """Skip a point left when the search stopped on ``search.patience``."""
    t = pred.tokens_per_s_per_device
    said = f"predicted {_tps(t)}" if t else "no throughput prediction"
    reason = (
        f"{BY}: the search stopped after {patience} full measurement(s) without a frontier change "
        f"(search.patience={patience}) before measuring it ({said}); raise search.patience or use search=grid"
    )
    return write_skipped(sweep, p, reason, {"decision": "stopped", "patience": patience,
                                            "predicted_tokens_per_s_per_device": t})  # fmt: skip


def cost(sweep: SweepDir, points: list[Point], recs: dict[str, Record | None], cal: Calibration | None) -> dict:
    """The search's cost figures: ``point_seconds`` (every record's ``wall_time_s``, screens set aside included),
    ``model_grid_point_seconds`` (every point of the grid by the model: the per-point overhead measured on this
    sweep plus its steps x its predicted step time), counts of points measured in full, screened, skipped and
    refused before launch (:data:`REFUSED`)."""
    spent, samples, screened, steps = 0.0, [], 0, {}
    for p in points:
        r = recs.get(p.pid)
        older = history(sweep, p.pid)
        spent += sum(h.wall_time_s or 0.0 for h in older) + ((r.wall_time_s or 0.0) if r else 0.0)
        screened += any(h.screen for h in older) or bool(r is not None and r.screen)
        if r is not None and r.status == "ok" and r.wall_time_s and (r.metrics or {}).get("step_time_s_median"):
            samples.append((r.wall_time_s, PointSpec.from_dict(r.spec).total_steps, r.metrics["step_time_s_median"]))
        step = guess(p.spec, p.target, cal).step_time_s
        if step:
            steps[p.pid] = step
    overhead = overhead_estimate(samples) or 0.0
    typical = statistics.median(steps.values()) if steps else 0.0
    model = sum(overhead + p.spec.total_steps * steps.get(p.pid, typical) for p in points)
    skipped = sum(1 for r in recs.values() if r is not None and r.status == "skipped")
    refused = sum(1 for r in recs.values() if r is not None and r.status in REFUSED)
    full = sum(1 for r in recs.values() if r is not None and r.status != "skipped" and r.wall_time_s is not None)
    return {"grid_points": len(points), "measured_full": full, "screened": screened, "skipped": skipped,
            "refused": refused, "point_seconds": spent, "model_grid_point_seconds": model,
            "overhead_s": overhead}  # fmt: skip


def cost_line(c: dict[str, Any]) -> str:
    """One sentence of :func:`cost`'s figures (the report's and the terminal's first line of a search)."""
    if not c:
        return "no cost figures"
    model = c.get("model_grid_point_seconds") or 0.0
    ratio = f" ({c['point_seconds'] / model:.0%} of it)" if model else ""
    refused = f", {c['refused']} refused before launch" if c.get("refused") else ""
    return (f"ran {c['measured_full']} of {c['grid_points']} point(s) to a final record ({c['screened']} screened "
            f"first, {c['skipped']} skipped{refused}) in {c['point_seconds']:,.0f} point-seconds; the full grid "
            f"would have cost {model:,.0f} point-seconds by the model{ratio}")  # fmt: skip
