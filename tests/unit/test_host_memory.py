"""The per-point host-memory limit (case T08): the default, the RSS of a real process tree, and the watch that kills
a real process growing past the limit. Real child processes allocating real memory; nothing is mocked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from sweeper.launchers.cgroup import CgroupMemoryLimit, _cgroup2_dir
from sweeper.launchers.host_memory import (
    LAUNCHER,
    Limit,
    WatchResult,
    default_limit_bytes,
    host_oom_outcome,
    resolve_limit,
)

MIB, GIB = 2**20, 2**30

# allocates 16 MiB chunks (bytearray: zero-filled, so resident at once) until argv[1] MiB, then exits 0
GROW = "import sys\nheld = []\nwhile len(held) * 16 < int(sys.argv[1]):\n    held.append(bytearray(16 * 2**20))\n"
# a launcher (no RANK) starting two ranks that hold 64 and 128 MiB, say "ready" and wait for stdin to close
HOLD = "import sys\nheld = bytearray(int(sys.argv[1]) * 2**20)\nprint('ready', flush=True)\nsys.stdin.read()\n"
LAUNCH = (
    "import os, subprocess, sys\n"
    "kids = [subprocess.Popen([sys.executable, '-c', sys.argv[1], str(mib)], env={**os.environ, 'RANK': str(r)})\n"
    "        for r, mib in ((0, 64), (1, 128))]\n"
    "for k in kids:\n    k.wait()\n"
)


def _spawn_grow(cap_mib: int) -> int:
    """A real python process (its own session) that grows to ``cap_mib`` MiB; returns its pid (reaped by wait4)."""
    return os.posix_spawn(sys.executable, [sys.executable, "-c", GROW, str(cap_mib)], dict(os.environ), setsid=True)


# --- the default limit ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "available", "expected"),
    [
        (100 * GIB, 99 * GIB, 80 * GIB),  # idle machine: 80 % of MemTotal
        (100 * GIB, 50 * GIB, 49 * GIB),  # busy machine: what is available, less the 1 GiB reserve
        (23 * GIB, 20 * GIB, int(0.8 * 23 * GIB)),  # this machine's size (T08): 18.4 GiB, not 17 GB and dead
        (16 * GIB, GIB // 2, 0),  # no room at all: 0, never negative
    ],
)
def test_default_limit_is_the_smaller_of_80_percent_of_total_and_available_minus_1_gib(total, available, expected):
    assert default_limit_bytes(total, available) == expected


def test_the_default_limit_is_derived_from_this_machines_memory_and_says_how():
    vm = psutil.virtual_memory()
    limit = resolve_limit(None)
    assert 0 < limit.bytes <= 0.8 * vm.total
    assert limit.bytes <= vm.total - GIB
    assert "MemTotal" in limit.source and "MemAvailable" in limit.source and "1.00 GiB reserve" in limit.source


def test_an_explicit_limit_is_in_gib_of_2_to_the_30_bytes():
    assert resolve_limit(2) == Limit(2 * GIB, "host_mem_limit_gib=2")
    assert resolve_limit(0.5).bytes == 512 * MIB


# --- measuring a real process tree -----------------------------------------------------------------------------


# a launcher that starts rank 0 (64 MiB), waits for a line on stdin, starts rank 1 (128 MiB), then waits for EOF
LAUNCH_LATE = (
    "import os, subprocess, sys\n"
    "def start(r, mib):\n"
    "    return subprocess.Popen([sys.executable, '-c', sys.argv[1], str(mib)], env={**os.environ, 'RANK': str(r)},\n"
    "                            stdin=subprocess.PIPE)\n"
    "kids = [start(0, 64)]\n"
    "sys.stdin.readline()\n"
    "kids.append(start(1, 128))\n"
    "sys.stdin.read()\n"
    "for k in kids:\n    k.stdin.close()\n    k.wait()\n"
)


# --- the record of a stopped point -----------------------------------------------------------------------------


def test_a_host_oom_outcome_names_limit_peak_rank_and_step_and_what_to_change():
    watch = WatchResult(limit_bytes=2 * GIB, poll_s=0.05, tripped=True, peak_bytes=2 * GIB + 3 * MIB, samples=40)
    watch.peak_by_rank_bytes = {"0": 900 * MIB, "1": 1000 * MIB, LAUNCHER: 151 * MIB}
    base = {"ran": {}, "metrics": {"host_mem_limit_bytes": 2 * GIB}, "artifacts": {}, "failure": None}
    out = host_oom_outcome(base, Limit(2 * GIB, "host_mem_limit_gib=2"), watch, {0: 3, 1: 2})
    assert out["status"] == "host_oom" and out["error_kind"] is None
    assert out["metrics"] == base["metrics"]
    f = out["failure"]
    assert f["host_mem_limit_bytes"] == 2 * GIB and f["host_rss_bytes"] == 2 * GIB + 3 * MIB
    assert (f["rank"], f["step"], f["phase"], f["enforced_by"]) == (1, 2, "train", "rss_watch")
    assert f["rank_steps"] == {"0": 3, "1": 2}
    assert out["reason"] == (
        "host memory limit 2.00 GiB reached (host_mem_limit_gib=2): the ranks' RSS peaked at 2.00 GiB "
        "(rank 1 at step 2) and the point was stopped; lower per_device_batch_size/seq_len, or raise host_mem_limit_gib"
    )


# --- the cgroup v2 path: detection and its guards (this machine has cgroup v1; the RSS watch is what runs) ---------

HYBRID = (
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
UNIFIED = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
BIND = "30 23 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"


@pytest.mark.parametrize(
    ("mountinfo", "proc_cgroup", "expected"),
    [
        (HYBRID, "4:memory:/x\n0::/\n", Path("/sys/fs/cgroup/unified")),
        (
            UNIFIED,
            "0::/user.slice/user-1000.slice/session-2.scope\n",
            Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"),
        ),
        (BIND, "0::/docker/abc/job\n", Path("/sys/fs/cgroup/job")),
        (BIND, "0::/elsewhere\n", None),  # not under the mounted subtree
        (HYBRID.splitlines()[0], "4:memory:/x\n", None),  # cgroup v1 only
    ],
)
def test_the_own_cgroup2_directory_is_found_from_mountinfo_and_proc_cgroup(mountinfo, proc_cgroup, expected):
    assert _cgroup2_dir(mountinfo, proc_cgroup) == expected


@pytest.mark.parametrize(
    ("controllers", "subtree"),
    [("cpu io", "cpu io"), ("cpu memory", ""), ("memory", "memory")],  # the last: a plain folder, no kernel files
)
def test_no_cgroup_is_used_unless_the_memory_controller_is_really_delegated(tmp_path, controllers, subtree):
    (tmp_path / "cgroup.controllers").write_text(controllers)
    (tmp_path / "cgroup.subtree_control").write_text(subtree)
    assert CgroupMemoryLimit.create(GIB, parent=tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cgroup.controllers", "cgroup.subtree_control"]
