"""Record writing: atomic, one file per point, a final record never overwritten, reruns keep history."""

from __future__ import annotations

import json

import pytest

from sweeper.results.atomic import write_json_atomic
from sweeper.results.record import Record, read_record
from sweeper.results.sweepdir import RESULT_FILE, SweepDir


def _rec(pid: str = "abc123abc123", status: str = "ok", **kw) -> Record:
    return Record(sweep_id="s1", point_id=pid, status=status, **kw)


def test_a_record_round_trips_through_its_file(tmp_path):
    r = _rec(metrics={"tokens_per_s": 1.5, "peak_mem_bytes": 2**20}, overrides=["gc=true"])
    path = SweepDir(tmp_path).write_record(r)
    assert path == SweepDir(tmp_path).point(r.point_id) / RESULT_FILE
    assert read_record(path) == r
    assert not list(path.parent.glob(".*.tmp"))  # no temporary file left behind


def test_records_are_as_readable_as_any_file_the_user_writes(tmp_path):
    import os
    import stat

    path = SweepDir(tmp_path).write_record(_rec())
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert stat.S_IMODE(os.stat(path).st_mode) == stat.S_IMODE(os.stat(plain).st_mode)


def test_a_final_record_is_never_overwritten(tmp_path):
    SweepDir(tmp_path).write_record(_rec(status="oom", reason="device OOM"))
    with pytest.raises(FileExistsError, match="final result"):
        SweepDir(tmp_path).write_record(_rec())
    assert read_record(SweepDir(tmp_path).point("abc123abc123") / RESULT_FILE).status == "oom"


def test_a_pending_record_is_replaced_by_the_final_one(tmp_path):
    SweepDir(tmp_path).write_record(_rec(status="pending", reason="queued"))
    SweepDir(tmp_path).write_record(_rec())
    assert [r.status for r in SweepDir(tmp_path).records()] == ["ok"]


def test_a_rerun_moves_the_old_record_aside_and_keeps_every_earlier_one(tmp_path):
    SweepDir(tmp_path).write_record(_rec(status="timeout", reason="past timeout_s=2"))
    assert SweepDir(tmp_path).final_status("abc123abc123") == "timeout"
    assert SweepDir(tmp_path).final_status("abc123abc123", frozenset({"timeout"})) is None
    pdir = SweepDir(tmp_path).point("abc123abc123")
    assert json.loads((pdir / "result.0.json").read_text())["status"] == "timeout"
    SweepDir(tmp_path).write_record(_rec(status="timeout", reason="again"))
    SweepDir(tmp_path).final_status("abc123abc123", frozenset({"timeout"}))
    assert sorted(p.name for p in pdir.glob("result*.json")) == ["result.0.json", "result.1.json"]


def test_a_non_ok_record_needs_a_reason_and_a_known_status():
    with pytest.raises(ValueError, match="reason"):
        _rec(status="error")
    with pytest.raises(ValueError, match="status"):
        _rec(status="exploded", reason="x")


def test_an_unreadable_record_names_its_file(tmp_path):
    path = SweepDir(tmp_path).point("p") / RESULT_FILE
    write_json_atomic(path, {"status": "ok"})  # no sweep_id / point_id
    with pytest.raises(ValueError, match=str(path)):
        read_record(path)


def test_what_ran_is_read_from_an_earlier_records_setup_key():
    """``Record.ran`` ("what really ran") was ``setup`` in earlier records: their result.json still reads, into the
    same columns; a record writes ``ran``."""
    from sweeper.results.row import row_from_record

    old = {
        "sweep_id": "s",
        "point_id": "p" * 12,
        "status": "ok",
        "spec": {"model": "tiny"},
        "setup": {"wrapper": "DistributedDataParallel", "world_size": 2},
    }
    r = Record.from_dict(old)
    assert r.ran == {"wrapper": "DistributedDataParallel", "world_size": 2}
    assert "ran" in r.to_dict() and "setup" not in r.to_dict()
    assert row_from_record(r)["wrapper"] == "DistributedDataParallel"
