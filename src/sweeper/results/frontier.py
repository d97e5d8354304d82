"""The Pareto frontier of throughput (higher is better) against peak memory (lower is better).

A point *dominates* another when it is at least as fast **and** uses no more memory, and is strictly better in at
least one of the two. The frontier is the set of points that no other point dominates: for every memory budget, the
fastest configurations that fit. Two points with exactly the same throughput and memory do not dominate each other,
so both are on the frontier. A point with a missing or non-finite throughput or memory (None, NaN, inf) is never on
the frontier and never dominates another point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def pareto_frontier(throughput: Sequence[float | None], memory: Sequence[float | None]) -> list[bool]:
    """Which points are on the throughput/memory Pareto frontier.

    Args:
        throughput: per point, any throughput unit where higher is better (e.g. tokens/s per device).
        memory: per point, any memory unit where lower is better (e.g. peak bytes); same length as ``throughput``.

    Returns:
        One bool per point, in input order: True when no other point is at least as fast with no more memory and
        strictly better in one of the two (see the module docstring). Missing/NaN points are always False.

    Runs in O(n log n): sort by memory ascending, then walk the groups of equal memory keeping the best throughput
    seen at strictly lower memory.
    """
    if len(throughput) != len(memory):
        raise ValueError(f"throughput has {len(throughput)} values but memory has {len(memory)}")
    pts = [(i, _finite(t), _finite(m)) for i, (t, m) in enumerate(zip(throughput, memory, strict=True))]
    valid = sorted(((m, -t, i) for i, t, m in pts if t is not None and m is not None))
    on = [False] * len(pts)
    best_below = -math.inf  # best throughput among points with strictly less memory
    k = 0
    while k < len(valid):
        mem, group_best = valid[k][0], -valid[k][1]  # first of the group is its fastest (sorted by -t)
        while k < len(valid) and valid[k][0] == mem:
            t, i = -valid[k][1], valid[k][2]
            on[i] = t == group_best and t > best_below
            k += 1
        best_below = max(best_below, group_best)
    return on


def mark_frontier(
    df: pd.DataFrame,
    throughput_col: str = "tokens_per_s_per_device",
    memory_col: str = "peak_mem_bytes",
) -> pd.Series:
    """Frontier membership of each row of a results table (tokens/s per device vs peak memory bytes by default).

    Only rows with ``status == "ok"`` take part (when the table has a ``status`` column); every other row is False.

    Returns:
        A bool Series aligned with ``df.index``.
    """
    import pandas as pd

    ok = df["status"].eq("ok").fillna(False) if "status" in df.columns else pd.Series(True, index=df.index)
    sub = df.loc[ok]
    flags = pareto_frontier(sub[throughput_col].tolist(), sub[memory_col].tolist())
    out = pd.Series(False, index=df.index, dtype=bool)
    if len(sub):
        out[ok.to_numpy(dtype=bool)] = flags
    return out
