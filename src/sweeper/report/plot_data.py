"""The data of the throughput vs peak-memory plot (:class:`PlotData`): what both drawings show, and where.

Memory on the x axis is in the report's unit (GiB = 2**30 bytes or MiB = 2**20 bytes, see
:func:`sweeper.report.fmt.mem_unit`), throughput on the y axis in tokens/s per device. Failed points are drawn in
a strip below (OOMs at the device capacity they report, pruned points at their predicted bytes per device, others
at the right edge), each with its reason on hover. Each ok point has an error bar: its tokens/s per device at the
slow and fast ends of the 95 % confidence interval of its median step time (``tokens/s x median / ci95_high`` to
``tokens/s x median / ci95_low``; the p10-p90 spread for records without the interval,
:func:`sweeper.results.frontier.throughput_interval`), the range the frontier compares. Where capacity planning
predicted both numbers of an ok point (predicted peak tensor bytes per rank, predicted tokens/s per device), the
prediction is drawn as a hollow marker joined to the measured point by a dotted line.

The axes are the measured points' (:func:`axis_limits`): a prediction may widen an axis by at most
:data:`PREDICTED_STRETCH` times, so that a model far off (on CPU the default ``plan.efficiency`` can predict several
times the measured tokens/s) never squashes the measured points, the answer, into a corner. Predicted markers that
still fall outside are hidden in report.html until the "predicted" legend entry is clicked, clipped in
frontier.png, and both plots say how many there are (:attr:`PlotData.predicted_note`). The drawings:
:mod:`sweeper.report.plot_html` (plotly, report.html) and :mod:`sweeper.report.plot_png` (matplotlib, frontier.png).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from sweeper.report.fmt import cli, cli_overrides, mem_unit, text
from sweeper.results.frontier import throughput_interval
from sweeper.units import GIB, MIB, missing, num, percent

#: Headroom above the highest measured tokens/s (top of its interval bar) on the y axis (fraction of it).
Y_HEADROOM = 1.15
#: Headroom right of the rightmost measured x (memory, device line, failed point): where failed points without a
#: memory number sit (:attr:`PlotData.edge`); the x axis ends :data:`X_PAD` further right.
X_HEADROOM = 1.1
X_PAD = 1.05
#: The most an axis may be widened (times its measured extent) to show predicted markers; beyond it the axis stays
#: the measured one and the predictions outside are hidden (report.html) or clipped (frontier.png).
PREDICTED_STRETCH = 1.5


def labels(df: pd.DataFrame, axes: Sequence[str]) -> list[str]:
    """A short name for each point: its values on the swept ``axes``, else its overrides, else its id."""
    axes = [a for a in axes if a in df.columns]
    out = []
    columns = [df["overrides"].tolist(), df["point_id"].tolist(), *(df[a].tolist() for a in axes)]
    for over, pid, *vals in zip(*columns, strict=True):
        parts = [f"{a}={cli(v)}" for a, v in zip(axes, vals, strict=True) if not missing(v)]
        out.append(" ".join(parts) or " ".join(cli_overrides(over)) or str(pid))
    return out


@dataclass
class PlotData:
    """What both plots draw.

    Attributes:
        ok: ok points with both numbers (x in ``unit``, y in tokens/s/device, ``y_low``/``y_high``: the throughput
            interval in tokens/s/device, :func:`sweeper.results.frontier.throughput_interval`; label, hover,
            on_frontier).
        failed: every other point (x in ``unit``: the device capacity for OOMs that report it, the predicted bytes
            per device for pruned points, else ``edge``).
        edge: the right edge of the data, in ``unit``.
        devices: (label, capacity in ``unit``) of each device-memory line.
        unit: "GiB" or "MiB".
        predicted: the ok points with both predicted numbers: measured ``x``, ``y``, predicted ``px`` (``unit``),
            ``py`` (tokens/s/device), and a ``hover`` text; empty when nothing was predicted.
        interval: what the error bars are (:func:`interval_label`), for the legend and the title.
        x_max: the right end of the x axis, in ``unit`` (:func:`axis_limits`; both axes start at 0); computed.
        y_max: the top of the throughput axis, in tokens/s per device (:func:`axis_limits`); computed.
    """

    ok: pd.DataFrame
    failed: pd.DataFrame
    edge: float
    devices: list[tuple[str, float]]
    unit: str = "GiB"
    predicted: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["x", "y", "px", "py", "hover"]))
    interval: str = "95 % CI of the median step time"
    x_max: float = field(init=False)
    y_max: float = field(init=False)

    def __post_init__(self) -> None:
        self.x_max, self.y_max = axis_limits(self.ok, self.predicted, self.edge)

    @property
    def xlabel(self) -> str:
        """The x-axis title, with the unit."""
        return f"peak memory per device ({self.unit})"

    @property
    def predicted_outside(self) -> pd.Series:
        """Which predicted markers fall outside the axes (``px`` > :attr:`x_max` or ``py`` > :attr:`y_max`)."""
        pred = self.predicted
        if not len(pred):
            return pd.Series(False, index=pred.index, dtype=bool)
        return (pred["px"].astype(float) > self.x_max) | (pred["py"].astype(float) > self.y_max)

    @property
    def predicted_note(self) -> str:
        """One line saying how many predicted markers fall outside the axes and how far off they are (predicted /
        measured, tokens/s per device and peak memory); empty when none does."""
        out = self.predicted_outside
        n = int(out.sum())
        if not n:
            return ""
        pred = self.predicted
        ratios = []
        for what, p, m, top in (("tokens/s", "py", "y", self.y_max), ("peak memory", "px", "x", self.x_max)):
            beyond = pred[pred[p].astype(float) > top]  # outside on this axis
            if len(beyond):
                r = (beyond[p].astype(float) / beyond[m].astype(float)).max()
                if not missing(r) and r != float("inf"):
                    ratios.append(f"{r:.1f}x the measured {what}")
        far = f" (up to {' and '.join(ratios)})" if ratios else ""
        return (
            f"{n} of {len(self.predicted)} predicted markers fall outside the axes, which the measured points set{far}"
        )


_HOVER_COLUMNS = (
    "point_id",
    "status",
    "overrides",
    "tokens_per_s_per_device",
    "peak_mem_bytes",
    "peak_mem_kind",
    "step_time_s_median",
    "reason",
    "oom_requested_bytes",
    "oom_free_bytes",
    "oom_capacity_bytes",
)


def hovers(df: pd.DataFrame, unit: tuple[str, int] = ("GiB", GIB)) -> list[str]:
    """The plot's hover text of each point (HTML: first line bold, then overrides, numbers or failure reason);
    peak memory in ``unit`` (name, bytes). An ok point also shows its tokens/s/device interval (the frontier's,
    :func:`sweeper.results.frontier.throughput_interval`) and, on the
    frontier, the points tied with it (``frontier_tie_with``)."""
    name, scale = unit
    out = []
    low, high = throughput_interval(df)
    ties = df["frontier_tie_with"] if "frontier_tie_with" in df.columns else pd.Series(None, index=df.index)
    for pid, status, over, tps, peak, kind, step, reason, req, free, cap, lo, hi, tie in zip(
        *(df[c].tolist() for c in _HOVER_COLUMNS), low, high, ties, strict=True
    ):
        lines = [f"{pid} ({status})", *cli_overrides(over)]
        if status == "ok":
            lines += [
                f"tokens/s/device: {num(tps)}"
                + ("" if missing(lo) or lo == hi else f" (interval: {num(lo)}-{num(hi)})"),
                f"peak mem: {num(peak, scale, 3, zeros=True)} {name} ({text(kind)})",
                f"step time median: {num(step)} s",
            ]
            if not missing(tie):
                lines += [f"tied with: {tie}"]
        else:
            lines += [f"reason: {text(reason)}"]
            if not missing(req):
                lines += [f"requested {num(req, MIB)} MiB, free {num(free, MIB)} MiB, capacity {num(cap, GIB)} GiB"]
        out.append("<b>" + "<br>".join(html.escape(x) for x in lines).replace("<br>", "</b><br>", 1))
    return out


def _predicted_hovers(df: pd.DataFrame, px: pd.Series, py: pd.Series, unit: str) -> list[str]:
    """Hover text of each prediction marker (HTML-escaped): the point, predicted numbers and their errors."""
    out = []
    for pid, x, y, e_mem, e_tps in zip(
        df["point_id"], px, py, df["peak_mem_rel_error"], df["tokens_per_s_per_device_rel_error"], strict=True
    ):
        lines = [
            f"{pid} (predicted)",
            f"tokens/s/device: {num(y)}" + ("" if missing(e_tps) else f" ({percent(e_tps, sign=True)} vs measured)"),
            f"peak: {num(x, 1, 3, zeros=True)} {unit}" + ("" if missing(e_mem) else f" ({percent(e_mem, sign=True)})"),
        ]
        out.append("<b>" + "<br>".join(html.escape(t) for t in lines).replace("<br>", "</b><br>", 1))
    return out


def axis_limits(ok: pd.DataFrame, predicted: pd.DataFrame, edge: float) -> tuple[float, float]:
    """The upper ends of the plot's axes (both start at 0), set by the measured points.

    Args:
        ok: the measured points (``x`` in the memory unit, ``y_high``: top of the interval bar, tokens/s/device).
        predicted: the predictions (``px`` in the memory unit, ``py`` in tokens/s/device); may be empty.
        edge: the right edge of the measured data (memory unit): measured peaks, device lines, failed points.

    Returns:
        (x_max in the memory unit, y_max in tokens/s per device): ``edge`` x :data:`X_PAD` and the highest
        ``y_high`` x :data:`Y_HEADROOM` (at least 1), each widened to show the predictions only when that widens
        it by at most :data:`PREDICTED_STRETCH` times.
    """
    x_max = edge * X_PAD
    highs = pd.to_numeric(ok["y_high"], errors="coerce").dropna() if len(ok) else pd.Series(dtype=float)
    y_max = max(float(highs.max()) * Y_HEADROOM, 1.0) if len(highs) else 1.0
    if len(predicted):
        px = pd.to_numeric(predicted["px"], errors="coerce").dropna()
        py = pd.to_numeric(predicted["py"], errors="coerce").dropna()
        want_x = float(px.max()) * X_HEADROOM * X_PAD if len(px) else 0.0
        want_y = float(py.max()) * Y_HEADROOM if len(py) else 0.0
        if x_max < want_x <= x_max * PREDICTED_STRETCH:
            x_max = want_x
        if y_max < want_y <= y_max * PREDICTED_STRETCH:
            y_max = want_y
    return x_max, y_max


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(df[name], errors="coerce").astype(float) if name in df else pd.Series(float("nan"), df.index)


def interval_label(df: pd.DataFrame) -> str:
    """What the error bars of the ok points of ``df`` are: ``"95 % CI of the median step time"`` when every ok
    point has the interval, ``"p10-p90 step-time spread"`` when none has (records older than it), both otherwise
    (:func:`sweeper.results.frontier.throughput_interval` picks per point)."""
    ok = df["status"] == "ok" if "status" in df.columns else pd.Series(True, index=df.index)
    has = _column(df, "step_time_s_ci95_low")[ok].notna()
    if has.all():
        return "95 % CI of the median step time"
    if not has.any():
        return "p10-p90 step-time spread"
    return "95 % CI of the median step time (p10-p90 for older records)"


def plot_data(
    df: pd.DataFrame,
    axes: Sequence[str],
    device_mem_gib: Sequence[tuple[str, float]],
    unit: tuple[str, int] | None = None,
) -> PlotData:
    """The points of ``df`` for the plots: labels from the swept ``axes``, device-memory lines from
    ``device_mem_gib`` ((label, GiB) pairs; when there are none and capacity planning judged every point against
    one capacity, that one), memory in ``unit`` ((name, bytes); by default :func:`mem_unit` of ``df``)."""
    unit_name, scale = unit or mem_unit(df)
    y = pd.to_numeric(df["tokens_per_s_per_device"], errors="coerce")
    x = pd.to_numeric(df["peak_mem_bytes"], errors="coerce").astype(float) / scale
    measured = (df["status"] == "ok") & x.notna() & y.notna()
    cap = pd.to_numeric(df["oom_capacity_bytes"], errors="coerce").astype(float) / scale
    pruned = df["status"] == "pruned"
    cap[pruned] = _column(df, "predicted_device_bytes")[pruned] / scale  # where the model put them
    devices = [(name, gib * GIB / scale) for name, gib in device_mem_gib]
    capacities = _column(df, "predicted_device_mem_bytes").dropna().unique()
    if not devices and len(capacities) == 1:  # the capacity capacity planning judged every point against
        label = f"cluster.gpu_mem_gib: {num(capacities[0], scale, 3, zeros=True)} {unit_name}"
        devices = [(label, capacities[0] / scale)]
    px = _column(df, "predicted_peak_bytes") / scale
    py = _column(df, "predicted_tokens_per_s_per_device")
    both = measured & px.notna() & py.notna()
    known = [*x[measured], *cap[~measured].dropna(), *(d for _, d in devices)]  # predictions: axis_limits
    edge = max(known) * X_HEADROOM if known and max(known) > 0 else 1.0
    base = pd.DataFrame(
        {
            "label": labels(df, axes),
            "hover": hovers(df, (unit_name, scale)),
            "status": [
                s if m else ("ok (no numbers)" if s == "ok" else s) for s, m in zip(df["status"], measured, strict=True)
            ],
        },
        index=df.index,
    )
    low, high = throughput_interval(df)
    ok = base[measured].assign(
        x=x[measured],
        y=y[measured],
        y_low=low[measured].astype(float),
        y_high=high[measured].astype(float),
        on_frontier=df.loc[measured, "on_frontier"],
    )
    failed = base[~measured].assign(x=cap[~measured].fillna(edge))
    predicted = pd.DataFrame(
        {
            "x": x[both],
            "y": y[both],
            "px": px[both],
            "py": py[both],
            "hover": _predicted_hovers(df[both], px[both], py[both], unit_name) if both.any() else [],
        },
        index=df.index[both],
    )
    return PlotData(
        ok=ok.sort_values("x"),
        failed=failed,
        edge=edge,
        devices=devices,
        unit=unit_name,
        predicted=predicted,
        interval=interval_label(df),
    )


def predicted_segments(pred: pd.DataFrame) -> tuple[list[float | None], list[float | None]]:
    """x and y of the dotted lines joining each prediction to its measurement, None between segments (plotly)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for x, y, px, py in zip(pred["x"], pred["y"], pred["px"], pred["py"], strict=True):
        xs += [px, x, None]
        ys += [py, y, None]
    return xs, ys


#: Titles and labels both drawings use.
FAILED_TITLE = "not measured: OOM at device capacity, pruned at predicted bytes; others at the right edge"
Y_LABEL = "throughput (tokens/s per device)"
OK_TITLE = "ok points (★ = Pareto frontier; bars: tokens/s per device over the {interval})"
