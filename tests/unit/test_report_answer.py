"""The report answers first: the fastest, the least memory, the fastest that fits, failures per status; then the
plot (with the step-time spread as error bars) and the table; the metadata last."""

import re
from pathlib import Path

from sweeper.report import build_report
from sweeper.report.headline import answer
from sweeper.report.plot_data import plot_data
from sweeper.report.plot_html import plot_html
from sweeper.report.plot_png import png_figure
from sweeper.results.row import records_to_frame
from sweeper.results.sweepdir import SweepDir
from tests.unit.test_report import ERROR, GIB, OOM, good_points, ok_point, read_md

AXES = ["fsdp", "gc"]


def test_the_first_section_is_the_answer_and_the_metadata_comes_last(tmp_path: Path):
    for r in [*good_points(), OOM, ERROR]:
        SweepDir(tmp_path).write_record(r)
    (tmp_path / "sweep.json").write_text('{"sweep_id": "sw-test", "command": "python -m sweeper -m gc=true,false"}')
    text = read_md(build_report(tmp_path, device_mem_gib=[("small 2.5 GiB", 2.5)]))
    first = text.split("\n## ")[0]
    assert "Fastest: `fsdp=none gc=true` (5,000 tokens/s per device, 3.00 GiB peak)" in first
    assert "least memory: `fsdp=full_shard gc=true` (4,000 tokens/s per device, 2.00 GiB peak)" in first
    assert "tied with `fsdp=none gc=false`" in first  # same memory, overlapping spreads
    assert "fastest that fits small 2.5 GiB (2.50 GiB): `fsdp=full_shard gc=true`" in first
    assert "6 points: 4 ok (3 on the frontier); 1 error, 1 oom" in first
    titles = re.findall(r"^## (.+)$", text, flags=re.M)
    assert titles[0] == "Results" and titles.index("Failures") < titles.index("Grid")
    assert titles[-3:] == ["Grid", "Environment", "Sweep"]  # metadata last
    assert "python -m sweeper -m gc=true,false" in text.split("## Sweep")[1]
    results = text.split("## Results")[1].split("\n### ")[0]
    marks = {m[1]: m[0] for m in re.findall(r"^\| (★ tie|★|) \|.*\| ([0-9a-f]{12}) \|$", results, flags=re.M)}
    assert marks == {"aaaa00000001": "★", "aaaa00000002": "★ tie", "aaaa00000004": "★ tie", "aaaa00000003": ""}
    html = (tmp_path / "report.html").read_text()
    assert html.index("Fastest:") < html.index("Plotly.newPlot") < html.index("<h2>Grid</h2>")


def test_the_fastest_in_a_tie_says_so_what_to_pick_and_what_to_rerun():
    fast = ok_point("aaaa00000011", "none", True, 5000.0, 3 * GIB)
    close = ok_point("aaaa00000012", "full_shard", True, 4950.0, 2 * GIB)  # within the spread, less memory
    df = records_to_frame([fast, close])
    assert df["on_frontier"].tolist() == [False, True]  # the median does not break the tie; memory does
    (first, counts) = answer(df, AXES, ("GiB", GIB))
    assert first.startswith(
        "Fastest: `fsdp=none gc=true` (5,000 tokens/s per device, 3.00 GiB peak), tied with `fsdp=full_shard gc=true`"
    )
    # what to pick among points the measurement cannot tell apart, and what to rerun; never "fastest, but off the
    # frontier" (issue 36: the sentence contradicted the frontier's meaning)
    assert (
        "the measurements cannot tell them apart, so pick `fsdp=full_shard gc=true`, as fast within the intervals "
        "with the least memory of them; to tell them apart, rerun these points with `timed_steps=16`"
    ) in first
    assert "off the frontier" not in first
    assert counts == "2 points: 2 ok (1 on the frontier)."


def test_no_ok_point_and_a_capacity_nothing_fits():
    assert answer(records_to_frame([OOM, ERROR]), AXES, ("GiB", GIB))[0].startswith("No point finished")
    df = records_to_frame([ok_point("aaaa00000021", "none", True, 100.0, 3 * GIB)])
    assert "no ok point fits tiny (1.00 GiB)" in answer(df, AXES, ("GiB", GIB), [("tiny", 1.0)])[0]


def test_the_plot_draws_the_spread_as_error_bars():
    df = records_to_frame([*good_points(), OOM, ERROR])
    data = plot_data(df, AXES, [("H100 80 GiB", 80.0)])
    row = data.ok.set_index("label").loc["fsdp=none gc=true"]
    # 5,000 tokens/s at the median; the p90 step is 3 % slower, the p10 2 % faster
    assert abs(row["y_low"] - 5000 / 1.03) < 1e-6 and abs(row["y_high"] - 5000 / 0.98) < 1e-6
    top = png_figure(data).axes[0]
    assert len(top.containers) == 1 and top.containers[0].has_yerr
    assert "p10-p90 step-time spread" in [t.get_text() for t in top.get_legend().get_texts()]
    page = plot_html(data)
    assert '"arrayminus"' in page and "tied with: aaaa00000004" in page


def test_a_tied_fastest_with_the_least_memory_is_the_pick_and_the_rerun_doubles_the_timed_steps():
    fast = ok_point("aaaa00000031", "none", True, 5000.0, 2 * GIB)
    close = ok_point("aaaa00000032", "full_shard", True, 4950.0, 3 * GIB)  # as fast within the spread, more memory
    close.metrics["timed_steps"] = 12
    (first, _) = answer(records_to_frame([fast, close]), AXES, ("GiB", GIB))
    assert "tied with `fsdp=full_shard gc=true`" in first
    assert "so pick it, the least memory of them; to tell them apart, rerun these points with `timed_steps=24`" in first
