"""The throughput vs peak-memory plot as frontier.png (matplotlib), from :class:`sweeper.report.plot_data.PlotData`.

Outside text never becomes markup here: matplotlib texts are drawn with ``parse_math=False`` (no mathtext from
``$...$``). matplotlib is imported only inside the functions that draw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeper.report.plot_data import FAILED_TITLE, Y_LABEL, PlotData

#: Above this many ok points with an interval, frontier.png draws the interval bars of the frontier points only.
MAX_BARS = 500


def png_figure(data: PlotData) -> Any:
    """The static plot as a matplotlib ``Figure`` (Agg, no global backend change): ok points with the frontier
    (interval bars on every point with an interval, or on the frontier's only past :data:`MAX_BARS` of them) and,
    only when some point was not measured, a strip below with those points. Point labels point away from
    the nearer side edge so that they stay inside the axes. The axes end at :attr:`PlotData.x_max` and
    :attr:`PlotData.y_max`; predicted markers beyond them are clipped and counted in a line under the plot."""
    from matplotlib.figure import Figure

    strip = bool(len(data.failed))
    fig = Figure(figsize=(9, 6.5) if strip else (9, 5.5), layout="constrained")
    if strip:
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[4, 1])
    else:
        top, bottom = fig.subplots(1, 1), None
    right = data.x_max
    ok, front = data.ok, data.ok[data.ok["on_frontier"]]
    top.scatter(ok["x"], ok["y"], color="#1f77b4", label="ok", zorder=3)
    # interval bars where there is an interval; past MAX_BARS points (unreadable as bars, and a second per few
    # thousand of drawing) only the frontier's, which the frontier compares, and the legend says so
    barred = ok[ok["y_high"] > ok["y_low"]]
    label = data.interval
    if len(barred) > MAX_BARS:
        barred, label = barred[barred["on_frontier"]], f"{data.interval} (frontier points)"
    if len(barred):
        spread = [(barred["y"] - barred["y_low"]).to_numpy(), (barred["y_high"] - barred["y"]).to_numpy()]
        top.errorbar(
            barred["x"],
            barred["y"],
            yerr=spread,
            fmt="none",
            ecolor="#1f77b4",
            elinewidth=1,
            capsize=3,
            zorder=2,
            label=label,
        )
    if len(front):
        top.step(front["x"], front["y"], where="post", color="#d62728", lw=1.5, label="Pareto frontier")
        top.scatter(front["x"], front["y"], marker="*", s=180, color="#d62728", zorder=4)
    pred = data.predicted
    if len(pred):
        for x, y, px, py in zip(pred["x"], pred["y"], pred["px"], pred["py"], strict=True):
            top.plot([px, x], [py, y], ls=":", color="gray", lw=1, zorder=2)
        top.scatter(
            pred["px"], pred["py"], facecolors="none", edgecolors="#1f77b4", linewidths=1.2, label="predicted", zorder=3
        )
    ymax = data.y_max
    if len(ok) <= 20:
        for _, r in ok.iterrows():
            _label(top, r["label"], r["x"], r["y"], right, 7, below=r["y"] > 0.9 * ymax)
    if not len(ok):
        top.text(0.5, 0.5, "no ok points" if strip else "no points", ha="center", va="center", transform=top.transAxes)
    if bottom is not None:
        statuses = sorted(data.failed["status"].unique())
        for i, status in enumerate(statuses):
            grp = data.failed[data.failed["status"] == status]
            bottom.scatter(grp["x"], [i] * len(grp), marker="x", s=60, label=status)
            if len(data.failed) <= 12:
                for _, r in grp.iterrows():
                    _label(bottom, r["label"], r["x"], i, right, 6)
        bottom.set_yticks(range(len(statuses)), statuses)
        bottom.set_ylim(-0.7, max(len(statuses), 1) - 0.3)
        bottom.set_title(FAILED_TITLE, fontsize=8)
    for name, cap in data.devices:
        for ax in (top, bottom):
            if ax is not None:
                ax.axvline(cap, ls="--", color="gray", lw=1)
        top.text(
            cap,
            0.98,
            f" {name}",
            transform=top.get_xaxis_transform(),
            fontsize=7,
            va="top",
            color="gray",
            parse_math=False,
        )
    top.set_ylabel(Y_LABEL)
    (bottom if bottom is not None else top).set_xlabel(data.xlabel)
    top.set_xlim(left=0, right=right)
    top.set_ylim(0, ymax)
    top.set_title("Throughput vs peak memory")
    if len(ok):
        top.legend(loc="best", fontsize=8)
    if data.predicted_note:
        fig.supxlabel(data.predicted_note + "; see Predicted vs measured", fontsize=8, color="gray", parse_math=False)
    return fig


def _label(ax: Any, label: str, x: float, y: float, right: float, size: int, below: bool = False) -> None:
    """Label a point, to its right in the left half of the x range, else to its left; above it unless ``below``."""
    left_side = x > right / 2
    ax.annotate(
        label,
        (x, y),
        fontsize=size,
        xytext=(-8 if left_side else 8, -7 if below else 5),
        textcoords="offset points",
        ha="right" if left_side else "left",
        va="top" if below else "bottom",
        parse_math=False,
    )


def plot_png(data: PlotData, path: Path) -> None:
    """The plot as a static PNG (see :func:`png_figure`)."""
    png_figure(data).savefig(path, format="png", dpi=120)
