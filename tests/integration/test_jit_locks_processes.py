"""Tests of ``tests/unit/test_jit_locks.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from sweeper.job import jit_locks
from sweeper.job.jit_locks import judge, settle
from tests.unit.test_jit_locks import _holder, _op_lock


def test_a_lock_whose_builder_was_killed_is_stale_and_removed(tmp_path):
    lock = _op_lock(tmp_path)
    proc = _holder(lock)
    assert judge(lock).verdict == "live"
    proc.send_signal(signal.SIGKILL)  # killed mid-build: torch's baton file stays behind
    proc.wait()
    assert lock.exists()
    j = judge(lock)
    assert (j.verdict, j.holders, j.builders) == ("stale", (), ())
    (found,) = settle(tmp_path)
    assert (found.action, found.verdict, found.path) == ("removed", "stale", str(lock))
    assert str(lock) in found.message and "for ever" in found.message
    assert not lock.exists()
    assert (tmp_path / jit_locks.CHECK_FILE).exists()  # our own flock file, never torch's


def test_a_lock_held_by_a_live_builder_is_left_in_place(tmp_path):
    lock = _op_lock(tmp_path)
    proc = _holder(lock)
    try:
        j = judge(lock)
        assert j.verdict == "live" and proc.pid in j.holders
        (found,) = settle(tmp_path)
        assert (found.action, found.verdict) == ("left", "live")
        assert lock.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_stale_lock_is_removed_only_after_the_build_processes_left_in_its_directory_end(tmp_path):
    lock = _op_lock(tmp_path)
    lock.touch()  # no holder: the builder is gone
    orphan = subprocess.Popen(["sleep", "2"], cwd=lock.parent)  # as ninja, left running by a killed builder
    try:
        assert judge(lock).builders == (orphan.pid,)
        t0 = time.monotonic()
        (found,) = settle(tmp_path, wait_s=30, poll_s=0.1)
        assert found.action == "removed" and orphan.poll() is not None and time.monotonic() - t0 > 1
    finally:
        orphan.kill()
        orphan.wait()


def test_a_lock_whose_build_processes_outlast_the_wait_is_left_with_the_fix(tmp_path):
    lock = _op_lock(tmp_path)
    lock.touch()
    orphan = subprocess.Popen(["sleep", "60"], cwd=lock.parent)
    try:
        (found,) = settle(tmp_path, wait_s=0.3, poll_s=0.1)
        assert (found.action, found.verdict) == ("left", "unknown")
        assert f"rm {lock}" in found.message and lock.exists()
    finally:
        orphan.kill()
        orphan.wait()


def test_a_points_wait_for_leftover_build_processes_ends_well_before_its_timeout_with_the_lock_named(
    tmp_path, monkeypatch
):
    """A killed build's ninja outliving the wait must not hold a point past its ``timeout_s``: the wait takes at most
    half the point's time, then the lock is left (``unknown``) and the finding, with the fix, is written for the
    record before the point's timeout stops the ranks (it was the fixed 600 s, whatever ``timeout_s``)."""
    assert jit_locks.orphan_wait_s(900.0) == 450.0 and jit_locks.orphan_wait_s(7200.0) == jit_locks.ORPHAN_WAIT_S
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    lock = _op_lock(tmp_path / "ext")
    lock.touch()
    orphan = subprocess.Popen(["sleep", "60"], cwd=lock.parent)
    try:
        t0 = time.monotonic()
        (found,) = jit_locks.before_build(2, tmp_path, 0, timeout_s=6.0)
        waited = time.monotonic() - t0
        assert (found.action, found.verdict) == ("left", "unknown") and lock.exists()
        assert 3.0 <= waited < 6.0, waited  # half the point's time, then one poll and one look at /proc
        assert "after 3 s" in found.message and f"rm {lock}" in found.message
        (written,) = json.loads((tmp_path / "jit_locks.rank0.json").read_text())
        assert written["message"] == found.message
    finally:
        orphan.kill()
        orphan.wait()
