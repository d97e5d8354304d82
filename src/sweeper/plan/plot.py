"""``plan.png``: predicted peak memory per rank (GiB, 2**30 bytes) against predicted throughput (tokens/s per
device), one marker per predicted point, with each device's memory as a vertical line.

A point's colour is its engine, its marker its gc value, and it is filled when it fits: "fits" is decided on the
predicted device bytes (peak x (1 + fragmentation) + CUDA context + NCCL, against capacity x (1 - margin)), so a
point just left of the memory line may still not fit.
Points without a throughput prediction (no device peak known) are not drawn; the title says how many. Texts are
drawn with ``parse_math=False`` (no mathtext from ``$...$`` in a name); matplotlib is imported only here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from sweeper.units import GIB

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Marker per gc value; colour per engine (matplotlib's tab10 cycle, in the plan's order).
_GC_MARKER = {False: "o", True: "^"}


def plan_figure(df: pd.DataFrame, devices: list[tuple[str, float]]) -> Figure:
    """The plot as a matplotlib ``Figure`` (no global backend change): a colour per engine, a marker per gc value,
    filled when the point fits, hollow when it does not, grey-edged when unknown; one dashed line per device.

    Args:
        df: the plan's rows (:func:`sweeper.plan.rows.plan_frame`).
        devices: (label, capacity in GiB) of each device-memory line.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    planned = df[df["status"] == "planned"]
    x = pd.to_numeric(planned["predicted_peak_bytes"], errors="coerce") / GIB
    y = pd.to_numeric(planned["predicted_tokens_per_s_per_device"], errors="coerce")
    drawn = x.notna() & y.notna()
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.subplots(1, 1)
    engines = list(dict.fromkeys(planned.loc[drawn, "engine"].astype(str)))
    colors = {e: f"C{i % 10}" for i, e in enumerate(engines)}
    for i in planned.index[drawn]:
        fits, color = planned.at[i, "fits"], colors[str(planned.at[i, "engine"])]
        known = not pd.isna(fits)
        face = color if known and bool(fits) else "none"
        edge = color if known else "gray"
        marker = _GC_MARKER[bool(planned.at[i, "gc"])]
        ax.scatter([x[i]], [y[i]], marker=marker, s=60, facecolors=face, edgecolors=edge, linewidths=1.5, zorder=3)
    for name, cap in devices:
        ax.axvline(cap, ls="--", color="gray", lw=1)
        ax.text(cap, 0.98, f" {name}", transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="gray",
                rotation=90, ha="right", parse_math=False)  # fmt: skip
    right = max([*x[drawn], *(c for _, c in devices), 1.0]) * 1.08
    ax.set_xlim(0, right)
    ax.set_ylim(0, max(float(y[drawn].max()) * 1.15, 1.0) if drawn.any() else 1.0)
    ax.set_xlabel("predicted peak memory per rank (GiB)")
    ax.set_ylabel("predicted throughput (tokens/s per device)")
    missing = int((~drawn).sum())
    title = "Capacity plan: predicted peak memory vs throughput (filled: fits, hollow: does not fit)"
    ax.set_title(title + (f"; {missing} point(s) without a prediction not drawn" if missing else ""), fontsize=9)
    handles = [Line2D([], [], ls="", marker="s", color=colors[e], label=e) for e in engines]
    handles += [
        Line2D([], [], ls="", marker=m, color="black", markerfacecolor="none", label=f"gc={'true' if g else 'false'}")
        for g, m in _GC_MARKER.items()
    ]
    if handles:
        ax.legend(handles=handles, loc="lower right", fontsize=7)
    return fig


def plot_png(df: pd.DataFrame, devices: list[tuple[str, float]], path: Path) -> None:
    """Write :func:`plan_figure` as a PNG to ``path``."""
    plan_figure(df, devices).savefig(path, format="png", dpi=120)
