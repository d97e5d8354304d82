"""A stale DeepSpeed JIT-build lock never hangs a sweep (sweeper.job.jit_locks, docs/failures.md): real ZeRO points
on 2 gloo ranks, DeepSpeed JIT-building its real ``deepspeed_shm_comm`` op in a fresh ``TORCH_EXTENSIONS_DIR``.

The stale lock is made the way a sweep makes it: the rank that holds torch's ``FileBaton`` is killed (SIGKILL)
while it builds, so ``<dir>/deepspeed_shm_comm/lock`` stays behind with nobody to remove it, and the ninja it started
may still be compiling. Without the check every later ZeRO point waits in ``FileBaton.wait()`` until its timeout.

Both tests use one ``TORCH_EXTENSIONS_DIR`` (``torch_extensions``, fresh for the module): the first builds the op
there for real (its second point, after the killed build); the second test's point finds the op built, and still
takes the baton (``torch.utils.cpp_extension`` takes it before every load, built or not: without the check it waits
on the stale lock forever), then loads it without compiling it again. Run alone, the second test builds it itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from sweeper.job.jit_locks import judge
from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]
KILLER = """
import sys, time
from torch.utils.file_baton import FileBaton
baton = FileBaton(sys.argv[1])
assert baton.try_acquire()
print("held", flush=True)
time.sleep(600)
"""


def _kill_the_builder(lock, killed: list[int], deadline_s: float = 600) -> None:
    """Wait for the first point's build to take the lock, then SIGKILL the rank that holds it (mid-build)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if lock.exists():
            try:
                holders = judge(lock).holders
            except FileNotFoundError:
                holders = ()
            if holders:
                os.kill(holders[0], signal.SIGKILL)
                killed.append(holders[0])
                return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def torch_extensions(tmp_path_factory):
    """A fresh ``TORCH_EXTENSIONS_DIR`` for the module (module docstring)."""
    return tmp_path_factory.mktemp("torch_extensions")


def test_a_rank_killed_while_building_leaves_a_lock_the_next_zero_point_removes(
    tmp_path, monkeypatch, torch_extensions
):
    ext = torch_extensions
    assert not (ext / "deepspeed_shm_comm").exists()  # a fresh build: nothing built yet
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))  # the env var torch honours: a fresh build
    lock = ext / "deepspeed_shm_comm" / "lock"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_the_builder, args=(lock, killed), daemon=True)
    killer.start()
    run = run_sweeper(["-m", "zero=2", "seed=0,1", "timeout_s=420", *STEPS], tmp_path)
    killer.join(timeout=1)
    assert run.proc.returncode == 0, run.output[-4000:]
    assert killed, "the first point never took the build lock"
    first, second = sorted(run.records(), key=lambda r: r.spec["seed"])
    assert first.status == "error", first.reason  # its builder killed: that point's own failure
    assert second.status == "ok", second.reason  # not a timeout: the stale lock was removed, the op built
    (found,) = second.env["jit_locks"]
    assert (found["path"], found["action"], found["verdict"]) == (str(lock), "removed", "stale")
    assert "removed the stale DeepSpeed JIT-build lock" in found["message"]
    assert "sweeper: removed the stale DeepSpeed JIT-build lock" in (second_log := _log(run, second))
    assert "built successfully" in second_log  # DeepSpeed really loaded its op after the lock was gone
    assert not lock.exists()


def test_a_lock_left_by_a_killed_builder_before_the_sweep_is_removed_with_a_note(
    tmp_path, monkeypatch, torch_extensions
):
    ext = torch_extensions  # the op built by the test before, when it ran (module docstring)
    (ext / "deepspeed_shm_comm").mkdir(parents=True, exist_ok=True)
    lock = ext / "deepspeed_shm_comm" / "lock"
    holder = subprocess.Popen([sys.executable, "-c", KILLER, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)  # a real torch baton whose process died
    holder.wait()
    assert lock.exists()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    run = run_sweeper(["zero=1", "timeout_s=420", *STEPS], tmp_path)
    assert run.proc.returncode == 0, run.output[-4000:]
    (r,) = run.records()
    assert r.status == "ok", r.reason
    assert [f["action"] for f in r.env["jit_locks"]] == ["removed"]
    assert not lock.exists()


def _log(run, record) -> str:
    return (run.sweep_dir / "points" / record.point_id / record.artifacts["log"]).read_text()
