"""``plan.png``: predicted peak memory per rank (GiB, 2**30 bytes) against predicted throughput (tokens/s per
device), one marker per predicted point, with each device's memory as a vertical line.

A point's marker says whether it fits: "fits" is decided on the predicted device bytes (peak x (1 + fragmentation)
+ CUDA context + NCCL, against capacity x (1 - margin)), so a point just left of the memory line may still not fit.
Points without a throughput prediction (no device peak known) are not drawn; the title says how many. Texts are
drawn with ``parse_math=False`` (no mathtext from ``$...$`` in a name); matplotlib is imported only here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sweeper.report.fmt import cli
from sweeper.units import GIB

_STYLE = {True: ("o", "#1f77b4", "fits"), False: ("x", "#d62728", "does not fit"), None: ("s", "gray", "fit unknown")}


def plan_figure(df: pd.DataFrame, devices: list[tuple[str, float]]) -> object:
    """The plot as a matplotlib ``Figure`` (no global backend change).

    Args:
        df: the plan's rows (:func:`sweeper.plan.rows.plan_frame`).
        devices: (label, capacity in GiB) of each device-memory line.
    """
    from matplotlib.figure import Figure

    planned = df[df["status"] == "planned"]
    x = pd.to_numeric(planned["predicted_peak_bytes"], errors="coerce") / GIB
    y = pd.to_numeric(planned["predicted_tokens_per_s_per_device"], errors="coerce")
    drawn = x.notna() & y.notna()
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.subplots(1, 1)
    fits = [None if v is pd.NA else bool(v) for v in planned["fits"]]
    for key, (marker, color, label) in _STYLE.items():
        mask = drawn & pd.Series([f is key for f in fits], index=planned.index)
        if mask.any():
            ax.scatter(x[mask], y[mask], marker=marker, color=color, s=50, label=label, zorder=3)
    if drawn.sum() <= 24:
        for i in planned.index[drawn]:
            name = f"{planned.at[i, 'engine']} gc={cli(bool(planned.at[i, 'gc']))}"
            ax.annotate(name, (x[i], y[i]), xytext=(5, 4), textcoords="offset points", fontsize=7, parse_math=False)
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
    title = "Capacity plan: predicted peak memory vs throughput"
    ax.set_title(title + (f" ({missing} point(s) without a throughput prediction not drawn)" if missing else ""),
                 fontsize=10)  # fmt: skip
    if drawn.any():
        ax.legend(loc="lower right", fontsize=8)
    return fig


def plot_png(df: pd.DataFrame, devices: list[tuple[str, float]], path: Path) -> None:
    """Write :func:`plan_figure` as a PNG to ``path``."""
    plan_figure(df, devices).savefig(path, format="png", dpi=120)
