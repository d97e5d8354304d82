"""Predicted beside measured: the row's typed predicted_* columns and relative errors, and the report's
predicted-vs-measured table columns, plot markers, error summary and pruned section.

Records are built by hand here (the model's numbers as ``Record.predicted`` holds them); the model itself and
the gate rule are tested in test_planning_gate.py, and a real pruned sweep in tests/integration/test_sweep_prune.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from sweeper.report import build_report
from sweeper.report.plot_data import plot_data
from sweeper.report.plot_html import plot_html
from sweeper.report.plot_png import png_figure
from sweeper.report.predicted import error_stats, summary_lines
from sweeper.report.tables import failures_table, pruned_table, results_table
from sweeper.results.columns import BY_NAME, relative_error
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame, row_from_record
from sweeper.results.sweepdir import SweepDir

MIB = 2**20
SPEC = {"model": "tiny", "fsdp": "none", "gc": False, "per_device_batch_size": 4, "seq_len": 128, "device": "cpu"}


def predicted(peak: int, tps: float | None, fits: bool | None = True, **more) -> dict:
    """``Record.predicted`` as Prediction.to_record() gives it: keys without the prefix, terms as <term>_bytes."""
    return {
        "peak_bytes": peak,
        "device_bytes": peak,
        "device_mem_bytes": 64 * MIB,
        "margin": 0.05,
        "fits": fits,
        "peak_phase": "optimizer step",
        "max_per_device_batch_size": 16,
        "tokens_per_s_per_device": tps,
        "step_time_s": 0.1,
        "mfu": 0.3,
        "activations_bytes": peak // 4,
        "note": None,
        **more,
    }


def ok(pid: str, batch: int, tps: float, peak: int, pred: dict | None) -> Record:
    return Record(
        sweep_id="sw-pred",
        point_id=pid,
        status="ok",
        overrides=[f"per_device_batch_size={batch}"],
        spec={**SPEC, "per_device_batch_size": batch},
        ran={"world_size": 2, "device_type": "cpu"},
        metrics={"tokens_per_s_per_device": tps, "peak_mem_bytes": peak, "step_time_s_median": 0.1},
        predicted=pred,
    )


def pruned(pid: str, batch: int, need: int) -> Record:
    return Record(
        sweep_id="sw-pred",
        point_id=pid,
        status="pruned",
        overrides=[f"per_device_batch_size={batch}"],
        spec={**SPEC, "per_device_batch_size": batch},
        reason=f"predicted not to fit (prune=true): {need} bytes",
        failure={"keys": ["prune", "cluster.gpu_mem_gib"], "rule": "C01"},
        predicted=predicted(need, None, fits=False, max_per_device_batch_size=8),
    )


OOM = Record(
    sweep_id="sw-pred",
    point_id="ffff00000001",
    status="oom",
    spec={**SPEC, "per_device_batch_size": 32},
    overrides=["per_device_batch_size=32"],
    reason="out of memory",
    metrics={"peak_mem_bytes": 10 * MIB, "tokens_per_s_per_device": 5.0},
    predicted=predicted(20 * MIB, 80.0),
)


def points() -> list[Record]:
    return [
        ok("aaaa00000001", 1, 1000.0, 10 * MIB, predicted(11 * MIB, 900.0)),  # +10 %, -10 %
        ok("aaaa00000002", 4, 2000.0, 20 * MIB, predicted(15 * MIB, 2500.0)),  # -25 %, +25 %
        ok("aaaa00000003", 8, 3000.0, 30 * MIB, None),  # no prediction: not counted
        pruned("bbbb00000001", 64, 200 * MIB),
        OOM,
    ]


def test_relative_error_is_signed_over_the_measurement_and_none_without_two_numbers():
    assert relative_error(11, 10) == pytest.approx(0.1)
    assert relative_error(9.0, 10) == pytest.approx(-0.1)
    for args in [(None, 10), (5, None), (5, 0), (True, 1), (float("nan"), 1), (1, float("inf"))]:
        assert relative_error(*args) is None, args


def test_predicted_columns_are_typed_and_the_errors_are_computed_for_ok_rows_only():
    df = records_to_frame(points()).set_index("point_id", drop=False)
    assert str(df["predicted_fits"].dtype) == "boolean"
    for col in ("predicted_peak_bytes", "predicted_max_per_device_batch_size", "predicted_activations_bytes"):
        assert str(df[col].dtype) == "Int64", col
    for col in ("predicted_tokens_per_s_per_device", "predicted_step_time_s", "predicted_mfu", "peak_mem_rel_error"):
        assert str(df[col].dtype) == "float64", col
    assert df["predicted_peak_phase"].dropna().map(type).eq(str).all()
    for pid, rec in ((r.point_id, r) for r in points() if r.status == "ok" and r.predicted):
        m, p = rec.metrics, rec.predicted
        assert df.loc[pid, "peak_mem_rel_error"] == pytest.approx(
            (p["peak_bytes"] - m["peak_mem_bytes"]) / m["peak_mem_bytes"]
        )
        want = (p["tokens_per_s_per_device"] - m["tokens_per_s_per_device"]) / m["tokens_per_s_per_device"]
        assert df.loc[pid, "tokens_per_s_per_device_rel_error"] == pytest.approx(want)
    # an oom row has numbers on both sides, but no error: its measurement is not a finished point's
    assert math.isnan(df.loc["ffff00000001", "peak_mem_rel_error"])
    assert bool(df.loc["bbbb00000001", "predicted_fits"]) is False
    assert pd.isna(df.loc["aaaa00000003", "predicted_peak_bytes"])


def test_predicted_columns_sit_before_schema_version_with_the_terms_after_the_typed_ones():
    names = list(records_to_frame(points()).columns)
    assert names[-1] == "schema_version"
    block = names[names.index("predicted_peak_bytes") : -1]
    assert block[:4] == [
        "predicted_peak_bytes",
        "peak_mem_rel_error",
        "predicted_tokens_per_s_per_device",
        "tokens_per_s_per_device_rel_error",
    ]
    assert block[-1] == "predicted_activations_bytes"  # a term: not in the schema, Int64 by its name
    assert "predicted_activations_bytes" not in BY_NAME
    assert all(c in BY_NAME for c in block[:-1])


def test_every_sweep_has_the_interface_columns_even_without_predictions():
    df = records_to_frame([ok("aaaa00000009", 1, 1.0, 1, None)])
    for col in ("predicted_peak_bytes", "predicted_tokens_per_s_per_device", "peak_mem_rel_error"):
        assert col in df.columns and df[col].isna().all()


def test_a_nested_predicted_value_becomes_json_not_a_python_repr():
    rec = ok("aaaa00000010", 1, 1.0, 1, {"peak_bytes": 1, "terms": {"logits": 5}})
    assert row_from_record(rec)["predicted_terms"] == '{"logits": 5}'


def test_csv_and_parquet_carry_the_predicted_columns(tmp_path: Path):
    for r in points():
        SweepDir(tmp_path).write_record(r)
    build_report(tmp_path)
    csv = pd.read_csv(tmp_path / "results.csv", dtype={"point_id": str}).set_index("point_id")
    assert csv.loc["aaaa00000001", "predicted_peak_bytes"] == 11 * MIB
    assert csv.loc["aaaa00000001", "predicted_tokens_per_s_per_device"] == 900.0
    assert csv.loc["aaaa00000001", "peak_mem_rel_error"] == pytest.approx(0.1)
    table = pq.read_table(tmp_path / "results.parquet")
    assert str(table.schema.field("predicted_fits").type) == "bool"
    assert str(table.schema.field("predicted_peak_bytes").type) == "int64"
    assert table.schema.field("peak_mem_rel_error").metadata[b"unit"] == b"fraction"


def test_the_error_summary_gives_median_and_max_over_the_predicted_ok_points():
    mem, tps = error_stats(records_to_frame(points()))
    assert (mem.n, tps.n) == (2, 2)  # the unpredicted ok point and the oom are not counted
    assert mem.median_abs == pytest.approx((0.1 + 0.25) / 2) and mem.max_abs == pytest.approx(0.25)
    assert mem.worst == ("aaaa00000002", pytest.approx(-0.25))
    assert tps.worst == ("aaaa00000002", pytest.approx(0.25))
    assert "median |error| 17.5 %, max 25.0 % (-25.0 % on aaaa00000002), 2 ok points" in mem.line()


def test_results_table_shows_predicted_numbers_and_signed_errors():
    table = results_table(records_to_frame(points()), ["per_device_batch_size"]).set_index("point")
    assert table.loc["aaaa00000001", "predicted peak (MiB)"] == "11.0"
    assert table.loc["aaaa00000001", "peak error (%)"] == "+10.0"
    assert table.loc["aaaa00000002", "tokens/s error (%)"] == "+25.0"
    assert table.loc["aaaa00000003", "predicted tokens/s/device"] == "—"


def test_pruned_points_are_listed_apart_with_predicted_bytes_capacity_and_margin():
    df = records_to_frame(points())
    assert "bbbb00000001" not in failures_table(df, ["per_device_batch_size"])["point"].tolist()
    table = pruned_table(df, ["per_device_batch_size"]).set_index("point")
    row = table.loc["bbbb00000001"]
    assert row["per_device_batch_size"] == "64"
    assert row["predicted (MiB)"] == "200" and row["capacity (MiB)"] == "64.0"
    assert row["margin (%)"] == "5" and row["usable (MiB)"] == "60.8"
    assert row["largest batch predicted to fit"] == "8"


def test_the_report_has_predicted_vs_measured_and_pruned_sections(tmp_path: Path):
    for r in points():
        SweepDir(tmp_path).write_record(r)
    text = build_report(tmp_path).read_text()
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    assert "median \\|error\\| 17.5 %" in sections["Predicted vs measured"]
    pruned_section = sections["Pruned before launch"]
    assert "bbbb00000001" in pruned_section and "C01" in pruned_section
    assert "bbbb00000001" not in sections["Failures"] and "ffff00000001" in sections["Failures"]
    # the model's errors are the predicted-vs-measured section's (issue 36: +97 % beside a measurement in the first
    # table read as a failure); the results table holds measurements alone
    assert re.search(r"\| *\+10\.0 *\|", sections["Predicted vs measured"])
    assert "peak predicted (MiB)" in sections["Predicted vs measured"]
    assert not re.search(r"\| *\+10\.0 *\|", sections["Results"]) and "error (%)" not in sections["Results"]
    assert "1 pruned" in text.split("\n## ")[0]


def test_the_plot_joins_hollow_predicted_markers_to_the_measured_points():
    df = records_to_frame(points())
    data = plot_data(df, ["per_device_batch_size"], [], ("MiB", MIB))
    pred = data.predicted.set_index(df.loc[data.predicted.index, "point_id"])
    assert sorted(pred.index) == ["aaaa00000001", "aaaa00000002"]  # ok points with both predicted numbers
    assert (pred.loc["aaaa00000001", "px"], pred.loc["aaaa00000001", "py"]) == (11.0, 900.0)
    assert (pred.loc["aaaa00000001", "x"], pred.loc["aaaa00000001", "y"]) == (10.0, 1000.0)
    assert data.devices == [("cluster.gpu_mem_gib: 64.0 MiB", 64.0)]  # the capacity the points were judged by
    failed = data.failed.set_index(df.loc[data.failed.index, "point_id"])
    assert failed.loc["bbbb00000001", "x"] == 200.0  # a pruned point sits at its predicted MiB in the strip
    top = png_figure(data).axes[0]
    hollow = [c for c in top.collections if c.get_label() == "predicted"]
    assert len(hollow) == 1 and hollow[0].get_facecolors().size == 0  # no fill
    dotted = [ln for ln in top.lines if ln.get_linestyle() == ":"]
    assert sorted((tuple(ln.get_xdata()), tuple(ln.get_ydata())) for ln in dotted) == [
        ((11.0, 10.0), (900.0, 1000.0)),
        ((15.0, 20.0), (2500.0, 2000.0)),
    ]
    page = plot_html(data)
    assert "circle-open" in page and "prediction to measurement" in page


def test_terminal_summary_states_the_error_and_the_pruned_points():
    recs = points()
    lines = summary_lines(records_to_frame(recs), recs)
    assert lines[0].startswith("Predicted vs measured: peak memory: median |error| 17.5 %")
    assert lines[-1].startswith("Pruned: 1 point(s) predicted not to fit")
    assert summary_lines(records_to_frame([ok("aaaa00000009", 1, 1.0, 1, None)]), []) == []
    # a frontier search's skipped points are not pruned ones (a newcomer read "Pruned: 13 point(s) predicted not to
    # fit" at the end of a CPU search that pruned nothing): the search's own cost line says them
    skipped = [r.to_dict() for r in recs if r.status == "pruned"]
    as_skipped = [Record.from_dict({**d, "status": "skipped"}) for d in skipped]
    rest = [r for r in recs if r.status != "pruned"]
    assert not any(ln.startswith("Pruned") for ln in summary_lines(records_to_frame(rest + as_skipped), rest))


def test_the_calibration_line_gives_the_efficiency_its_spread_and_peak_source_and_the_reuse_command():
    from sweeper.capacity.calibrate import Calibration
    from sweeper.report.predicted import calibration_line

    df = pd.DataFrame({"model": ["tiny", "tiny"], "seq_len": [128, 256]})
    line = calibration_line(Calibration(0.3712, 2, 0.31, 0.42, "datasheet"), df)
    assert line == (
        "plan.efficiency=0.37 calibrated on 2 ok points (p10-p90 0.31-0.42; peak: datasheet); "
        "reuse: python -m sweeper.plan cluster=<name> model=tiny plan.efficiency=0.37"
    )
    one = calibration_line(Calibration(0.0043, 1, float("nan"), 0.0043, ""), df)
    assert (
        one
        == "plan.efficiency=0.0043 calibrated on 1 ok point; reuse: python -m sweeper.plan cluster=<name> model=tiny plan.efficiency=0.0043"
    )
    assert calibration_line(None, df) is None
    # measured on CPUs: a fraction of a CPU's matmul peak plans no GPU cluster, so no command invites it
    cpu = calibration_line(Calibration(0.064, 4, 0.041, 0.085, "measured"), df.assign(device_type="cpu"))
    assert cpu is not None and "python -m sweeper.plan" not in cpu and "not a GPU cluster" in cpu
    # and the report gets no command to show in its code block (it showed the sentence as one)
    from sweeper.report.predicted import calibration_parts

    parts = calibration_parts(Calibration(0.064, 4, 0.041, 0.085, "measured"), df.assign(device_type="cpu"))
    assert parts is not None and parts[1] is None


def test_predictions_made_before_any_calibration_say_so_and_a_calibrated_plan_does_not():
    from sweeper.report.predicted import uncalibrated_efficiency

    df = pd.DataFrame({"plan.efficiency": [0.4, 0.4], "plan.calibrate": [None, None]})
    assert uncalibrated_efficiency(df) == 0.4
    assert uncalibrated_efficiency(df.assign(**{"plan.calibrate": ["/sweeps/a", None]})) is None  # calibrated
    assert uncalibrated_efficiency(df.assign(**{"plan.efficiency": [0.4, 0.2]})) is None  # a swept efficiency
    assert uncalibrated_efficiency(pd.DataFrame({"model": ["tiny"]})) is None  # records older than the column


def test_the_terminal_says_why_the_tokens_per_s_error_is_large_when_the_predictions_were_the_uncalibrated_guess():
    from tests.unit.specs import make_spec

    def measured(batch: int, calibrate: str | None) -> Record:
        spec = make_spec(per_device_batch_size=batch, plan={"efficiency": 0.4, "calibrate": calibrate})
        return Record(
            sweep_id="sw-cal",
            point_id=f"cccc0000000{batch}",
            status="ok",
            spec=spec.to_dict(),
            ran={"world_size": 1, "device_type": "cpu"},
            metrics={
                "tokens_per_s_per_device": 1000.0 * batch,
                "peak_mem_bytes": 10 * MIB,
                "step_time_s_median": 0.1,
                "mfu_peak_flops": 1e11,
                "mfu_peak_source": "measured: test",
            },
            predicted=predicted(10 * MIB, 3000.0 * batch),
        )

    guessed = [measured(b, None) for b in (2, 4)]
    lines = summary_lines(records_to_frame(guessed), guessed)
    why = [ln for ln in lines if "no plan.calibrate" in ln]
    assert len(why) == 1 and "plan.efficiency=0.4" in why[0] and "guess before any measurement" in why[0]
    assert lines.index(why[0]) == 1 and lines[2].startswith("plan.efficiency=")  # after the error, before the fit
    calibrated = [measured(b, "/sweeps/earlier") for b in (2, 4)]
    assert not any("no plan.calibrate" in ln for ln in summary_lines(records_to_frame(calibrated), calibrated))


def test_the_calibration_line_says_a_groups_efficiency_is_of_its_compute_alone():
    """The overall efficiency is of the whole step, a group's of its compute with communication and the per-step
    overhead taken out: a group above the overall p90 is then no contradiction, and the line says why."""
    from sweeper.capacity.calibrate import Calibration, Group, group_key
    from sweeper.report.predicted import calibration_line

    groups = {group_key("ddp", False, "fp32"): Group(0.13, 0.0, 1, "median"),
              group_key("fsdp", False, "fp32"): Group(0.071, 0.004, 2, "overhead + rate"),
              group_key("fsdp", True, "fp32"): Group(4.1, 0.0, 1, "median")}  # fmt: skip
    cal = Calibration(0.084, 3, 0.041, 0.12, "measured", groups)
    line = calibration_line(cal, pd.DataFrame({"model": ["tiny"], "seq_len": [128], "device_type": ["cpu"]}))
    assert "; per group, compute alone (communication and per-step overhead taken out; plan.calibrate=" in line, line
    assert "(DDP) 0.13;" in line and "(FSDP) 0.071 + 4 ms/step;" in line, line
    # compute faster than the peak is the model's split, not a measurement: said so, for that group alone
    assert line.count("above the peak") == 1 and "gc=true precision=fp32 (FSDP) 4.1 (above the peak: " in line, line
