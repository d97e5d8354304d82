"""A rank dies with torchrun (sweeper.job.orphan): real processes, a real SIGKILL of the middle one (the part
torchrun plays), the rank in its own session as torchrun starts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

RANK = (
    "import sys, time\n"
    "from sweeper.job.orphan import orphaned_at_start\n"
    "print(orphaned_at_start(), flush=True)\n"
    "time.sleep(120)\n"
)
# torchrun's part: start the rank in its own session, say its pid, then wait
MIDDLE = (
    "import subprocess, sys, time\n"
    "rank = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True, stdout=sys.stdout)\n"
    "print(rank.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_rank_dies_with_its_launcher_even_in_its_own_session():
    env = {**os.environ, "SWEEPER_DRIVER_PID": str(os.getpid())}
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, RANK], stdout=subprocess.PIPE, text=True, env=env)
    rank_pid = None
    try:
        rank_pid = int(middle.stdout.readline())
        assert middle.stdout.readline().strip() == "False"  # not an orphan at start: it runs
        assert psutil.Process(rank_pid).ppid() == middle.pid
        middle.send_signal(signal.SIGKILL)
        middle.wait(10)
        assert _gone(rank_pid, 5.0), "the rank outlived its launcher"
    finally:
        if rank_pid is not None and not _gone(rank_pid, 0):
            os.kill(rank_pid, signal.SIGKILL)
        middle.kill()


def test_a_rank_whose_launcher_is_already_gone_stops_at_once():
    # the rank's parent (this test) is not a child of "the driver" named here: as if torchrun had died and the
    # rank had been re-parented to a reaper
    env = {**os.environ, "SWEEPER_DRIVER_PID": "999999999"}
    code = "from sweeper.job.orphan import orphaned_at_start; print(orphaned_at_start())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def test_outside_the_local_launcher_nothing_is_armed():
    env = {k: v for k, v in os.environ.items() if k != "SWEEPER_DRIVER_PID"}
    code = (
        "import ctypes\n"
        "from sweeper.job.orphan import orphaned_at_start; print(orphaned_at_start())\n"
        "sig = ctypes.c_int(-1)\n"
        "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
        "print(sig.value)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split() == ["False", "0"], out.stderr  # no parent-death signal armed
