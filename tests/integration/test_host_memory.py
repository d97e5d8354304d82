"""A point never takes the machine down (case T08): a grid point whose ranks outgrow the host-memory limit is
stopped at the limit and recorded as ``host_oom``; the next point runs and the report is written.

Real torchrun/gloo ranks really allocating: ``per_device_batch_size=4096`` makes the tiny model's ranks grow past
17 GB on this machine without a limit (T08); it is only ever run here with ``host_mem_limit_gib=2``.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

GIB = 2**30
#: How far past the limit the ranks may get: the growth during a poll (0.05 s) at a few GiB/s, far below the
#: 15 GiB more that the point would take unchecked.
MARGIN = GIB // 2


def test_a_point_past_the_host_memory_limit_is_host_oom_and_the_next_point_runs(tmp_path):
    run = run_sweeper(
        [
            "-m",
            "per_device_batch_size=4096,4",
            "seq_len=128",
            "host_mem_limit_gib=2",
            "timed_steps=3",
            "warmup_steps=1",
        ],
        tmp_path,
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    big = run.by(per_device_batch_size=4096)
    small = run.by(per_device_batch_size=4)

    assert big.status == "host_oom", big.reason
    f = big.failure
    assert f["host_mem_limit_bytes"] == 2 * GIB == big.metrics["host_mem_limit_bytes"]
    assert 2 * GIB <= f["host_rss_bytes"] < 2 * GIB + MARGIN  # stopped at the limit, not at 17 GB
    assert f["enforced_by"] == "rss_watch"  # this machine has cgroup v1 only
    assert f["rank"] in (0, 1)
    assert sum(f["rss_by_rank_bytes"].values()) == f["host_rss_bytes"]
    assert f["rss_by_rank_bytes"][str(f["rank"])] == max(
        v for k, v in f["rss_by_rank_bytes"].items() if k != "launcher"
    )
    assert big.reason.startswith("host memory limit 2.00 GiB reached (host_mem_limit_gib=2): the ranks' RSS peaked at")
    assert f"rank {f['rank']}" in big.reason and "raise host_mem_limit_gib" in big.reason

    assert small.status == "ok", small.reason
    assert small.metrics["host_mem_limit_bytes"] == 2 * GIB
    assert 0 < small.metrics["host_rss_peak_bytes"] < 2 * GIB

    df = pd.read_csv(run.sweep_dir / "results.csv")
    assert sorted(df["status"]) == ["host_oom", "ok"]
    assert "host_oom" in run.report.read_text()
