"""Faults of a batch search's own code (``per_device_batch_size=auto``: sweeper.job.batch_trials in the ranks,
sweeper.launchers.batch_search in the driver) are ``internal`` with the trials so far, never the point's own error
nor a crashed sweep.

Real searches (the real HF Trainer, real torchrun), one rank and the tiny model for speed; the device memory is faked
as in tests/integration/test_batch_search.py (a tensor-byte budget the harness enforces on CPU). This search seeds
at batch 8 (fits: 25,112,480 B under 27,031,450 usable), then tries 9 (over the margin, 27,934,112 B, under the
budget's 28,454,158 B, so its peak is read): two trials in one launch, both run. The faults are injected with
``SWEEPER_FAULT_INJECT`` (docs/failures.md): a search site in a rank counts the trials its launch agreed on as its
step, ``search-driver`` the launches.

Each sweep is one rank, so one core (its driver waits while its rank runs): the module's five sweeps run two at a
time (``runs``), each with its own ``SWEEPER_FAULT_INJECT``, in about half the time of one after the other.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from sweeper.job.faults import FAULT_ENV
from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

AUTO = [
    "per_device_batch_size=auto",
    "cluster.gpu_mem_gib=0.0265",
    "ranks_per_node=1",
    "seq_len=128",
    "warmup_steps=1",
    "timed_steps=3",
    "memory_steps=1",
    "profile_steps=0",
    "profile_trace=false",
]


def _internal(record, site: str) -> list[int]:
    """Check that ``record`` is ``site``'s internal fault; returns the batches of the trials it kept."""
    assert (record.status, record.error_kind) == ("error", "internal"), record.reason
    assert f"sweeper's own {site} code failed" in record.reason and "InjectedFault" in record.reason
    assert record.failure["site"] == site
    return [t["batch"] for t in record.ran["batch_search"]["trials"]]


RANK_FAULTS = [
    ("search-step@1", [8]),  # the next batch after the first trial: that trial is on disk
    ("search-state@2", [8]),  # rank 0's write of the second trial: the first stays on disk
    ("search-peak@1", [8]),  # the second trial's peak reading
    ("budget", []),  # the first trial's budget window (CPU), at its first event
]
#: The driver's fault: a grid of two points, the fault after each point's first launch.
DRIVER = "search-driver"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Fault site -> its finished sweep: a single point per rank fault, the two-point grid for the driver's; two
    sweeps at a time (module docstring), the fault set in each one's environment (the ranks inherit it)."""
    sweeps = {inject: AUTO for inject, _ in RANK_FAULTS} | {DRIVER: ["-m", *AUTO, "seed=0,1"]}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            inject: pool.submit(run_sweeper, args, tmp_path_factory.mktemp("fault"), env={FAULT_ENV: inject})
            for inject, args in sweeps.items()
        }
        return {inject: f.result() for inject, f in futures.items()}


@pytest.mark.parametrize(("inject", "kept"), RANK_FAULTS)
def test_a_fault_of_the_searchs_own_code_in_a_rank_is_internal_with_the_trials_before_it(inject, kept, runs):
    run = runs[inject]
    assert run.proc.returncode == 1, run.output[-3000:]
    (r,) = run.records()
    assert _internal(r, inject.split("@")[0]) == kept
    assert r.ran["batch_search"]["stopped_at_batch"] == 8  # the batch its launch began with (the driver's word)
    assert r.ran["batch_search"]["answer"] is None  # nothing measured at a guessed batch


def test_a_fault_of_the_searchs_driver_code_is_internal_for_its_point_and_the_grid_goes_on(runs):
    """After the first launch the driver's read of the search state fails: each point of the grid is recorded
    ``internal`` with the trials its ranks agreed on (rank 0's state), the grid ends normally, with its report."""
    run = runs[DRIVER]
    assert run.proc.returncode == 0, run.output[-3000:]
    records = run.records()
    assert len(records) == 2 and run.report is not None and run.report.exists()
    for r in records:
        assert _internal(r, "search-driver") == [8, 9]
        assert "the trials before it are kept" in r.reason
        assert r.ran["batch_search"]["launches"] == 1 and r.failure["phase"] == "setup"
