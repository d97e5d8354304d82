"""Tests of ``tests/unit/test_host_memory.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from sweeper.launchers.host_memory import (
    LAUNCHER,
    POLL_S,
    RssWatch,
    TreeSampler,
    sample_tree,
)
from tests.unit.test_host_memory import GIB, HOLD, LAUNCH, LAUNCH_LATE, MIB, _spawn_grow


def test_the_tree_rss_is_summed_per_rank_from_each_process_environment():
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert [launcher.stdout.readline(), launcher.stdout.readline()] == ["ready\n", "ready\n"]
        by_rank = sample_tree(psutil.Process(launcher.pid))
    finally:
        launcher.stdin.close()
        launcher.wait(timeout=60)
    assert set(by_rank) == {"0", "1", LAUNCHER}
    assert by_rank["0"] >= 64 * MIB and by_rank["1"] >= 128 * MIB
    # the same interpreter, 64 MiB more held: the difference is the allocation, give or take the allocator's pages
    assert abs(by_rank["1"] - by_rank["0"] - 64 * MIB) < 16 * MIB
    assert by_rank[LAUNCHER] < 64 * MIB  # the launcher holds no array


def test_the_cheap_sampler_gives_the_full_scans_breakdown_and_finds_a_late_rank_at_its_next_walk():
    """TreeSampler walks the process table only every refresh_s; between walks it reads the known members only."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCH_LATE, HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout.readline() == "ready\n"  # rank 0 holds its 64 MiB
        root = psutil.Process(launcher.pid)
        sampler = TreeSampler(root, refresh_s=3600.0)  # one walk, at the first sample
        first = sampler.sample()
        assert set(first) == {"0", LAUNCHER} and first["0"] >= 64 * MIB
        launcher.stdin.write("go\n")
        launcher.stdin.flush()
        assert launcher.stdout.readline() == "ready\n"  # rank 1 holds its 128 MiB
        assert set(sampler.sample()) == {"0", LAUNCHER}  # not walked since: rank 1 is not a member yet
        sampler.refresh_s = 0.0
        again, full = sampler.sample(), sample_tree(root)
        assert set(again) == set(full) == {"0", "1", LAUNCHER}
        for rank in ("0", "1"):  # the same processes read a moment apart: the same held arrays
            assert abs(again[rank] - full[rank]) < 8 * MIB
        assert again["1"] - again["0"] > 48 * MIB
    finally:
        launcher.stdin.close()
        launcher.wait(timeout=60)
    with pytest.raises(psutil.NoSuchProcess):
        sampler.sample()


def test_the_watch_lets_a_process_under_the_limit_finish_and_reports_its_peak():
    pid = _spawn_grow(64)
    with RssWatch(pid, GIB) as watch:
        _, status, _ = os.wait4(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    res = watch.result
    assert not res.tripped and res.samples >= 1
    assert res.peak_bytes < GIB


def test_the_watch_kills_a_growing_process_past_the_limit_promptly_and_reports_its_peak():
    limit, cap_mib = 256 * MIB, 2048
    pid = _spawn_grow(cap_mib)
    with RssWatch(pid, limit) as watch:
        _, status, usage = os.wait4(pid, 0)
    res = watch.result
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL  # killed, did not reach its 2 GiB
    assert res.tripped and res.limit_bytes == limit and res.poll_s == POLL_S
    assert limit <= res.peak_bytes < limit + 512 * MIB
    true_peak = usage.ru_maxrss * 1024  # the kernel's high-water mark of the reaped process (KiB on Linux)
    assert true_peak < limit + 512 * MIB  # not just the sample: the process itself never got further
    assert res.peak_by_rank_bytes == {LAUNCHER: res.peak_bytes}  # no RANK in its environment
    assert res.top_rank is None
