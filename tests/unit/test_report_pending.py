"""Pending points in the report: counted by what the scheduler said of them, apart from the failures; a sweep with
no result yet draws no plot."""

import re
from pathlib import Path

from sweeper.report import build_report
from sweeper.report.build import Collected
from sweeper.report.tables import job_ranges, pending_table
from sweeper.results.collect import pending_as_of, pending_kind, pending_reason
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame

HELD = {"state": "PENDING", "reason": "JobHeldUser", "explained": "held by its user (scontrol release)"}


def pending(i: int, job: str | None, queued: dict | None) -> Record:
    return Record(
        sweep_id="sw-pending",
        point_id=f"{i:012x}",
        status="pending",
        reason=pending_reason(job, queued),
        env={"slurm_job_id": job} if job else {},
    )


def records() -> list[Record]:
    """250 held tasks of array 77 (asked at two times), 3 tasks of array 78 not asked about yet, one local point."""
    out = [
        pending(i, f"77_{i}", {**HELD, "job_id": f"77_{i}", "asked_at": f"2026-12-04T10:0{i % 2}:00"})
        for i in range(250)
        if i != 7
    ]
    out += [pending(300 + i, f"78_{i}", None) for i in range(3)]
    return [*out, pending(400, None, None)]


def test_pending_kind_drops_the_job_and_the_time_and_keeps_what_the_scheduler_said():
    reason = pending_reason("77_3", {**HELD, "job_id": "77_3", "asked_at": "2026-12-04T10:00:00"})
    assert "77_3" in reason and "10:00:00" in reason
    assert pending_kind(reason) == "no result yet: SLURM job is PENDING, held by its user (scontrol release)"
    assert pending_as_of(reason) == "2026-12-04T10:00:00"
    assert pending_kind(pending_reason("78", None)) == "no result yet (SLURM job)"
    assert pending_as_of(pending_reason("78", None)) is None
    assert (
        pending_kind("queued or running from an earlier submission") == "queued or running from an earlier submission"
    )


def test_job_ranges_are_written_as_squeue_writes_an_array():
    assert job_ranges(["12_0", "12_1", "12_2", "12_3", "12_7", "15", "12_9", "12_8"]) == "12_[0-3,7-9], 15"
    assert job_ranges(["5_2", "5_2"]) == "5_[2]"
    assert job_ranges([]) == ""


def test_the_pending_table_counts_points_by_what_is_known_most_first():
    table = pending_table(records_to_frame(records())).set_index("what is known")
    held = table.loc["no result yet: SLURM job is PENDING, held by its user (scontrol release)"]
    assert held["points"] == "249" and held["SLURM jobs"] == "77_[0-6,8-249]"
    assert held["as of"] == "2026-12-04T10:01:00"  # the latest time the scheduler was asked
    assert held["first points"] == "000000000000, 000000000001, 000000000002, ..."
    assert table.loc["no result yet (SLURM job)", "SLURM jobs"] == "78_[0-2]"
    assert table.loc["no result yet", "SLURM jobs"] == "—"
    assert table.index[0].startswith("no result yet: SLURM job is PENDING")  # most points first


def test_a_sweep_with_no_result_yet_lists_its_pending_points_apart_and_draws_no_plot(tmp_path: Path):
    (tmp_path / "points").mkdir()
    recs = records()
    md = build_report(tmp_path, collected=Collected(recs, records_to_frame(recs))).read_text()
    section = md.split("## Pending")[1].split("## Failures")[0]
    assert "253 point(s) have no result yet" in section and "python -m sweeper.status" in section
    assert re.search(r"\| +249 \| ", section) and r"77\_\[0-6,8-249\]" in section  # Markdown-escaped
    assert md.split("## Failures")[1].split("## Replay")[0].strip() == "None."
    assert "000000000005" not in md  # no row or replay command per pending point
    assert "**253 commands left out**" in md.split("## Replay")[1]
    html = (tmp_path / "report.html").read_text()
    assert "Plotly.newPlot" not in html and len(html) < 200_000  # no figure of markers at the edge
    assert not (tmp_path / "frontier.png").exists()
