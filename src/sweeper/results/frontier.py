"""The Pareto frontier of throughput (higher is better) against peak memory (lower is better), with ties.

Throughput is measured with noise, so each point's throughput is an interval, not a number: from the 95 %
confidence interval of its median step time (order statistics, :mod:`sweeper.results.stats`),
``[tokens/s x median / ci95_high, tokens/s x median / ci95_low]`` (tokens/s per device at the interval's slow and
fast ends; the record's ``step_time_s_ci95_low``, ``step_time_s_median``, ``step_time_s_ci95_high``). A record
without that interval (written before it existed) falls back to its step-time spread, ``[tokens/s x median / p90,
tokens/s x median / p10]``; with fewer than 3 timed steps, or without p10/p90 either, the interval is zero-width,
``[tokens/s, tokens/s]``. Memory (peak bytes) is compared exactly: it does not vary from run to run on CPU
(MemTracker) and barely on CUDA (allocator).

The interval of the median says where the median step time would be if the point were measured again and again;
the p10-p90 spread says how much single steps vary, which does not shrink with more steps. With the interval, two
points are told apart once their medians are known well enough to differ (``timed_steps=auto`` times steps until
they are).

Point A is *faster* than B when A's interval lies entirely above B's (``A.low > B.high``: with the same tokens per
step, A's step-time interval lies entirely below B's). When the intervals overlap (touching counts), the
two are *tied* on throughput: the noise cannot tell them apart, whatever their medians say.

A *dominates* B when

- A is faster and uses no more memory, or
- A and B are tied on throughput and A uses strictly less memory.

Two points tied on throughput with exactly the same memory do not dominate each other. The frontier is built from
the least memory up: a point is on it unless a point already on it (less memory), or a point with the same memory,
dominates it. A point dominated only by points that are themselves off the frontier stays on it: "tied" is not
transitive, so without this rule a noisy point with a wide interval (tied with a slow point below it and with a
fast point above it, and dominated by the slow one) would take the fast one off the frontier with it, and a chain
of such ties could leave the slowest point alone on the frontier. With "faster" alone (zero-width intervals)
domination is transitive and the two readings agree: this is then the classic rule, at least as fast with no more
memory and strictly better in one.

The medians never decide between tied points: of two points whose intervals overlap, the one with more memory is
never on the frontier while the other is (with the same memory neither dominates the other); the only tie-break is
memory, which does not change between runs. A sweep with at least one valid point has a non-empty frontier (the fastest
interval among the least-memory points is never dominated).

A point with a missing or non-finite throughput or memory (None, NaN, inf) is never on the frontier, never
dominates another point and is tied with none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: Fewest timed steps whose p10/p90 count as a spread (the fallback of older records); fewer: a zero-width interval.
MIN_TIMED_STEPS = 3
#: The step-time columns of the interval: the median's 95 % confidence interval, and the older p10-p90 fallback.
CI_COLUMNS = ("step_time_s_ci95_low", "step_time_s_ci95_high")
SPREAD_COLUMNS = ("step_time_s_p10", "step_time_s_p90")


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _intervals(
    throughput: Sequence[float | None],
    memory: Sequence[float | None],
    low: Sequence[float | None] | None,
    high: Sequence[float | None] | None,
) -> list[tuple[float, float, float] | None]:
    """Per point (low, high, memory), or None when the point cannot take part. A missing bound is the point's
    throughput; bounds are widened to contain the throughput."""
    throughput, memory = list(throughput), list(memory)  # by position, also for a pandas Series
    low, high = (None if b is None else list(b) for b in (low, high))
    n = len(throughput)
    for name, seq in (("memory", memory), ("low", low), ("high", high)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"throughput has {n} values but {name} has {len(seq)}")
    out: list[tuple[float, float, float] | None] = []
    for i in range(n):
        t, m = _finite(throughput[i]), _finite(memory[i])
        if t is None or m is None:
            out.append(None)
            continue
        lo = _finite(low[i]) if low is not None else None
        hi = _finite(high[i]) if high is not None else None
        out.append((min(t, lo if lo is not None else t), max(t, hi if hi is not None else t), m))
    return out


def pareto_frontier(
    throughput: Sequence[float | None],
    memory: Sequence[float | None],
    low: Sequence[float | None] | None = None,
    high: Sequence[float | None] | None = None,
) -> list[bool]:
    """Which points are on the throughput/memory Pareto frontier, ties included (see the module docstring).

    Args:
        throughput: per point, any throughput unit where higher is better (e.g. tokens/s per device).
        memory: per point, any memory unit where lower is better (e.g. peak bytes); same length as ``throughput``.
        low, high: per point, the throughput interval in the unit of ``throughput`` (None, or a missing value:
            the throughput itself, a zero-width interval).

    Returns:
        One bool per point, in input order. Missing/NaN points are always False.

    Runs in O(n log n): B is off the frontier exactly when a frontier point with strictly less memory has
    ``high >= B.low`` (faster or tied), or a point with equal memory has ``low > B.high`` (faster). Walk the groups
    of equal memory in ascending order, keeping the largest ``high`` among the frontier points at strictly lower
    memory. (Within a group, a faster point that is itself off the frontier takes a slower one off with it: the
    frontier point below that ties or beats the faster one beats the slower one too.)
    """
    pts = _intervals(throughput, memory, low, high)
    valid = sorted((p[2], i) for i, p in enumerate(pts) if p is not None)
    on = [False] * len(pts)
    best_high_below = -math.inf  # the largest interval top among the frontier points with strictly less memory
    k = 0
    while k < len(valid):
        mem = valid[k][0]
        group = []
        while k < len(valid) and valid[k][0] == mem:
            group.append(valid[k][1])
            k += 1
        best_low = max(pts[i][0] for i in group)  # type: ignore[index]
        for i in group:
            lo, hi, _ = pts[i]  # type: ignore[misc]
            on[i] = best_high_below < lo and not best_low > hi
        best_high_below = max([best_high_below, *(pts[i][1] for i in group if on[i])])  # type: ignore[index]
    return on


def throughput_ties(
    throughput: Sequence[float | None],
    memory: Sequence[float | None],
    low: Sequence[float | None] | None = None,
    high: Sequence[float | None] | None = None,
    only: Sequence[int] | None = None,
) -> list[list[int]]:
    """Per point, the indices (ascending) of the other valid points whose throughput intervals overlap its own
    (touching counts); empty for an invalid point. Arguments as :func:`pareto_frontier`; ``only``: the positions
    whose ties are wanted (the others get an empty list; None: every point). One vectorised pass over the points per
    position asked: a table asks for its frontier rows, not for each of 10,000 rows."""
    import numpy as np

    pts = _intervals(throughput, memory, low, high)
    valid = np.array([p is not None for p in pts], dtype=bool)
    lows = np.array([p[0] if p is not None else np.nan for p in pts], dtype=float)
    highs = np.array([p[1] if p is not None else np.nan for p in pts], dtype=float)
    out: list[list[int]] = [[] for _ in pts]
    for i in range(len(pts)) if only is None else sorted(set(only)):
        p = pts[i]
        if p is None:
            continue
        overlap = valid & (lows <= p[1]) & (highs >= p[0])
        overlap[i] = False
        out[i] = [int(j) for j in np.flatnonzero(overlap)]
    return out


def throughput_interval(
    df: pd.DataFrame, throughput_col: str = "tokens_per_s_per_device"
) -> tuple[pd.Series, pd.Series]:
    """(low, high) throughput of each row of a results table, in the unit of ``throughput_col`` (tokens/s per
    device by default).

    A row with the 95 % confidence interval of its median step time (``step_time_s_ci95_low``/``_high``, seconds,
    finite and positive): ``throughput x step_time_s_median / step_time_s_ci95_high`` and ``... / ci95_low``, at any
    number of timed steps (fewer than 6 give the wider [min, max]). Otherwise (older records) the p10-p90 spread:
    ``throughput x median / step_time_s_p90`` and ``... / step_time_s_p10``, zero-width (the throughput itself) when
    ``timed_steps_measured`` is below :data:`MIN_TIMED_STEPS` or a step time is missing, non-finite or not
    positive. Bounds are widened to contain the throughput."""
    import numpy as np
    import pandas as pd

    def col(name: str) -> pd.Series:
        if name not in df.columns:
            return pd.Series(np.nan, index=df.index, dtype=float)
        return pd.to_numeric(df[name], errors="coerce").astype(float)

    def positive(*xs: pd.Series) -> pd.Series:
        ok = pd.Series(True, index=df.index)
        for x in xs:
            ok &= np.isfinite(x) & (x > 0)
        return ok

    t, med = col(throughput_col), col("step_time_s_median")
    ci_lo, ci_hi = (col(c) for c in CI_COLUMNS)
    p10, p90 = (col(c) for c in SPREAD_COLUMNS)
    with_ci = positive(med, ci_lo, ci_hi)
    with_spread = ~with_ci & positive(med, p10, p90) & ~(col("timed_steps_measured") < MIN_TIMED_STEPS)
    low = (t * med / ci_hi).where(with_ci, (t * med / p90).where(with_spread, t))
    high = (t * med / ci_lo).where(with_ci, (t * med / p10).where(with_spread, t))
    return np.minimum(low, t).where(t.notna()), np.maximum(high, t).where(t.notna())


def _ok(df: pd.DataFrame) -> pd.Series:
    import pandas as pd

    return df["status"].eq("ok").fillna(False) if "status" in df.columns else pd.Series(True, index=df.index)


def mark_frontier(
    df: pd.DataFrame,
    throughput_col: str = "tokens_per_s_per_device",
    memory_col: str = "peak_mem_bytes",
) -> pd.Series:
    """Frontier membership of each row of a results table (tokens/s per device vs peak memory bytes by default),
    throughput intervals from the median step time's 95 % interval (:func:`throughput_interval`).

    Only rows with ``status == "ok"`` take part (when the table has a ``status`` column); every other row is False.

    Returns:
        A bool Series aligned with ``df.index``.
    """
    import pandas as pd

    ok = _ok(df)
    sub = df.loc[ok]
    low, high = throughput_interval(sub, throughput_col)
    flags = pareto_frontier(sub[throughput_col].tolist(), sub[memory_col].tolist(), low.tolist(), high.tolist())
    out = pd.Series(False, index=df.index, dtype=bool)
    if len(sub):
        out[ok.to_numpy(dtype=bool)] = flags
    return out


def mark_ties(
    df: pd.DataFrame,
    throughput_col: str = "tokens_per_s_per_device",
    memory_col: str = "peak_mem_bytes",
    rows: pd.Series | None = None,
) -> pd.Series:
    """For each ``ok`` row, the point ids (``point_id`` column, space-separated, sorted) of the other ``ok`` rows
    tied with it on throughput (overlapping intervals, see the module docstring), whatever their memory; None when
    there are none and for every other row. ``rows`` (a bool Series aligned with ``df``): only these rows' ties are
    found, the others are None (a report names the ties of a few rows). The ``frontier_tie_with`` column of the
    results table keeps these for frontier rows only (:func:`frontier_ties`)."""
    import pandas as pd

    ok = _ok(df)
    sub = df.loc[ok]
    low, high = throughput_interval(sub, throughput_col)
    wanted = None if rows is None else [k for k, w in enumerate(rows.loc[ok].to_numpy(dtype=bool)) if w]
    ties = throughput_ties(sub[throughput_col].tolist(), sub[memory_col].tolist(), low.tolist(), high.tolist(), wanted)
    ids = [str(p) for p in sub["point_id"]] if "point_id" in sub.columns else [str(i) for i in sub.index]
    values = iter([" ".join(sorted(ids[j] for j in t)) or None for t in ties])
    return pd.Series([next(values) if k else None for k in ok.to_numpy(dtype=bool)], index=df.index, dtype=object)


def frontier_ties(df: pd.DataFrame, on_frontier: pd.Series | None = None) -> pd.Series:
    """The ``frontier_tie_with`` column: :func:`mark_ties` for the rows on the frontier (``on_frontier``, by default
    :func:`mark_frontier`), None for every other row."""
    front = (on_frontier if on_frontier is not None else mark_frontier(df)).astype(bool)
    return mark_ties(df, rows=front)
