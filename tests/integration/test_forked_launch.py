"""A CPU point's ranks forked from the pre-flight worker (sweeper.job.forked_launch) measure what fresh ranks
under torchrun measure (``SWEEPER_RANK_START=exec``), and a point that fails among forked points leaves the next
one measured as if alone: the same grid run both ways, real Hydra multiruns, real gloo ranks.

Tensor bytes (MemTracker), model-state bytes, FLOPs per token and the losses are deterministic for a seed, so they are compared
exactly; step times are the machine's noise and are not compared (``benchmarks/harness_overhead.py --exec-too``
puts them side by side).
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

# batch 64 outgrows the 0.05 GiB device budget (the OOM a GPU would raise, raised on CPU); batches 1 and 2 fit
GRID = ["-m", "per_device_batch_size=1,64,2", "cluster.gpu_mem_gib=0.05", "timed_steps=4"]
EXACT = (
    "loss_first",
    "loss_last",
    "peak_mem_bytes",
    "peak_mem_breakdown_bytes",
    "param_bytes_per_rank",
    "grad_bytes_per_rank",
    "optimizer_state_bytes_per_rank",
    "flops_per_token",
)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    runs = {}
    for start in ("fork", "exec"):
        run = run_sweeper(GRID, tmp_path_factory.mktemp(start), env={"SWEEPER_RANK_START": start})
        assert run.proc.returncode == 0, run.output[-4000:]
        runs[start] = {r.spec["per_device_batch_size"]: r for r in run.records()}
    return runs


def test_the_record_says_how_the_ranks_started(sweeps):
    for start, records in sweeps.items():
        assert {r.ran.get("rank_start") for r in records.values()} == {start}, start


def test_forked_ranks_measure_what_fresh_ranks_measure_and_an_oom_among_them_changes_no_other_point(sweeps):
    fork, fresh = sweeps["fork"], sweeps["exec"]
    assert [fork[b].status for b in (1, 64, 2)] == ["ok", "oom", "ok"], [fork[b].reason for b in (1, 64, 2)]
    assert [fresh[b].status for b in (1, 64, 2)] == ["ok", "oom", "ok"], [fresh[b].reason for b in (1, 64, 2)]
    for batch in (1, 2):  # batch 2 runs after the OOM point in both sweeps
        for key in EXACT:
            assert fork[batch].metrics[key] == fresh[batch].metrics[key], (batch, key)
        assert fork[batch].metrics["timed_steps"] == fresh[batch].metrics["timed_steps"]
        # torch's intra-op threads per rank, as the matmul peak's source names them: torchrun's 1 in both
        threads = [re.search(r"(\d+) thread\(s\)", r.metrics["mfu_peak_source"]) for r in (fork[batch], fresh[batch])]
        assert [m.group(1) if m else None for m in threads] == ["1", "1"], batch
        assert fork[batch].ran["world_size"] == 2
    assert fork[64].error_kind == fresh[64].error_kind
