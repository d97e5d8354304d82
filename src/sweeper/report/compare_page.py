"""The comparison page of several sweeps (:mod:`sweeper.report.compare`): ``compare.md``, ``compare.html``,
``compare.png`` and ``compare.csv`` in one folder, readable offline (no account, no network).

The page says first what changed (per sweep against the baseline: slower, faster, more or less memory, stopped
fitting, newly failing, newly fitting, unchanged within the noise; whether it is a regression), then what each
sweep is of (model, hardware, libraries), then every configuration side by side (tokens/s per device with its 95 %
interval, peak memory, the change and the verdict), then one plot with each sweep's points and its frontier.

Outside text (overrides, paths, reasons, model names) goes through :mod:`sweeper.report.md` and is never markup; the
HTML is made from the Markdown by :func:`sweeper.report.render.render_html` (raw HTML off), the plot's hover text is
HTML-escaped, and matplotlib draws text with ``parse_math=False``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from sweeper.report import md
from sweeper.report.blocks import Bullets, Document, Para, Plot, Section, Table
from sweeper.report.compare import (
    MIN_CHANGE,
    REGRESSIONS,
    SAME,
    Change,
    Comparison,
    Side,
    model_names,
)
from sweeper.report.fmt import cli_overrides, mem_unit
from sweeper.report.render import render_html, render_markdown
from sweeper.results.atomic import write_atomic, write_text_atomic
from sweeper.units import MISSING, in_unit, missing, num, percent

MD, HTML, PNG, CSV = "compare.md", "compare.html", "compare.png", "compare.csv"
PLOT_NOTE = f"Plot: `{PNG}` (static) and `{HTML}` (interactive), next to this file; `{CSV}` holds the numbers."
#: Marker colours, one per sweep (baseline first), repeated past ten sweeps.
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def label(row: dict[str, Any] | None) -> str:
    """A configuration's name: the point's overrides without its seed, else its point id."""
    if row is None:
        return MISSING
    parts = [o for o in cli_overrides(row.get("overrides")) if not o.lstrip("+~").startswith("seed=")]
    return " ".join(parts) or "(defaults)"


def name_of(change: Change) -> str:
    """The name of a change's configuration (the baseline's point, else the other's)."""
    return label(change.base if change.base is not None else change.other)


def _throughput(row: dict[str, Any] | None) -> str:
    from sweeper.report.compare import interval

    if row is None:
        return MISSING
    if row.get("status") != "ok":
        return str(row.get("status"))
    iv = interval(row)
    body = num(row.get("tokens_per_s_per_device"))
    return f"{body} ({num(iv[0])}–{num(iv[1])})" if iv else body


def _ratio(r: float | None) -> str:
    return MISSING if r is None else percent(r - 1, 1, sign=True)


def headline(comparisons: Sequence[Comparison], markdown: bool = True) -> list[str]:
    """The page's first lines: per sweep against the baseline, what changed, the worst first, and whether there is
    a regression. Markdown (outside text escaped, names as inline code), or plain text for a terminal."""
    code = md.code if markdown else str
    esc = md.escape if markdown else str
    bold = md.strong if markdown else str
    lines = []
    for c in comparisons:
        who = f"{code(c.other.sweep_id)} against {code(c.base.sweep_id)} (baseline)"
        counts = c.counts()
        said = []
        for verdict, n in counts.items():
            names = [name_of(x) for x in c.changes if x.verdict == verdict]
            detail = ""
            if verdict != SAME and len(names) <= 3:
                pairs = zip(names, _of(c, verdict), strict=True)
                detail = ": " + "; ".join(code(n) + _detail(x, esc) for n, x in pairs)
            said.append(f"{n:,} {verdict}{' within the noise' if verdict == SAME else ''}{detail}")
        body = ", ".join(said) or "no configurations"
        if not c.like_for_like:
            parts = " and ".join(d for d in c.differs if d != "libraries")
            lines.append(
                f"{who}: sweeps of a different {parts} ({esc(model_names(c.base.context))} against "
                f"{esc(model_names(c.other.context))}), compared as such: the same configurations side by "
                f"side, differences between them, not regressions. {body}."
            )
            continue
        n = len(c.regressions)
        verdict = bold(f"{n:,} regression{'s' if n != 1 else ''}") if n else "no regression"
        upgraded = " (library versions differ: see Sweeps)" if "libraries" in c.differs else ""
        lines.append(f"{who}{upgraded}: {verdict}; {body}.")
    return lines


def _of(c: Comparison, verdict: str) -> list[Change]:
    return [x for x in c.changes if x.verdict == verdict]


def _detail(x: Change, esc: Any = md.escape) -> str:
    parts = []
    if x.throughput_ratio is not None and x.beyond_noise:
        parts.append(f"tokens/s {_ratio(x.throughput_ratio)}")
    if x.memory_ratio is not None and x.verdict in ("more memory", "less memory"):
        parts.append(f"peak memory {_ratio(x.memory_ratio)}")
    if x.other is not None and x.other.get("status") not in ("ok", None):
        parts.append(esc(str(x.other.get("status"))))
    if x.contended:
        parts.append("measured under CPU contention: rerun it to confirm")
    return f" ({', '.join(parts)})" if parts else ""


def sweeps_table(sides: Sequence[Side]) -> pd.DataFrame:
    """One row per sweep: id, folder, points, ok, model, hardware, libraries (plain text)."""
    rows = []
    for i, s in enumerate(sides):
        n_ok = int((s.df["status"] == "ok").sum()) if len(s.df) else 0
        rows.append(
            {
                "sweep": s.sweep_id + (" (baseline)" if i == 0 else ""),
                "folder": str(s.path),
                "points": f"{len(s.df):,}",
                "ok": f"{n_ok:,}",
                "model": model_names(s.context),
                "hardware": "; ".join(s.context["hardware"]) or MISSING,
                "libraries": "; ".join(s.context["libraries"]) or MISSING,
            }
        )
    return pd.DataFrame(rows)


def points_table(comparisons: Sequence[Comparison], unit: tuple[str, int]) -> pd.DataFrame:
    """Every configuration (the union of all sweeps', baseline order first): per sweep its tokens/s per device
    (95 % interval) and peak memory; per sweep after the baseline the change of each and the verdict."""
    base = comparisons[0].base
    keys = list(dict.fromkeys([k for c in comparisons for k in (*c.base.keys, *c.other.keys)]))
    by_key = [{x.key: x for x in c.changes} for c in comparisons]
    rows = []
    for key in keys:
        first = base.row(key)
        row = {"configuration": label(first or next((c.other.row(key) for c in comparisons if c.other.row(key)), None))}
        row[f"{base.sweep_id} tokens/s/device"] = _throughput(first)
        row[f"{base.sweep_id} peak ({unit[0]})"] = _memory(first, unit)
        for c, changes in zip(comparisons, by_key, strict=True):
            x = changes[key]
            sid = c.other.sweep_id
            row[f"{sid} tokens/s/device"] = _throughput(x.other)
            row[f"{sid} Δ tokens/s"] = _ratio(x.throughput_ratio)
            row[f"{sid} peak ({unit[0]})"] = _memory(x.other, unit)
            row[f"{sid} Δ peak"] = _ratio(x.memory_ratio)
            note = " (contended)" if x.contended else ""
            regression = " — regression" if x.verdict in REGRESSIONS and c.like_for_like else ""
            row[f"{sid} verdict"] = f"{x.verdict}{regression}{note}"
        rows.append(row)
    return pd.DataFrame(rows)


def _memory(row: dict[str, Any] | None, unit: tuple[str, int]) -> str:
    if row is None or row.get("status") != "ok" or missing(row.get("peak_mem_bytes")):
        return MISSING
    return in_unit(row["peak_mem_bytes"], unit[0], label=False)


def csv_frame(comparisons: Sequence[Comparison]) -> pd.DataFrame:
    """The comparison as data, one row per configuration and sweep after the baseline: numbers in their own units
    (tokens/s per device, bytes), the ratios, the verdict, whether it is a regression."""
    rows = []
    for c in comparisons:
        for x in c.changes:
            b, o = x.base or {}, x.other or {}
            rows.append(
                {
                    "configuration": name_of(x),
                    "baseline_sweep_id": c.base.sweep_id,
                    "sweep_id": c.other.sweep_id,
                    "baseline_point_id": b.get("point_id"),
                    "point_id": o.get("point_id"),
                    "baseline_status": b.get("status"),
                    "status": o.get("status"),
                    "baseline_tokens_per_s_per_device": b.get("tokens_per_s_per_device"),
                    "tokens_per_s_per_device": o.get("tokens_per_s_per_device"),
                    "throughput_ratio": x.throughput_ratio,
                    "beyond_noise": x.beyond_noise,
                    "baseline_peak_mem_bytes": b.get("peak_mem_bytes"),
                    "peak_mem_bytes": o.get("peak_mem_bytes"),
                    "memory_ratio": x.memory_ratio,
                    "verdict": x.verdict,
                    "regression": x in c.regressions,
                    "contended": x.contended,
                    "like_for_like": c.like_for_like,
                }
            )
    return pd.DataFrame(rows)


def document(
    sides: Sequence[Side], comparisons: Sequence[Comparison], unit: tuple[str, int], min_change: float = MIN_CHANGE
) -> Document:
    """The page's structure (rendered by :mod:`sweeper.report.render`)."""
    noise = (
        "A throughput change counts when the two 95 % intervals of tokens/s per device (from each median step time's "
        f"interval, as the single-sweep report draws them) do not overlap and it is at least {percent(min_change, 0)} "
        "(`--min-change`: the drift between two runs, which no interval sees); a peak-memory change when it exceeds "
        "1 % of the baseline's. Configurations are aligned by identity without the seed and the model. A point "
        "measured under CPU contention (`contended`) says so: rerun it before trusting its change."
    )
    return Document(
        title=f"Comparison of sweeps {', '.join(s.sweep_id for s in sides)}",
        sections=[
            Section("", [Bullets(headline(comparisons)), Para(noise)]),  # noise: our own Markdown
            Section("Sweeps", [Table(sweeps_table(sides))]),
            Section("Point by point", [Table(points_table(comparisons, unit))]),
            Section("Throughput vs peak memory, per sweep", [Plot(note=PLOT_NOTE)]),
        ],
    )


def write_comparison(
    sides: Sequence[Side], comparisons: Sequence[Comparison], out: Path, min_change: float = MIN_CHANGE
) -> Path:
    """Write :data:`MD`, :data:`HTML`, :data:`PNG` and :data:`CSV` into ``out`` (made if missing), each atomically;
    returns the path of :data:`MD`. ``min_change``: the floor the comparisons used, said on the page."""
    out.mkdir(parents=True, exist_ok=True)
    unit = mem_unit(pd.concat([s.df for s in sides], ignore_index=True))
    doc = document(sides, comparisons, unit, min_change)
    write_atomic(out / CSV, lambda p: csv_frame(comparisons).to_csv(p, index=False))
    write_atomic(out / PNG, lambda p: _png(sides, unit, p))
    write_text_atomic(out / HTML, render_html(doc, _plot_div(sides, unit)))
    write_text_atomic(out / MD, render_markdown(doc))
    return out / MD


def _points(side: Side, unit: tuple[str, int]) -> pd.DataFrame:
    df = side.df
    ok = df[(df["status"] == "ok")].copy() if len(df) else df
    ok = ok[pd.to_numeric(ok["peak_mem_bytes"], errors="coerce").notna()] if len(ok) else ok
    ok["x"] = pd.to_numeric(ok["peak_mem_bytes"]) / unit[1] if len(ok) else []
    ok["y"] = pd.to_numeric(ok["tokens_per_s_per_device"]) if len(ok) else []
    ok["name"] = [label(r) for r in ok.to_dict("records")] if len(ok) else []
    return ok.sort_values("x") if len(ok) else ok


def _png(sides: Sequence[Side], unit: tuple[str, int], path: Path) -> None:
    """compare.png; a sweep id (its folder's, or what its sweep.json says) is drawn as text, never mathtext."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        _png_drawn(sides, unit, path)


def _png_drawn(sides: Sequence[Side], unit: tuple[str, int], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.subplots(1, 1)
    for i, side in enumerate(sides):
        pts, colour = _points(side, unit), COLOURS[i % len(COLOURS)]
        if not len(pts):
            continue
        name = f"{side.sweep_id}{' (baseline)' if i == 0 else ''}"
        ax.scatter(pts["x"], pts["y"], color=colour, label=name, zorder=3, marker="os^Dv"[i % 5])
        front = pts[pts["on_frontier"] == True]  # noqa: E712 - a nullable boolean column
        if len(front):
            ax.step(front["x"], front["y"], where="post", color=colour, lw=1.5, label=f"{name} frontier")
    ax.set_xlabel(f"peak memory per device ({unit[0]})")
    ax.set_ylabel("tokens/s per device")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs peak memory, one colour per sweep")
    ax.legend(loc="best", fontsize=8)
    fig.savefig(path, format="png", dpi=120)


def _plot_div(sides: Sequence[Side], unit: tuple[str, int]) -> str:
    return figure(sides, unit).to_html(full_html=False, include_plotlyjs=True)


def figure(sides: Sequence[Side], unit: tuple[str, int]) -> Any:
    """compare.html's plotly figure: each sweep's ok points (hover: configuration, tokens/s per device, peak memory in
    ``unit``) and its frontier; names and hover text HTML-escaped (plotly reads a subset of HTML in them)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, side in enumerate(sides):
        pts, colour = _points(side, unit), COLOURS[i % len(COLOURS)]
        if not len(pts):
            continue
        name = html.escape(f"{side.sweep_id}{' (baseline)' if i == 0 else ''}")  # plotly reads HTML in names
        hover = [
            html.escape(f"{n}: {num(y)} tokens/s per device, {in_unit(b, unit[0])}")
            for n, y, b in zip(pts["name"], pts["y"], pts["peak_mem_bytes"], strict=True)
        ]
        fig.add_trace(go.Scatter(x=pts["x"], y=pts["y"], mode="markers", name=name, text=hover, hoverinfo="text",
                                 marker={"size": 9, "color": colour}))  # fmt: skip
        front = pts[pts["on_frontier"] == True]  # noqa: E712 - a nullable boolean column
        if len(front):
            fig.add_trace(go.Scatter(x=front["x"], y=front["y"], mode="lines", line={"shape": "hv", "color": colour},
                                     name=f"{name} frontier", hoverinfo="skip"))  # fmt: skip
    fig.update_layout(
        title="Throughput vs peak memory, one colour per sweep",
        xaxis_title=f"peak memory per device ({unit[0]})",
        yaxis_title="tokens/s per device",
        height=520,
    )
    return fig
