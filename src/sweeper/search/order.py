"""The frontier search's decisions, on plain numbers: the order of the predicted fronts, "surely dominated" (skip
or do not promote), the margins from the model's own error, and whether a screen pays.

Throughput is tokens/s per device (higher is better), memory is peak bytes per rank (lower is better), as in the
report (:mod:`sweeper.results.frontier`, whose rule this module reuses: one way to decide domination).

**Order** (:func:`front_order`): non-dominated sorting of the predictions (Deb, Pratap, Agarwal, Meyarivan, "A fast
and elitist multiobjective genetic algorithm: NSGA-II", IEEE Trans. Evol. Comput. 6(2), 2002): front 0 is the
predicted frontier (:func:`sweeper.results.frontier.pareto_frontier` of the predictions, zero-width), front 1 the
frontier of the rest, and so on; inside a front, the larger crowding distance first (NSGA-II section III-B: the
extremes of a front, fastest and smallest, come first, then the points in its sparsest stretches). A point without
a throughput prediction (a CPU precision with no measured peak yet) is put in front 0: it cannot be ranked, and
measuring it is what calibrates its precision.

**Surely dominated** (:func:`surely_dominated`): a point whose throughput is at most ``upper``, whose throughput
interval starts at most at ``low_upper`` (its low end: the report calls two points tied when their intervals
overlap) and whose peak memory is at least ``mem_low`` is off the frontier, under the report's rule, whatever its
real numbers, when a measured point A has ``A.mem <= mem_low`` and ``A.low > upper`` (slower, with no less memory:
final, since if A itself is off the frontier, the frontier point below A that ties or beats A beats this point
too), or when A is on the measured frontier with ``A.mem < mem_low`` and ``low_upper <= A.high`` (tied or slower,
with more memory).
The second holds while A stays on the frontier: a point measured later with less memory, tied with A, takes A off
it, and the frontier point then below may be slower than this one. The search re-checks such skips after every
measurement and measures the point when its witness is gone (:mod:`sweeper.search.driver`).

**Margins** (:func:`margin`): the jackknife prediction interval (Barber, Candès, Ramdas and Tibshirani, "Predictive
inference with the jackknife+", Ann. Statist. 49(1), 2021, section 2; split conformal prediction: Lei, G'Sell,
Rinaldo, Tibshirani and Wasserman, "Distribution-free predictive inference for regression", JASA 113(523), 2018):
the ⌈(n + 1) × coverage⌉-th smallest of the n absolute leave-one-out relative errors of the model on this sweep
covers a new point's error with probability about ``coverage``. The memory margin ranks signed scores of the one
side a skip needs (how far below its prediction a peak came out: ``one_sided``; any conformity score keeps the
guarantee, Lei et al. 2018, section 2.1): the memory model's errors are of one kind and small. The throughput
margin stays two-sided: its standings pool errors of both signs (a group borrowed from another engine can be 50 %
off either way), and a one-sided rank of 2 or 3 such errors lost a frontier point in the replays of 2026-12-05.
:func:`width_floor` is the same rank from below over the measured points' interval widths.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sweeper.results.frontier import pareto_frontier

#: How well a calibration knows a point's own group (:func:`sweeper.search.decide.standing`), best first.
STANDINGS = ("fitted", "one batch size", "borrowed", "another engine", "none")


@dataclass(frozen=True)
class Guess:
    """One unmeasured point as the model predicts it.

    Attributes:
        pid: the point id.
        throughput: predicted tokens/s per device, None when the model has no peak for it yet.
        memory: predicted peak bytes per rank, None when unknown.
    """

    pid: str
    throughput: float | None
    memory: float | None


@dataclass(frozen=True)
class Measured:
    """One point measured over its full window (an ``ok`` record): its throughput interval (tokens/s per device,
    :func:`sweeper.results.frontier.throughput_interval`), its peak bytes, and its median tokens/s per device
    (``median``, None when not given: the interval's width below it is then unknown)."""

    pid: str
    low: float
    high: float
    memory: float
    median: float | None = None


def widths(measured: Sequence[Measured]) -> list[float]:
    """The relative half-width below the median of each measured point's interval, ``1 − low / median`` (a
    fraction; points without a median left out): what :func:`width_floor` ranks."""
    return [1 - a.low / a.median for a in measured if a.median]


def crowding(values: Sequence[tuple[float, float]]) -> list[float]:
    """NSGA-II's crowding distance of each point of one front (Deb et al. 2002, section III-B): per objective, the
    points sorted by it, the two ends infinite, each inner point the gap between its neighbours over the
    objective's range; summed over the objectives."""
    n = len(values)
    dist = [0.0] * n
    for k in range(2 if n else 0):
        idx = sorted(range(n), key=lambda i: values[i][k])
        lo, hi = values[idx[0]][k], values[idx[-1]][k]
        dist[idx[0]] = dist[idx[-1]] = math.inf
        span = hi - lo
        for j in range(1, n - 1):
            if span > 0:
                dist[idx[j]] += (values[idx[j + 1]][k] - values[idx[j - 1]][k]) / span
    return dist


def fronts(guesses: Sequence[Guess]) -> list[list[Guess]]:
    """The predicted fronts, best first (module doc): each the frontier of what the earlier fronts left, by
    :func:`sweeper.results.frontier.pareto_frontier` on the predicted numbers; unpredictable points join front 0.
    Each front is in crowding-distance order (largest first; ties by throughput, unpredictable points by their
    predicted memory, the cheapest first; then point id)."""
    unknown = [g for g in guesses if g.throughput is None or g.memory is None]
    left = [g for g in guesses if g.throughput is not None and g.memory is not None]
    out: list[list[Guess]] = []
    while left:
        on = pareto_frontier([g.throughput for g in left], [g.memory for g in left])
        out.append([g for g, f in zip(left, on, strict=True) if f])
        left = [g for g, f in zip(left, on, strict=True) if not f]
    if unknown:
        out = [unknown + (out[0] if out else []), *out[1:]]
    ordered = []
    for front in out:
        known = [g for g in front if g.throughput is not None and g.memory is not None]
        dist = dict(zip((g.pid for g in known), crowding([(g.throughput, g.memory) for g in known]), strict=True))  # type: ignore[misc]
        ordered.append(sorted(front, key=lambda g: (-dist.get(g.pid, math.inf), -(g.throughput or math.inf),
                                                    _cost(g), g.pid)))  # fmt: skip
    return ordered


def _cost(g: Guess) -> float:
    """Among points the model cannot rank (no throughput yet), the cheapest to measure first: the least memory (the
    smallest batch); any of them calibrates its precision as well. 0 for the others."""
    return (g.memory if g.memory is not None else math.inf) if g.throughput is None else 0.0


def front_order(guesses: Sequence[Guess]) -> list[Guess]:
    """The guesses in measuring order: front by front (:func:`fronts`)."""
    return [g for front in fronts(guesses) for g in front]


def on_frontier(measured: Sequence[Measured]) -> list[bool]:
    """Which measured points are on their frontier (the report's rule, their throughput intervals)."""
    return pareto_frontier([(a.low + a.high) / 2 for a in measured], [a.memory for a in measured],
                           [a.low for a in measured], [a.high for a in measured])  # fmt: skip


def surely_dominated(
    upper: float, mem_low: float, measured: Sequence[Measured], low_upper: float | None = None
) -> Measured | None:
    """The measured point that keeps off the frontier, under the report's rule, any point whose throughput is at
    most ``upper`` (tokens/s per device), whose interval's low end is at most ``low_upper`` (tokens/s per device;
    None: ``upper``) and whose peak is at least ``mem_low`` (bytes), or None (module doc: a faster point with no
    more memory, or a frontier point tied with it with less memory). Among several, the one with the least memory
    (then the fastest): the reason names the strongest witness."""
    front = on_frontier(measured)
    tie = upper if low_upper is None else min(upper, low_upper)
    hits = [a for a, f in zip(measured, front, strict=True)
            if (f and a.memory < mem_low and tie <= a.high) or (a.memory <= mem_low and a.low > upper)]  # fmt: skip
    return min(hits, key=lambda a: (a.memory, -a.high, a.pid)) if hits else None


def margin(
    errors: Sequence[float], floor: float, coverage: float = 0.9, need: int = 1, one_sided: bool = False
) -> float:
    """The relative margin to hold around a prediction (module doc, "Margins"): of the absolute relative errors
    ``errors`` of the model on this sweep (each out of sample: measured / predicted − 1), the ⌈(n + 1) ×
    ``coverage``⌉-th smallest (the largest when n is too small for that rank), never below ``floor`` (fraction);
    infinite (nothing is skipped on that axis) while fewer than ``need`` errors are known: without a measured
    error there is no margin to trust. ``one_sided``: the errors are signed scores of the one side a bound needs
    (how far above its prediction a value came out) and are ranked as they are, not by their absolute value."""
    known = sorted((e if one_sided else abs(e)) for e in errors if math.isfinite(e))
    if len(known) < need:
        return math.inf
    if not known:
        return floor
    rank = min(len(known), math.ceil((len(known) + 1) * coverage))
    return max(floor, known[rank - 1])


def margins_by_standing(
    errors: Sequence[tuple[str, float]], floor: float, coverage: float = 0.9, need: int = 2
) -> dict[str, float]:
    """One throughput margin per standing of a prediction's calibration group (``fitted``, ``one batch size``,
    ``borrowed``: :func:`sweeper.search.decide.standing`), each :func:`margin` of the errors made at that standing
    (Mondrian conformal prediction: Vovk, Gammerman and Shafer, "Algorithmic Learning in a Random World", 2005,
    section 4.5: the coverage holds within each category), so a point whose group is well measured is not held to
    the error of points whose group is not, nor the reverse. A standing with fewer than ``need`` errors has no
    margin to trust: infinite (its points are not skipped on throughput). ``"*"`` holds the pooled margin (logged)."""
    by: dict[str, list[float]] = {}
    for k, e in errors:
        by.setdefault(k, []).append(e)
    pooled = margin([e for _, e in errors], floor, coverage, need)
    return {"*": pooled, **{k: margin(by.get(k, []), floor, coverage, need) for k in STANDINGS}}


def width_floor(widths: Sequence[float], coverage: float = 0.9) -> float:
    """How far below its median a new point's throughput interval can be expected to start, at least (fraction):
    of the relative half-widths below the median (``1 − low / tokens/s``) of the points measured in full on this
    sweep, the ⌊(n + 1) × (1 − ``coverage``)⌋-th smallest, the conformal rank from below (module doc, "Margins");
    0 (no width assumed) while n is too small for that rank (n < 9 at a coverage of 0.9). A point whose median is
    at most ``upper`` then starts at most at ``upper × (1 − width)``: the bound of a tie (:func:`surely_dominated`)."""
    known = sorted(w for w in widths if math.isfinite(w) and w >= 0)
    rank = math.floor((len(known) + 1) * (1 - coverage) + 1e-9)
    return known[rank - 1] if rank >= 1 else 0.0


def screen_pays(saved_s: float | None, overhead_s: float | None, promoted: int, screened: int) -> bool:
    """Whether a short screen is worth its cost for a point (``search.screen=auto``): with p the share of screens
    promoted so far (Laplace's rule of succession, (promoted + 1) / (screened + 2): 0.5 before any), a screen saves
    ``saved_s`` (the timed steps it leaves out, predicted seconds) with probability 1 - p and costs ``overhead_s``
    (a second start-up and warm-up, seconds, measured on this sweep) with probability p. Unknown numbers: screen
    (the screen is what measures them)."""
    if saved_s is None or overhead_s is None:
        return True
    p = (promoted + 1) / (screened + 2)
    return (1 - p) * saved_s > p * overhead_s


def overhead_estimate(samples: Sequence[tuple[float, int, float]]) -> float | None:
    """The per-point seconds that do not scale with the steps (start-up, model build, warm-up compilation, the
    record): the median over measured points of ``wall_time_s - steps x step_time_s_median`` (clamped at 0), from
    ``(wall_time_s, steps run, step_time_s_median)`` triples; None without any."""
    values = [max(0.0, w - n * t) for w, n, t in samples if w and t and n]
    return statistics.median(values) if values else None
