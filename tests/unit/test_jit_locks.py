"""The rule that tells a stale DeepSpeed JIT-build lock from a live one (sweeper.job.jit_locks), on real processes:
a real torch ``FileBaton`` held by a live process, one whose holder was killed, a process left building in the op's
directory; and how the findings reach the record (sweeper.results.jitlocks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.job import jit_locks
from sweeper.job.jit_locks import filesystem_type, settle
from sweeper.results import jitlocks

HOLD = """
import sys, time
from torch.utils.file_baton import FileBaton
baton = FileBaton(sys.argv[1])
assert baton.try_acquire()
print("held", flush=True)
time.sleep(120)
"""


def _op_lock(root: Path, op: str = "deepspeed_shm_comm") -> Path:
    (root / op).mkdir(parents=True)
    return root / op / "lock"


def _holder(lock: Path) -> subprocess.Popen:
    """A real process that took torch's baton on ``lock`` (as ``_jit_compile`` does) and is still building."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_only_op_directories_locks_are_checked_and_a_missing_root_is_nothing(tmp_path):
    assert settle(tmp_path / "none") == []
    (tmp_path / "lock").touch()  # not an op's baton
    assert settle(tmp_path) == [] and (tmp_path / "lock").exists()


def test_the_filesystem_type_is_the_longest_mount_above_the_path(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"40 22 0:50 / {tmp_path}/home rw - nfs4 srv:/home rw\n"
        f"41 22 0:51 / {tmp_path}/home\\040x rw - tmpfs tmpfs rw\n"
    )
    assert filesystem_type(tmp_path / "home" / "u" / "lock", info) == "nfs4"
    assert filesystem_type(tmp_path / "home x" / "lock", info) == "tmpfs"
    assert filesystem_type(tmp_path / "homely", info) == "ext4"
    assert "nfs4" in jit_locks.NETWORK_FS


def test_the_extensions_root_is_the_one_torch_builds_in(tmp_path, monkeypatch):
    from torch.utils.cpp_extension import _get_build_directory

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # torch's user cache dir, not the home's
    assert Path(_get_build_directory("deepspeed_shm_comm", False)).parent == jit_locks.extensions_root()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    assert Path(_get_build_directory("deepspeed_shm_comm", False)).parent == jit_locks.extensions_root()


def test_a_point_without_deepspeed_checks_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    _op_lock(tmp_path / "ext").touch()
    assert jit_locks.before_build(0, tmp_path, 0, 900.0) == []
    assert (tmp_path / "ext" / "deepspeed_shm_comm" / "lock").exists()
    assert not list(tmp_path.glob("jit_locks.*"))


def test_findings_reach_the_record_and_a_left_lock_is_named_in_a_timeout_reason(tmp_path):
    removed = {"path": "/x/lock", "action": "removed", "verdict": "stale", "age_s": 5.0, "message": "removed /x/lock"}
    gone = {**removed, "action": "left", "verdict": "live", "message": "left /x/lock"}
    left = {"path": "/y/lock", "action": "left", "verdict": "unknown", "age_s": 1.0, "message": "left /y/lock: rm"}
    jitlocks.write_findings(tmp_path, 1, [gone, left])
    jitlocks.write_findings(tmp_path, 0, [removed])
    jitlocks.write_findings(tmp_path, 2, [])
    assert not (tmp_path / "jit_locks.rank2.json").exists()
    assert json.loads((tmp_path / "jit_locks.rank0.json").read_text()) == [removed]
    env: dict = {}
    result = {"status": "timeout", "reason": "the point ran past timeout_s=60 s"}
    jitlocks.amend(result, env, tmp_path)
    assert env["jit_locks"] == [removed, left]  # the removal is the one kept for its path
    assert result["reason"] == "the point ran past timeout_s=60 s; before the build, left /y/lock: rm"
    ok = {"status": "ok", "reason": None}
    jitlocks.amend(ok, {}, tmp_path)
    assert ok["reason"] is None


@pytest.mark.parametrize("site", ["jit-lock"])
def test_the_check_is_a_named_attributed_site(site, tmp_path, monkeypatch):
    from sweeper.job.faults import FAULT_ENV, SITES, HarnessFault

    assert "attributed" in SITES[site]
    monkeypatch.setenv(FAULT_ENV, site)
    with pytest.raises(HarnessFault) as e:
        jit_locks.before_build(2, tmp_path, 0, 900.0)
    assert e.value.site == site


def test_the_report_names_each_lock_a_point_found_and_what_was_done(tmp_path):
    """The record's ``env["jit_locks"]`` reaches report.md's Environment section, outside text escaped."""
    from sweeper.report import build_report
    from sweeper.results.record import Record
    from sweeper.results.sweepdir import SweepDir

    sweep = SweepDir(tmp_path / "sw")
    removed = {
        "path": "/x/deepspeed_shm_comm/lock",
        "action": "removed",
        "verdict": "stale",
        "age_s": 42.0,
        "message": "removed the stale DeepSpeed JIT-build lock /x/deepspeed_shm_comm/lock (age 42 s): no holder",
    }
    for pid, env in (("aaaa00000001", {"host": "h", "jit_locks": [removed]}), ("aaaa00000002", {"host": "h"})):
        sweep.write_record(
            Record(
                sweep_id="sw",
                point_id=pid,
                status="ok",
                spec={"model": "tiny", "zero": 2, "seed": int(pid[-1])},
                env=env,
                metrics={"tokens_per_s_per_device": 1000.0, "peak_mem_bytes": 2**20, "step_time_s_median": 0.1},
            )
        )
    text = build_report(sweep).read_text()
    env = text.split("## Environment")[1]
    assert "DeepSpeed JIT-build locks" in env
    assert (
        "point `aaaa00000001`: removed the stale DeepSpeed JIT-build lock /x/deepspeed_shm_comm/lock (age 42 s)" in env
    )
    assert "**jit_locks**" not in env  # not again as a raw value among the environment's bullets
    assert "aaaa00000002`:" not in env
