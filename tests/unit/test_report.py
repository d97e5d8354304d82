"""The report: a sweep directory of result records becomes a table, Markdown, HTML and a PNG."""

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from sweeper.report import build_report, main
from sweeper.report.axes import grid_values as _grid_values
from sweeper.report.fmt import mem_unit as _mem_unit
from sweeper.report.notes import method_notes as _method_notes
from sweeper.report.plot_data import plot_data as _plot_data
from sweeper.report.plot_png import png_figure as _png_figure
from sweeper.report.tables import results_table
from sweeper.results.columns import COLUMNS, FAMILY
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame
from sweeper.results.sweepdir import SweepDir

#: The fixed columns of the row, in schema order (dotted passthrough columns expand between them).
FIXED = tuple(c.name for c in COLUMNS if c.dtype != FAMILY)
POINT = re.compile(r"\| ([0-9a-f]{12}) \|")

GIB, MIB = 2**30, 2**20
ENV = {
    "host": "node-7",
    "python": "3.12.3",
    "torch": "2.9.0",
    "transformers": "4.57.0",
    "slurm_job_id": "4242",
}


def main_table(section_text: str) -> str:
    """A section without its folded details (``### ...`` and what follows)."""
    return section_text.split("\n### ")[0]


def details(section_text: str) -> str:
    """The folded details of a section (``### ...`` and what follows)."""
    return section_text.split("\n### ", 1)[1]


def rows_by_point(table_text: str) -> dict[str, str]:
    """``{point_id: line}`` of the table rows in ``table_text`` (the point id is a cell of its own)."""
    return {m.group(1): line for line in table_text.splitlines() if (m := POINT.search(line))}


def read_md(path) -> str:
    """report.md with the padding of its (tabulate-aligned) table cells squeezed: ``| 3.00 |`` whatever the width."""
    lines = Path(path).read_text().splitlines()
    return "\n".join(re.sub(r" *\| *", " | ", ln).strip() if ln.startswith("|") else ln for ln in lines)


def spec(fsdp: str, gc: bool) -> dict:
    return {
        "model": "tiny",
        "fsdp": fsdp,
        "gc": gc,
        "use_reentrant": False,
        "precision": "fp32",
        "zero": 0,
        "per_device_batch_size": 4,
        "seq_len": 128,
        "grad_accum": 1,
        "ranks_per_node": 2,
        "nodes": 1,
    }


def ok_point(pid: str, fsdp: str, gc: bool, tps: float, mem: int, setup_ws: bool = True) -> Record:
    return Record(
        sweep_id="sw-test",
        point_id=pid,
        status="ok",
        overrides=[f"fsdp={fsdp}", f"gc={str(gc).lower()}"],
        spec=spec(fsdp, gc),
        replay=f"python -m sweeper fsdp={fsdp} gc={str(gc).lower()}",
        ran={"world_size": 2, "wrapper": "DistributedDataParallel"} if setup_ws else {},
        metrics={
            # 4 samples x 128 tokens per step per device at tps tokens/s, a spread of -2 %/+3 % around the median
            "step_time_s_median": 512 / tps,
            "step_time_s_p10": 0.98 * 512 / tps,
            "step_time_s_p90": 1.03 * 512 / tps,
            "timed_steps": 8,
            "warmup_steps_dropped": 3,
            "tokens_per_s": 2 * tps,
            "tokens_per_s_per_device": tps,
            "peak_mem_bytes": mem,
            "peak_mem_kind": "max_memory_allocated",
            "optimizer_state_bytes_per_rank": 6 * MIB,
            "mfu": 0.4,
        },
        env=ENV,
        wall_time_s=12.5,
    )


OOM = Record(
    sweep_id="sw-test",
    point_id="ffff00000001",
    status="oom",
    overrides=["fsdp=none", "gc=false"],
    spec=spec("none", False),
    replay="python -m sweeper fsdp=none gc=false seq_len=4096",
    reason="CUDA out of memory on rank 1 in train step 0: tried to allocate 340.00 MiB",
    failure={
        "requested_bytes": 340 * MIB,
        "capacity_bytes": 95 * GIB,
        "free_bytes": 18 * MIB,
        "phase": "train",
        "rank": 1,
        "step": 0,
    },
)
ERROR = Record(
    sweep_id="sw-test",
    point_id="ffff00000002",
    status="error",
    error_kind="checkpoint-recompute",
    overrides=["fsdp=full_shard", "gc=true"],
    spec=spec("full_shard", True),
    replay="python -m sweeper fsdp=full_shard gc=true zero=3",
    reason="recomputed tensor has size 0 under ZeRO-3 with reentrant checkpointing",
)


def good_points() -> list[Record]:
    return [
        ok_point("aaaa00000001", "none", True, 5000.0, 3 * GIB),  # frontier: fastest
        ok_point("aaaa00000002", "full_shard", True, 4000.0, 2 * GIB),  # frontier: least memory
        ok_point("aaaa00000003", "full_shard", False, 3000.0, 3 * GIB),  # dominated by 1
        ok_point("aaaa00000004", "none", False, 4000.0, 2 * GIB, setup_ws=False),  # tie with 2: both frontier
    ]


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    for r in [*good_points(), OOM, ERROR]:
        SweepDir(tmp_path).write_record(r)
    (tmp_path / "points" / "eeee00000000").mkdir()  # launched, no result yet
    return tmp_path


def test_frame_has_the_schema_columns_in_order_and_exact_values():
    df = records_to_frame([*good_points(), OOM, ERROR]).set_index("point_id", drop=False)
    assert tuple(c for c in df.columns if c in FIXED) == FIXED
    for extra in ["use_reentrant", "wrapper", "oom_requested_bytes", "failure_phase", "wall_time_s"]:
        assert extra in df.columns
    assert df.loc["aaaa00000001", "peak_mem_gib"] == 3.0
    assert df.loc["aaaa00000002", "peak_mem_bytes"] == 2 * GIB
    assert df.loc["aaaa00000004", "world_size"] == 2  # from ranks_per_node * nodes
    assert df["on_frontier"].to_dict() == {
        "aaaa00000001": True,
        "aaaa00000002": True,
        "aaaa00000003": False,
        "aaaa00000004": True,
        "ffff00000001": False,
        "ffff00000002": False,
    }
    assert df.loc["ffff00000001", "oom_requested_bytes"] == 340 * MIB
    assert df.loc["ffff00000002", "error_kind"] == "checkpoint-recompute"


def test_empty_frame_still_has_the_columns():
    df = records_to_frame([])
    assert len(df) == 0 and tuple(df.columns) == FIXED


def test_build_report_writes_csv_and_parquet_with_the_same_rows(sweep: Path):
    build_report(sweep)
    csv = pd.read_csv(sweep / "results.csv", dtype=str, keep_default_na=False)
    pq = pd.read_parquet(sweep / "results.parquet")
    pq_as_csv = pd.read_csv(io.StringIO(pq.to_csv(index=False)), dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(csv, pq_as_csv)
    assert len(csv) == 7
    rows = csv.set_index("point_id")
    assert rows.loc["eeee00000000", "status"] == "pending"
    assert rows.loc["eeee00000000", "reason"] == "no result yet"
    assert rows.loc["aaaa00000002", "peak_mem_gib"] == "2.0"
    assert rows.loc["aaaa00000002", "peak_mem_bytes"] == str(2 * GIB)
    assert pq.set_index("point_id").loc["aaaa00000001", "peak_mem_gib"] == 3.0
    assert rows["on_frontier"].to_dict()["aaaa00000003"] == "False"


def test_report_md_marks_the_frontier_and_lists_failures_and_replays(sweep: Path):
    md = build_report(sweep)
    assert md == sweep / "report.md"
    text = read_md(md)
    assert "# Sweep sw-test" in text
    assert "node-7" in text and "4242" in text  # environment, SLURM job id
    assert "**fsdp**: `full_shard`, `none`" in text  # grid axis that varies
    results = text.split("## Results")[1].split("## Pending")[0]
    rows = rows_by_point(main_table(results))
    assert "★" in rows["aaaa00000001"] and "★" in rows["aaaa00000002"] and "★" in rows["aaaa00000004"]
    assert "★" not in rows["aaaa00000003"]
    # sorted by tokens/s/device, descending
    order = list(rows)
    assert order[0] == "aaaa00000001" and order[-1] == "aaaa00000003"
    assert list(rows_by_point(details(results))) == order  # the folded details, same order
    assert "| 3.00 |" in rows["aaaa00000001"]  # peak mem (GiB)
    assert "| 40.0 |" in rows["aaaa00000001"]  # MFU in percent
    assert "| 6.000 |" in rows["aaaa00000001"]  # optimizer state MiB
    assert "tokens/s/device" in results and "peak mem (GiB)" in results and "opt state/rank (MiB)" in results
    assert "max_memory_allocated" in results.split("★ = on the Pareto frontier")[1]  # peak-mem kind explained
    pending = text.split("## Pending")[1].split("## Failures")[0]  # apart: no result yet is not a failure
    assert "| no result yet | 1 |" in pending and "eeee00000000" in pending
    failures = text.split("## Failures")[1].split("## Replay")[0]
    assert OOM.reason in failures and ERROR.reason in failures and "eeee00000000" not in failures
    assert "checkpoint-recompute" in failures
    oom_row = rows_by_point(details(failures))["ffff00000001"]
    assert "| 340 |" in oom_row and "| 18 |" in oom_row and "| 95 |" in oom_row
    assert "| train |" in rows_by_point(main_table(failures))["ffff00000001"]  # phase
    assert "OOM requested (MiB)" in failures and "device capacity (GiB)" in failures
    for r in [*good_points(), OOM, ERROR]:
        assert r.replay in text.split("## Replay")[1]
    assert "median" in text.split("## How each number was measured")[1]


def test_report_html_is_self_contained_with_the_plot_data(sweep: Path):
    build_report(sweep, device_mem_gib=[("H100 80 GiB", 80.0)])
    page = (sweep / "report.html").read_text()
    assert not re.search(r"<script[^>]*\bsrc=", page)  # nothing loaded from a CDN
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.js inlined
    assert "Pareto frontier" in page and "H100 80 GiB" in page
    assert "peak mem: 3.00 GiB" in page and "\\u003cbr\\u003efsdp=full_shard" in page  # hover: numbers, overrides
    assert "ffff00000001" in page and OOM.reason.split(":")[0] in page


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_png_is_written(sweep: Path):
    build_report(sweep)
    assert_png(sweep / "frontier.png")


def test_a_sweep_of_failures_only_has_no_frontier(tmp_path: Path):
    SweepDir(tmp_path).write_record(OOM)
    SweepDir(tmp_path).write_record(ERROR)
    text = read_md(build_report(tmp_path))
    assert "No point finished with status ok" in text and "★ |" not in text
    assert OOM.reason in text and ERROR.reason in text
    assert not (tmp_path / "frontier.png").exists()  # nothing to draw a frontier of: no matplotlib
    assert not pd.read_csv(tmp_path / "results.csv")["on_frontier"].any()


def test_an_empty_sweep_still_gets_a_report(tmp_path: Path):
    (tmp_path / "points").mkdir()
    text = read_md(build_report(tmp_path))
    assert "No points" in text
    assert len(pd.read_parquet(tmp_path / "results.parquet")) == 0
    assert not (tmp_path / "frontier.png").exists()
    assert "<script src=" not in (tmp_path / "report.html").read_text()


def test_main_refuses_a_folder_without_points(tmp_path: Path, capsys):
    assert main([str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_a_lone_ok_point_gets_no_png_and_the_report_says_so_and_a_stale_png_goes(tmp_path: Path):
    lone = good_points()[0]
    SweepDir(tmp_path).write_record(lone)
    (tmp_path / "frontier.png").write_bytes(b"stale")
    text = read_md(build_report(tmp_path))
    assert not (tmp_path / "frontier.png").exists()
    assert "No plot: a single point has nothing to be compared with" in text and "Plot: `report.html`" not in text
    page = (tmp_path / "report.html").read_text()
    assert "Plotly.newPlot" not in page and "No plot: a single point" in page  # no plotly for a lone point
    assert lone.point_id in page  # its row is in the table


def test_one_ok_point_beside_a_failed_one_keeps_the_interactive_plot_without_a_png(tmp_path: Path):
    ok, failed = good_points()[0], good_points()[1]
    failed.status, failed.reason, failed.metrics = "oom", "CUDA out of memory (fake record: no GPU here)", {}
    SweepDir(tmp_path).write_record(ok)
    SweepDir(tmp_path).write_record(failed)
    text = read_md(build_report(tmp_path))
    assert not (tmp_path / "frontier.png").exists()
    assert "no `frontier.png`: fewer than 2 ok points" in text and "Plot: `report.html`" in text
    assert "Plotly.newPlot" in (tmp_path / "report.html").read_text()  # the failed point is drawn on its strip


def test_writes_are_atomic_and_leave_no_temp_files(sweep: Path):
    build_report(sweep)
    build_report(sweep)  # rebuilding replaces the files in place
    assert sorted(p.name for p in sweep.iterdir() if p.is_file()) == [
        "frontier.png",
        "report.html",
        "report.md",
        "results.csv",
        "results.parquet",
    ]


def big_sweep(sweep_dir: Path) -> list[Record]:
    """500 points: 420 ok (12 slow low-memory ones on a frontier staircase, then 408 faster ones needing more than
    20 GiB, of which only the fastest, which needs the least, is on the frontier), 60 OOMs and 20 errors."""
    records = []
    for i in range(420):
        tps = 100.0 * (i + 1) if i < 12 else 2000.0 + (i * 37) % 3000
        mem = (i + 1) * GIB if i < 12 else 20 * GIB + int(5000 - tps) * MIB
        records.append(ok_point(f"{i:012x}", "none", i % 2 == 0, tps, mem))
    for i in range(420, 500):
        status = "oom" if i < 480 else "error"
        records.append(
            Record(sweep_id="sw-big", point_id=f"{i:012x}", status=status, reason=f"failure {i}", replay=f"replay {i}")
        )
    for r in records:  # as write_record would, without its 500 fsyncs
        (sweep_dir / "points" / r.point_id).mkdir(parents=True)
        (sweep_dir / "points" / r.point_id / "result.json").write_text(json.dumps(r.to_dict()))
    return records


def test_a_big_sweep_shows_at_most_max_rows_per_table_and_every_frontier_point(tmp_path: Path):
    records = big_sweep(tmp_path)
    text = read_md(build_report(tmp_path, max_rows=50))
    csv = pd.read_csv(tmp_path / "results.csv", dtype={"point_id": str})
    assert len(csv) == 500 and len(pd.read_parquet(tmp_path / "results.parquet")) == 500
    frontier = set(csv.loc[csv["on_frontier"], "point_id"])
    slow = {f"{i:012x}" for i in range(12)}
    assert slow < frontier and len(frontier) == 13  # the slow ones are the slowest of all ok points

    results = text.split("## Results")[1].split("## Failures")[0]
    shown = list(rows_by_point(main_table(results)))
    assert len(shown) == 50 and frontier <= set(shown)
    ok = csv[csv["status"] == "ok"]
    others = ok[~ok["on_frontier"]].sort_values("tokens_per_s_per_device", ascending=False, kind="stable")
    assert set(shown) - frontier == set(others["point_id"][: 50 - len(frontier)])
    assert "Showing 50 of 420 ok points" in results and "**370 rows left out**" in results
    assert "`results.csv` / `results.parquet`" in results

    failures = text.split("## Failures")[1].split("## Replay")[0]
    rows = [line for line in failures.splitlines() if re.match(r"\| (oom|error) ", line)]
    assert len(rows) == 50 and any("| oom |" in r for r in rows) and any("| error |" in r for r in rows)
    assert "**30 rows left out**" in failures and "`results.csv` / `results.parquet`" in failures

    replay = text.split("## Replay")[1].split("## How each number was measured")[0]
    commands = [line for line in replay.splitlines() if line.startswith("# ")]
    assert len(commands) == 50 and "**450 commands left out**" in replay
    assert all(f"# {pid} (ok)" in replay for pid in frontier)

    page = (tmp_path / "report.html").read_text()
    assert "<strong>370 rows left out</strong>" in page and "<strong>30 rows left out</strong>" in page
    assert "peak mem: 1.00 GiB" in page  # every point is still plotted

    everything = read_md(build_report(tmp_path, max_rows=None))
    assert "left out" not in everything
    assert all(f"| {r.point_id} |" in everything and r.replay in everything for r in records)


# ---- the report of a tiny CPU sweep (peaks of a few MiB, measured MFU peaks, no failures) ----------------------

MEASURED = "measured: fp32 matmul 512x512, 1 thread(s), best of 0.3 s"


def cpu_points() -> list[Record]:
    """Four ok points like the default sweep's: peaks of 8-13 MiB, a measured MFU peak per point, Hydra's ``True``."""
    points = [
        ok_point("cccc00000001", "none", False, 10230.0, 13825952),
        ok_point("cccc00000002", "none", True, 7609.0, 9332326),  # 8.90 MiB
        ok_point("cccc00000003", "full_shard", False, 3261.0, 12820768),
        ok_point("cccc00000004", "full_shard", True, 3140.0, 8340768),
    ]
    for r, peak in zip(points, [79.35e9, 67.34e9, 74.28e9, 76.26e9], strict=True):
        r.metrics |= {
            "mfu_peak_flops": peak,
            "mfu_peak_source": MEASURED,
            "peak_mem_kind": "cpu_tensor_bytes_memtracker",
        }
        r.overrides = [o.replace("=true", "=True").replace("=false", "=False") for o in r.overrides]  # as Hydra
    return points


@pytest.fixture
def cpu_sweep(tmp_path: Path) -> Path:
    sweep_dir = tmp_path / "cpu"  # not tmp_path itself: a test may use the `sweep` fixture too
    for r in cpu_points():
        SweepDir(sweep_dir).write_record(r)
    return sweep_dir


def section(text: str, title: str) -> str:
    return text.split(f"## {title}")[1].split("\n## ")[0]


def test_memory_below_one_gib_is_shown_in_mib_everywhere(cpu_sweep: Path):
    text = read_md(build_report(cpu_sweep))
    results = section(text, "Results")
    assert "peak mem (MiB)" in results and "(GiB)" not in results
    row = next(line for line in results.splitlines() if "cccc00000002" in line)
    assert "| 8.90 |" in row  # 9332326 bytes = 8.90 MiB, not 0.00869 GiB
    assert "Shown in MiB" in section(text, "How each number was measured")
    page = (cpu_sweep / "report.html").read_text()
    assert "peak memory per device (MiB)" in page and "peak memory per device (GiB)" not in page
    assert "peak mem: 8.90 MiB" in page and "peak mem: 13.2 MiB" in page
    csv = pd.read_csv(cpu_sweep / "results.csv", dtype={"point_id": str}).set_index("point_id")
    assert csv.loc["cccc00000002", "peak_mem_bytes"] == 9332326  # the data files keep bytes and GiB
    assert csv.loc["cccc00000002", "peak_mem_gib"] == pytest.approx(9332326 / GIB)

    df = records_to_frame(cpu_points())
    data = _plot_data(df, ["fsdp", "gc"], [], _mem_unit(df))
    assert data.ok.set_index("label").loc["fsdp=none gc=true", "x"] == pytest.approx(9332326 / MIB)
    assert _png_figure(data).axes[0].get_xlabel() == "peak memory per device (MiB)"


def test_memory_unit_switches_to_gib_at_one_gib():
    def header(peak_bytes: int) -> list[str]:
        df = records_to_frame([ok_point("dddd00000001", "none", True, 100.0, peak_bytes)])
        return [c for c in results_table(df) if c.startswith("peak mem (")]

    assert header(GIB - 1) == ["peak mem (MiB)"]
    assert header(GIB) == ["peak mem (GiB)"]
    df = records_to_frame(good_points())
    assert _png_figure(_plot_data(df, [], [])).axes[0].get_xlabel() == "peak memory per device (GiB)"


def test_mfu_peak_note_names_the_measurement_once_with_the_range(cpu_sweep: Path):
    text = read_md(build_report(cpu_sweep))
    notes = section(text, "How each number was measured")
    assert notes.count("fp32 matmul") == 1
    assert (
        "MFU peak: measured on this host (fp32 matmul 512x512, 1 thread, best of 0.3 s), between 0.0673 and "
        "0.0794 TFLOP/s; each point's peak is in the `mfu_peak_flop_per_s` / `mfu_peak_source` columns of results.csv."
    ) in notes
    results = section(text, "Results")
    assert "MFU peak (TFLOP/s)" in results  # the peaks differ by more than 1 %
    assert "| 0.0673 |" in rows_by_point(details(results))["cccc00000002"]


def test_a_datasheet_peak_is_stated_once_and_gets_no_column():
    points = good_points()
    for r in points:
        r.metrics |= {"mfu_peak_flops": 989.4e12, "mfu_peak_source": "datasheet: H100 SXM bf16 dense"}
    notes = _method_notes(records_to_frame(points))
    assert [n for n in notes if n.startswith("MFU peak")] == [
        "MFU peak: datasheet: H100 SXM bf16 dense, 989.4 TFLOP/s; each point's peak is in the `mfu_peak_flop_per_s` / "
        "`mfu_peak_source` columns of results.csv."
    ]
    assert "MFU peak (TFLOP/s)" not in results_table(records_to_frame(points))


def test_no_failure_strip_when_every_point_is_ok(cpu_sweep: Path, sweep: Path):
    build_report(cpu_sweep)
    assert "not measured" not in (cpu_sweep / "report.html").read_text()
    df = records_to_frame(cpu_points())
    assert len(_png_figure(_plot_data(df, ["fsdp", "gc"], [])).axes) == 1

    build_report(sweep)  # with failures the strip stays
    assert "not measured: OOM at device capacity" in (sweep / "report.html").read_text()
    df = records_to_frame([*good_points(), OOM, ERROR])
    assert len(_png_figure(_plot_data(df, ["fsdp", "gc"], [])).axes) == 2


def test_point_labels_stay_inside_the_plot():
    for records in (cpu_points(), [*good_points(), OOM, ERROR]):
        df = records_to_frame(records)
        axes = ["fsdp", "gc", "model", "precision"]  # longer labels than the default sweep's
        fig = _png_figure(_plot_data(df, axes, []))
        fig.draw_without_rendering()
        renderer = fig._get_renderer()
        labels = [(ax, t) for ax in fig.axes for t in ax.texts if "fsdp=" in t.get_text()]
        assert len(labels) >= len(records) - 1  # every point is labelled (one failure has no spec)
        for ax, t in labels:
            box, tb = ax.get_window_extent(renderer), t.get_window_extent(renderer)
            inner = box.padded(-2)  # not touching the border either
            assert inner.x0 <= tb.x0 and tb.x1 <= inner.x1 and inner.y0 <= tb.y0 and tb.y1 <= inner.y1, t.get_text()


def test_frontier_footnote_gives_the_full_definition(sweep: Path):
    text = read_md(build_report(sweep))
    assert (
        "★ = on the Pareto frontier: built from the least peak memory up, a point is on it unless a frontier point "
        "with less peak memory is faster (its tokens/s per device range, from the 95 % confidence interval of its "
        "median step time, p10-p90 for records without one, lies entirely above this one's) or tied with it (the "
        "ranges overlap), or an ok point with the same peak memory is faster; a point dominated only by points off "
        "the frontier stays on it (docs/report.md)."
    ) in text


def test_the_grid_lists_at_most_20_values_of_a_key(tmp_path: Path):
    points = []
    for seed in range(60):
        r = ok_point(f"{seed:012x}", "none", True, 1000.0 + seed, GIB)
        r.spec = {**r.spec, "seed": seed}
        points.append(r)
    for r in points:
        (tmp_path / "points" / r.point_id).mkdir(parents=True)
        (tmp_path / "points" / r.point_id / "result.json").write_text(json.dumps(r.to_dict()))
    grid = section(read_md(build_report(tmp_path)), "Grid")
    line = next(line for line in grid.splitlines() if line.startswith("- **seed**"))
    assert "`19`, … and 40 more (up to `59`)" in line and "`20`" not in line
    huge = _grid_values(list(range(10_000)))
    assert len(huge) < 200 and huge.endswith("… and 9,980 more (up to `9999`)")


def test_booleans_are_spelled_as_on_the_command_line(cpu_sweep: Path, sweep: Path):
    text = read_md(build_report(cpu_sweep))
    assert "- **gc**: `false`, `true`" in section(text, "Grid")
    assert "`use_reentrant=false`" in section(text, "Grid")
    rows = list(rows_by_point(main_table(section(text, "Results"))).values())
    assert len(rows) == 4 and all(("| true |" in r) != ("| false |" in r) for r in rows)
    assert "True" not in section(text, "Results") and "False" not in section(text, "Results")
    assert "# cccc00000002 (ok) fsdp=none gc=true" in section(text, "Replay")
    page = (cpu_sweep / "report.html").read_text()
    assert "\\u003cbr\\u003egc=true" in page and "gc=True" not in page
    df = records_to_frame(cpu_points())
    assert sorted(_plot_data(df, ["fsdp", "gc"], []).ok["label"]) == [
        "fsdp=full_shard gc=false",
        "fsdp=full_shard gc=true",
        "fsdp=none gc=false",
        "fsdp=none gc=true",
    ]
    failures = section(read_md(build_report(sweep)), "Failures")
    assert "| true |" in failures and "| false |" in failures and "True" not in failures
