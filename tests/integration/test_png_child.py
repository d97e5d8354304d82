"""frontier.png of a big sweep, drawn by a child process (sweeper.report.png_child): the same picture as drawn in
the report's own process, and drawn there when the child fails."""

from __future__ import annotations

import sys
from pathlib import Path

from sweeper.report import build, build_report
from sweeper.report.axes import grid_of
from sweeper.report.fmt import mem_unit
from sweeper.report.plot_data import plot_data
from sweeper.report.plot_png import plot_png
from sweeper.report.png_child import CHILD_MIN_POINTS
from sweeper.results.collect import collect_records
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame
from sweeper.results.sweepdir import SweepDir


def _big_sweep(root: Path, n: int = CHILD_MIN_POINTS) -> SweepDir:
    sweep = SweepDir(root / "big")
    for i in range(n):
        spec = {"model": "tiny", "fsdp": "none", "gc": bool(i % 2), "per_device_batch_size": 1 + i % 50, "seed": i}
        ok = i % 7 != 0
        sweep.write_record(
            Record(
                sweep_id="big",
                point_id=f"{i:012x}",
                status="ok" if ok else "oom",
                spec=spec,
                reason=None if ok else "out of memory",
                metrics={
                    "tokens_per_s_per_device": 1000.0 + (i * 7919) % 3000,
                    "peak_mem_bytes": (1 + (i * 104729) % 900) * 2**20,
                    "step_time_s_median": 0.1,
                }
                if ok
                else {},
            )
        )
    return sweep


def _drawn_here(sweep: SweepDir, out: Path) -> bytes:
    df = records_to_frame(collect_records(sweep))
    plot_png(plot_data(df, grid_of(df).axes(df.columns), (), mem_unit(df)), out)
    return out.read_bytes()


def test_the_child_draws_the_same_png_the_report_process_would(tmp_path, monkeypatch):
    sweep = _big_sweep(tmp_path)

    def not_here(*args):
        raise AssertionError("frontier.png drawn in the report's process, not by the child")

    monkeypatch.setattr(build, "plot_png", not_here)  # only the child (its own process) can draw it
    build_report(sweep)
    monkeypatch.undo()
    assert sweep.frontier_png.read_bytes() == _drawn_here(sweep, tmp_path / "here.png")
    assert not list(sweep.path.glob(".frontier.png.*"))  # written atomically, no temporary left


def test_a_child_that_cannot_draw_leaves_the_png_to_the_report_process(tmp_path, monkeypatch):
    sweep = _big_sweep(tmp_path)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the child starts and exits 1 at once
    build_report(sweep)
    assert sweep.frontier_png.read_bytes() == _drawn_here(sweep, tmp_path / "here.png")
