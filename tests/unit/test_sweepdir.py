"""SweepDir, the one reader of a sweep directory: an old sweep directory still reads, reports and resumes; the sweep
id has one rule; ``sweep.json`` is read leniently, ``submitted.json`` strictly.

``golden/sweep_dir_v1`` was written by the code before SweepDir (main at 12aaff3: ``open_sweep``, ``write_record``,
``existing_final_status`` with a rerun, ``add_submitted`` twice for one point), the record of ``aaaa00000001`` copied
from a real two-rank CPU run. Never regenerate it with the current code: it stands for the directories users have.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweeper.report import build_report
from sweeper.results.atomic import write_json_atomic
from sweeper.results.collect import collect_records
from sweeper.results.opening import open_sweep
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir

OLD = Path(__file__).parent / "golden" / "sweep_dir_v1"
FINAL = {
    "aaaa00000001": "ok",
    "aaaa00000002": "oom",
    "aaaa00000003": "error",  # its timeout was set aside as result.0.json by a rerun
    "aaaa00000004": "pruned",
    "aaaa00000005": None,  # a pending record
    "aaaa00000006": None,  # launched on SLURM, no record yet
}


@pytest.fixture
def old(tmp_path: Path) -> SweepDir:
    """A copy of the old sweep directory (the tests write into it)."""
    shutil.copytree(OLD, tmp_path / "2026-12-01_10-00-00_0ld5d1")
    return SweepDir(tmp_path / "2026-12-01_10-00-00_0ld5d1")


def test_an_old_sweep_directory_reads_id_points_final_statuses_and_submissions(old: SweepDir):
    assert old.sweep_id == "0ld5d1"
    assert old.info()["mode"] == "multirun" and old.info()["n_points"] == 6
    assert old.info()["wandb"] == {"entity": None, "mode": "off", "project": "sweeper"}
    assert old.is_sweep()
    assert sorted(p.name for p in old.points_dir.iterdir()) == sorted(FINAL)
    assert {pid: old.final_status(pid) for pid in FINAL} == FINAL
    assert old.scan()[1] == ["aaaa00000006"]
    assert [r.status for r in old.records()] == ["ok", "oom", "error", "pruned", "pending"]
    assert json.loads((old.point("aaaa00000003") / "result.0.json").read_text())["status"] == "timeout"
    submitted = old.submitted()
    assert sorted(submitted) == ["aaaa00000001", "aaaa00000006"]
    assert submitted["aaaa00000006"]["job_id"] == "102_0"
    assert submitted["aaaa00000006"]["attempts"] == ["101_0", "102_0"]
    assert submitted["aaaa00000006"]["overrides"] == ["gc=false", "seed=3"]
    assert old.spec("aaaa00000006")["gc"] is True  # the folder's spec.json (the fixture's one spec)


def test_an_old_sweep_directory_reports(old: SweepDir):
    records = {r.point_id: r for r in collect_records(old)}
    assert sorted(records) == sorted(FINAL)
    launched = records["aaaa00000006"]
    assert (launched.status, launched.reason) == ("pending", "no result yet (SLURM job 102_0)")
    assert launched.sweep_id == "0ld5d1" and launched.env == {"slurm_job_id": "102_0"}
    assert launched.overrides == ["gc=false", "seed=3"]
    md = build_report(old.path)
    assert md == old.report_md and "# Sweep 0ld5d1" in md.read_text()
    assert old.results_csv.is_file() and old.results_parquet.is_file() and old.report_html.is_file()


def test_an_old_sweep_directory_resumes(old: SweepDir, monkeypatch):
    monkeypatch.delenv("SWEEPER_SWEEP_ID", raising=False)
    info = open_sweep(old.path, "multirun", 6, ["gc=true,false", "seed=1,2,3"])
    assert info["sweep_id"] == "0ld5d1" and info["resumed"] == 1
    assert SweepDir(old.path).info()["resumed"] == 1
    assert old.final_status("aaaa00000003", frozenset({"error"})) is None  # rerun: set aside, history kept
    pdir = old.point("aaaa00000003")
    assert sorted(p.name for p in pdir.glob("result*.json")) == ["result.0.json", "result.1.json"]
    old.write_record(Record(sweep_id=old.sweep_id, point_id="aaaa00000003", status="ok"))
    assert old.final_status("aaaa00000003") == "ok"
    old.add_submitted({"aaaa00000006": {"job_id": "103_0", "overrides": ["gc=false", "seed=3"], "spec": {}}})
    assert old.submitted()["aaaa00000006"]["attempts"] == ["101_0", "102_0", "103_0"]


def test_the_sweep_id_is_given_else_from_sweep_json_else_from_a_record_else_the_directory_name(tmp_path, monkeypatch):
    sweep = SweepDir(tmp_path / "2026-12-01_x_abc123")
    assert sweep.sweep_id == "2026-12-01_x_abc123"  # nothing there yet
    assert SweepDir(tmp_path / "d", "given").sweep_id == "given"
    d = SweepDir(tmp_path / "d")
    d.write_record(Record(sweep_id="from-record", point_id="bbbb00000002", status="ok"))
    d.write_record(Record(sweep_id="", point_id="bbbb00000001", status="ok"))  # an id-less record is passed over
    assert d.sweep_id == "from-record"  # sweep.json missing (a full disk): the points still say
    write_json_atomic(d.sweep_file, {"sweep_id": "from-sweep-json"})
    assert SweepDir(d.path).sweep_id == "from-sweep-json"
    assert d.sweep_id == "from-record"  # derived once per SweepDir
    sweep.path.mkdir()
    monkeypatch.chdir(sweep.path)
    assert SweepDir(Path(".")).sweep_id == "2026-12-01_x_abc123"  # "." is the working directory's name


def test_sweep_json_is_read_leniently_and_submitted_json_strictly(tmp_path):
    sweep = SweepDir(tmp_path)
    assert sweep.info() == {} and sweep.submitted() == {}
    sweep.sweep_file.write_text("{not json")
    assert sweep.info() == {}
    sweep.sweep_file.write_text("[1, 2]")
    assert sweep.info() == {}
    sweep.submitted_file.write_text("{not json")
    with pytest.raises(ValueError, match=r"submitted\.json"):
        sweep.submitted()
    with pytest.raises(ValueError, match=r"submitted\.json"):
        sweep.add_submitted({"p": {"job_id": "1"}})  # never merged over a file it cannot read
    sweep.point("cccc00000001").mkdir(parents=True)
    (r,) = collect_records(sweep)  # collecting does not fail on it
    assert (r.status, r.reason) == ("pending", "no result yet")


def test_sweep_dir_paths_keep_the_form_they_were_given_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = SweepDir("multirun/x")
    assert sweep.path == Path("multirun/x") and SweepDir.of(sweep) is sweep
    assert str(sweep.point("p")) == "multirun/x/points/p" and str(sweep.wandb_dir) == "multirun/x/wandb"
    assert str(sweep.slurm_job_dir("%j")) == "multirun/x/slurm/%j"
    assert str(sweep.result_path("p")) == "multirun/x/points/p/result.json"
    resolved = SweepDir(tmp_path / "multirun" / "x", "s1").resolved()
    assert resolved.path.is_absolute() and resolved.sweep_id == "s1"
