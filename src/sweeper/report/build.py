"""Building the report files of a sweep directory from the records on disk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sweeper.report.axes import grid_of
from sweeper.report.blocks import PNG_MIN_OK, interactive_plot
from sweeper.report.document import build_document
from sweeper.report.fmt import mem_unit
from sweeper.report.plot_data import plot_data
from sweeper.report.plot_html import plot_html
from sweeper.report.plot_png import plot_png
from sweeper.report.png_child import CHILD_MIN_POINTS, PngChild
from sweeper.report.render import render_html, render_markdown
from sweeper.results.atomic import write_atomic, write_text_atomic
from sweeper.results.collect import collect_records
from sweeper.results.row import frame_to_arrow, records_to_frame
from sweeper.results.sweepdir import SweepDir

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from sweeper.results.record import Record


@dataclass(frozen=True)
class Collected:
    """A sweep's records, read once, and their results frame (:func:`collect`): the report and the terminal summary
    (:func:`sweeper.report.predicted.summary_lines`) of the same moment share them."""

    records: list[Record]
    df: pd.DataFrame


def collect(sweep_dir: SweepDir | Path) -> Collected:
    """The records on disk (:func:`~sweeper.results.collect.collect_records`: a point folder without
    ``result.json`` is ``pending``) and their frame (:func:`~sweeper.results.row.records_to_frame`).

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    records = collect_records(SweepDir.of(sweep_dir))
    return Collected(records, records_to_frame(records))


def build_report(
    sweep_dir: SweepDir | Path,
    device_mem_gib: Sequence[tuple[str, float]] = (),
    *,
    max_rows: int | None = 200,
    wandb_mode: str | None = None,
    collected: Collected | None = None,
) -> Path:
    """Write ``results.csv``, ``results.parquet``, ``report.md``, ``report.html`` (its interactive plot from
    :func:`~sweeper.report.blocks.interactive_plot`) and, with at least
    :data:`~sweeper.report.blocks.PNG_MIN_OK` ok points, ``frontier.png`` (from
    :data:`~sweeper.report.png_child.CHILD_MIN_POINTS` points on, drawn by a child process meanwhile) into
    ``sweep_dir``, each atomically
    (:mod:`sweeper.results.atomic`), from the records on disk (point folders without ``result.json`` show as
    ``pending``, see :func:`sweeper.results.collect.collect_records`).

    Args:
        sweep_dir: the sweep directory (holds ``points/``), or its path.
        device_mem_gib: optional device memory capacities drawn as vertical lines, as (label, GiB) pairs,
            e.g. ``[("H100 80 GiB", 80.0)]``.
        max_rows: the most rows each table of report.md/report.html shows (None: every row). The results table
            shows every frontier point and then the fastest other ``ok`` points; the failures table takes rows
            from every status in turn; the replay section shows as many commands (frontier points first, then
            the failures shown). A note under each cut table says how many rows were left out. ``results.csv``
            and ``results.parquet`` always hold every point, with every column of :mod:`sweeper.results.row`.
        wandb_mode: the mode the sweep's W&B runs are being written in while the report is built (``off``,
            ``offline``, ``online``: :class:`sweeper.tracking.RunsWriter`), for the report's W&B section; None:
            the section describes the last write.
        collected: the sweep's records as :func:`collect` just read them (the caller shows them elsewhere too);
            None: read here.

    Returns:
        The path of ``report.md``.

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    sweep = SweepDir.of(sweep_dir)
    # a big sweep's frontier.png is drawn by a child process while this one writes the rest (png_child); with the
    # records already read, only when there is a frontier to draw
    if collected is None:
        big = sweep.count_points() >= CHILD_MIN_POINTS
    else:
        n_ok = int((collected.df["status"] == "ok").sum()) if "status" in collected.df.columns else 0
        big = len(collected.df) >= CHILD_MIN_POINTS and n_ok >= PNG_MIN_OK
    child = PngChild.start(sweep.frontier_png) if big else None
    try:
        return _build(sweep, collected, device_mem_gib, max_rows, wandb_mode, child)
    finally:
        if child is not None:
            child.cancel()  # an error on the way (or already finished: nothing to stop)


def _build(
    sweep: SweepDir,
    collected: Collected | None,
    device_mem_gib: Sequence[tuple[str, float]],
    max_rows: int | None,
    wandb_mode: str | None,
    child: PngChild | None,
) -> Path:
    collected = collected or collect(sweep)
    records, df = collected.records, collected.df
    grid = grid_of(df)
    unit = mem_unit(df)
    doc = build_document(sweep, records, df, max_rows, grid, device_mem_gib, wandb_mode)
    n_ok = int((df["status"] == "ok").sum()) if "status" in df.columns else 0
    draw_png, interactive = n_ok >= PNG_MIN_OK, interactive_plot(df)
    data = plot_data(df, grid.axes(df.columns), device_mem_gib, unit) if draw_png or interactive else None
    png = sweep.frontier_png
    drawn_beside = child is not None and draw_png and data is not None
    if drawn_beside and child is not None:
        child.send(data)
    elif child is not None:
        child.cancel()
    write_atomic(sweep.results_csv, lambda p: df.to_csv(p, index=False))
    table = frame_to_arrow(df)
    write_atomic(sweep.results_parquet, lambda p: _write_parquet(table, p))
    if draw_png and data is not None:  # data is None only when neither plot is drawn
        if not drawn_beside:
            write_atomic(png, lambda p: plot_png(data, p))
    else:  # a lone point has no frontier to draw (and skips matplotlib); an older drawing would be stale
        png.unlink(missing_ok=True)
    # a single point: no plotly figure (nothing to compare; report.html says so)
    write_text_atomic(sweep.report_html, render_html(doc, plot_html(data) if interactive and data is not None else ""))
    md = sweep.report_md
    write_text_atomic(md, render_markdown(doc))
    if drawn_beside and child is not None and data is not None and not child.finish():
        write_atomic(png, lambda p: plot_png(data, p))  # the child could not: drawn here (raising what it raised)
    return md


def _write_parquet(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)
