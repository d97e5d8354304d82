"""The plot's axes are the measured points': capacity planning's predicted markers never squash them.

On CPU the default ``plan.efficiency`` can predict several times the measured tokens/s; the answer (the measured
points) must still fill the plot, and the predictions that fall outside are hidden (report.html, one legend click
shows them) or clipped (frontier.png), with a note saying how many. Predictions close to the measurements still
widen the axes a little and stay shown. Records are built by hand (as in test_predicted_report.py).
"""

from __future__ import annotations

import json
import re

import pytest

from sweeper.report.plot_data import PREDICTED_STRETCH, Y_HEADROOM, plot_data
from sweeper.report.plot_html import plot_html
from sweeper.report.plot_png import png_figure
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame

MIB = 2**20
SPEC = {"model": "tiny", "fsdp": "none", "gc": False, "per_device_batch_size": 4, "seq_len": 128, "device": "cpu"}


def _point(pid: str, batch: int, tps: float, peak_mib: float, pred_tps: float, pred_peak_mib: float) -> Record:
    """An ok point measured at ``tps`` tokens/s/device and ``peak_mib`` MiB, predicted at the ``pred_*`` ones."""
    return Record(
        sweep_id="sw-range",
        point_id=pid,
        status="ok",
        overrides=[f"per_device_batch_size={batch}"],
        spec={**SPEC, "per_device_batch_size": batch},
        ran={"world_size": 2, "device_type": "cpu"},
        metrics={
            "tokens_per_s_per_device": tps,
            "peak_mem_bytes": int(peak_mib * MIB),
            "step_time_s_median": 0.1,
            "step_time_s_p10": 0.095,
            "step_time_s_p90": 0.11,
            "timed_steps": 8,
        },
        predicted={
            "peak_bytes": int(pred_peak_mib * MIB),
            "device_bytes": int(pred_peak_mib * MIB),
            "tokens_per_s_per_device": pred_tps,
            "step_time_s": 0.01,
        },
    )


def _far():
    """Two measured points near 20-24k tokens/s, predicted at about 8x their throughput (what CPU sweeps show)."""
    return records_to_frame(
        [
            _point("aaaa00000001", 4, 24_000.0, 13.0, 190_000.0, 13.1),
            _point("aaaa00000002", 8, 20_000.0, 9.0, 160_000.0, 9.1),
        ]
    )


def _figure(page: str) -> tuple[list[dict], dict]:
    """The traces and the layout that ``plot_html``'s ``Plotly.newPlot(id, data, layout, config)`` call draws."""
    start = page.index("Plotly.newPlot(")
    dec = json.JSONDecoder()
    pos = page.index("[", start)
    data, end = dec.raw_decode(page, pos)
    layout, _ = dec.raw_decode(page, re.compile(r"\s*,\s*").match(page, end).end())
    return data, layout


def test_far_off_predictions_leave_the_axes_to_the_measured_points():
    df = _far()
    data = plot_data(df, ["per_device_batch_size"], [], ("MiB", MIB))
    top_bar = float(data.ok["y_high"].max())  # the highest measured point's p10 step time, in tokens/s/device
    assert data.y_max == pytest.approx(top_bar * Y_HEADROOM)
    assert data.y_max < float(data.predicted["py"].min())  # not stretched towards the predictions
    assert float(data.ok["y"].max()) / data.y_max > 0.8  # the measured points fill the plot's height
    assert data.x_max < 13.1 * 1.2 and data.x_max > 13.0
    assert data.predicted_outside.sum() == 2
    assert data.predicted_note.startswith("2 of 2 predicted markers fall outside the axes")
    assert "8.0x the measured tokens/s" in data.predicted_note  # 160k / 20k, the farthest

    traces, layout = _figure(plot_html(data))
    assert layout["yaxis"]["range"] == pytest.approx([0, data.y_max])
    assert layout["xaxis"]["range"] == pytest.approx([0, data.x_max])
    by_name = {t.get("name"): t for t in traces}
    assert by_name["predicted"]["visible"] == "legendonly"  # in the legend, hidden until clicked
    assert by_name["prediction to measurement"]["visible"] == "legendonly"
    assert by_name["predicted"]["legendgroup"] == by_name["prediction to measurement"]["legendgroup"]
    assert by_name["ok"].get("visible", True) is True and by_name["Pareto frontier"].get("visible", True) is True
    assert "2 of 2 predicted markers fall outside" in json.dumps(layout["annotations"])

    fig = png_figure(data)
    top = fig.axes[0]
    assert top.get_ylim() == pytest.approx((0, data.y_max))
    assert top.get_xlim() == pytest.approx((0, data.x_max))
    assert fig._supxlabel is not None and fig._supxlabel.get_text().startswith("2 of 2 predicted markers")


def test_predictions_near_the_measurements_widen_the_axes_a_little_and_stay_shown():
    df = records_to_frame(
        [
            _point("aaaa00000001", 4, 24_000.0, 13.0, 30_000.0, 14.0),  # +25 % tokens/s
            _point("aaaa00000002", 8, 20_000.0, 9.0, 21_000.0, 9.5),
        ]
    )
    data = plot_data(df, ["per_device_batch_size"], [], ("MiB", MIB))
    measured_top = float(data.ok["y_high"].max()) * Y_HEADROOM
    assert measured_top < data.y_max <= measured_top * PREDICTED_STRETCH
    assert data.y_max > 30_000.0 and data.x_max > 14.0
    assert not data.predicted_outside.any() and data.predicted_note == ""
    traces, layout = _figure(plot_html(data))
    assert {t["name"]: t.get("visible", True) for t in traces}["predicted"] is True
    assert layout["yaxis"]["range"] == pytest.approx([0, data.y_max])
    assert png_figure(data)._supxlabel is None


def test_without_predictions_the_axes_are_the_measured_ones():
    df = records_to_frame([_point("aaaa00000001", 4, 24_000.0, 13.0, 1.0, 1.0)]).drop(
        columns=["predicted_tokens_per_s_per_device"]
    )
    data = plot_data(df, ["per_device_batch_size"], [], ("MiB", MIB))
    assert not len(data.predicted)
    assert data.y_max == pytest.approx(float(data.ok["y_high"].max()) * Y_HEADROOM)
    assert data.predicted_note == ""


def _bars(fig) -> int:
    """How many interval bars the top axes of ``fig`` draw (errorbar's LineCollection segments)."""
    from matplotlib.collections import LineCollection

    return sum(len(c.get_segments()) for c in fig.axes[0].collections if isinstance(c, LineCollection))


def test_frontier_png_bars_every_interval_and_past_max_bars_only_the_frontiers_saying_so():
    from sweeper.report.plot_png import MAX_BARS

    few = plot_data(_far(), ["per_device_batch_size"], [], ("MiB", MIB))
    assert _bars(png_figure(few)) == 2
    many = records_to_frame(
        [_point(f"bbbb{i:08d}", 4 + i, 10_000.0 + 7 * (i % 97), 5.0 + (i * 37) % 200, 1.0, 1.0) for i in range(600)]
    )
    data = plot_data(many, ["per_device_batch_size"], [], ("MiB", MIB))
    n_front = int(data.ok["on_frontier"].sum())
    assert len(data.ok) == 600 > MAX_BARS and 0 < n_front < 600
    fig = png_figure(data)
    assert _bars(fig) == n_front
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.endswith("(frontier points)") for t in labels), labels
