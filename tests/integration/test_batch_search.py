"""``per_device_batch_size=auto`` on real ranks: real Trainer steps, real gloo process groups under torchrun.

There is no GPU here, so the device memory is faked: on CPU ranks ``cluster.gpu_mem_gib`` is a tensor-byte budget
per rank that the harness enforces by raising the OOM a GPU would (``torch.OutOfMemoryError`` with the CUDA
allocator's wording, mid-step); the test names say so. The exhaustive scan the search is checked against runs the
same trials (same counter, same budget) at every batch from 1 up (``tests/batch_scan.py``).

The two one-rank sweeps (one core each: the driver waits while its rank runs) run side by side (``one_rank``); the
two-rank one runs alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sweeper.point.batch_search import SEARCH_FILE, SearchState, trial_bound
from sweeper.point.device_budget import BUDGET_FILE
from tests.conftest import REPO, run_sweeper

pytestmark = pytest.mark.slow

#: 25.6 MiB per rank: the tiny model at seq_len=128 fits 7 samples per rank (about 2.7 MiB each) within the margin.
BUDGET_GIB = "0.025"
FAST = ["seq_len=128", "warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]
#: Rank 1 alone holds 2 MiB per sample more from the middle of its forward on (tests/faults.py).
ONE_RANK_OVER = "+callbacks=[{_target_:tests.faults.FakeActivationOnOneRank,bytes_per_sample:2097152,rank:1}]"


def _search(run) -> tuple[object, dict]:
    (record,) = run.records()
    return record, record.ran["batch_search"]


def exhaustive_scan(point_dir: Path, ranks: int, tmp: Path) -> tuple[int, int, list]:
    """Scan every batch from 1 for the point in ``point_dir`` (its spec and budget) on ``ranks`` ranks.

    Returns:
        (largest batch that fits, first that does not, the scan's trials).
    """
    from tests.batch_scan import scan_result

    scan = tmp / "scan"
    scan.mkdir()
    for name in ("spec.json", BUDGET_FILE):
        shutil.copy(point_dir / name, scan / name)
    searched = SearchState.read(point_dir)
    SearchState(searched.capacity_bytes, searched.margin, 1, "exhaustive scan").write(scan)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    proc = subprocess.run(
        [*cmd, "--max-restarts=0", "-m", "tests.batch_scan", str(scan)], env=env, capture_output=True, text=True
    )
    lo, hi = scan_result(scan)
    assert proc.returncode == 0 or list(scan.glob("batch_oom_rank*.json")), proc.stderr[-3000:]
    return lo, hi, SearchState.read(scan).trials


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> dict:
    """The first and the last test's sweeps, one rank each, side by side (module docstring): ``"search"`` and
    ``"too_small"``."""
    sweeps = {
        "search": ["per_device_batch_size=auto", f"cluster.gpu_mem_gib={BUDGET_GIB}", "ranks_per_node=1", *FAST],
        "too_small": ["-m", "per_device_batch_size=auto,16", "cluster.gpu_mem_gib=0.002", "ranks_per_node=1", *FAST],
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run_sweeper, args, tmp_path_factory.mktemp(name)) for name, args in sweeps.items()}
        return {name: f.result() for name, f in futures.items()}


def test_auto_batch_under_a_cpu_budget_faking_gpu_memory_equals_an_exhaustive_scan_in_log_trials(tmp_path, one_rank):
    """One rank: the search's own path without collectives (two ranks, with their all-gathered peaks and an OOM on
    one rank only, are the next test's, which checks the same properties on its trials and its measurement)."""
    ranks = 1
    run = one_rank["search"]
    assert run.proc.returncode == 0, run.output[-3000:]
    record, search = _search(run)
    assert record.status == "ok", record.reason
    answer = search["answer"]
    pdir = run.sweep_dir / "points" / record.point_id

    lo, hi, scanned = exhaustive_scan(pdir, ranks, tmp_path)
    assert (answer, search["smallest_failing"]) == (lo, hi) == (lo, lo + 1)
    n = search["trial_count"]
    assert n <= trial_bound(answer, search["seed"]) and n < len(scanned), (n, len(scanned))
    # every trial is recorded: its batch, how it ended and, when it ran, each rank's peak (bytes)
    usable = search["usable_bytes"]
    for t in search["trials"]:
        assert t["outcome"] in ("fits", "over_margin", "oom")
        if t["outcome"] != "oom":
            assert len(t["peak_bytes_per_rank"]) == ranks and t["peak_bytes"] == max(t["peak_bytes_per_rank"])
            assert (t["peak_bytes"] <= usable) == (t["outcome"] == "fits")
    # the same batch measured the same peak in the search and in the scan (the same trial, the same counter)
    peaks = {t.batch: t.peak_bytes for t in scanned}
    assert all(
        peaks[t["batch"]] == t["peak_bytes"] for t in search["trials"] if t["batch"] in peaks and t["peak_bytes"]
    )

    # the point is measured at the batch found, and that measurement fits too
    assert record.spec["per_device_batch_size"] == answer
    assert record.overrides[0] == "per_device_batch_size=auto" and "per_device_batch_size=auto" in record.replay
    assert record.metrics["tokens_per_step"] == answer * 128 * ranks
    assert record.metrics["peak_mem_bytes"] <= usable
    assert json.loads((pdir / SEARCH_FILE).read_text())["answer"] == answer


def test_one_rank_over_the_budget_mid_step_fake_oom_on_cpu_ends_its_launch_without_deadlock(tmp_path):
    """Only rank 1 crosses the budget (it holds a fake activation from the middle of its forward): it raises the
    faked GPU OOM mid-step while rank 0 goes on into the step's all-reduce. Rank 1 leaves its verdict and exits;
    torchrun stops rank 0; the search goes on in a new launch and ends with the exhaustive scan's answer."""
    run = run_sweeper(
        ["per_device_batch_size=auto", f"cluster.gpu_mem_gib={BUDGET_GIB}", "ranks_per_node=2", *FAST, ONE_RANK_OVER],
        tmp_path,
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    record, search = _search(run)
    assert record.status == "ok", record.reason
    ooms = [t for t in search["trials"] if t["outcome"] == "oom"]
    assert ooms and all(t["rank"] == 1 and t["oom"]["ranks"] == [1] for t in ooms)
    # one launch ends at each OOM; one more unless the last OOM closed the bracket
    assert search["launches"] == len(ooms) + (search["trials"][-1]["outcome"] != "oom")
    for t in ooms:
        assert t["oom"]["phase"] == "train" and t["oom"]["device_kind"] == "cuda"
        assert "raised on CPU by sweeper" in t["oom"]["message"]
        assert t["oom"]["capacity_bytes"] == pytest.approx(search["capacity_bytes"], rel=1e-3)
        assert t["oom"]["teardown_s"] < 30  # torchrun stopped rank 0; the process-group timeout (300 s) never came

    pdir = run.sweep_dir / "points" / record.point_id
    lo, hi, scanned = exhaustive_scan(pdir, 2, tmp_path)
    answer = search["answer"]
    assert (answer, search["smallest_failing"]) == (lo, hi) == (lo, lo + 1)
    assert search["trial_count"] <= trial_bound(answer, search["seed"])
    # every trial that ran has both ranks' peaks, its verdict from the larger one (an all-gather then a MAX)
    usable = search["usable_bytes"]
    for t in search["trials"]:
        if t["outcome"] != "oom":
            assert len(t["peak_bytes_per_rank"]) == 2 and t["peak_bytes"] == max(t["peak_bytes_per_rank"])
            assert (t["peak_bytes"] <= usable) == (t["outcome"] == "fits")
    peaks = {t.batch: t.peak_bytes for t in scanned}
    assert all(
        peaks[t["batch"]] == t["peak_bytes"] for t in search["trials"] if t["batch"] in peaks and t["peak_bytes"]
    )
    # the point is measured at the batch found, on both ranks, and that measurement fits too
    assert record.spec["per_device_batch_size"] == lo
    assert record.metrics["tokens_per_step"] == answer * 128 * 2
    assert record.metrics["peak_mem_bytes"] <= usable
    assert json.loads((pdir / SEARCH_FILE).read_text())["answer"] == answer


def test_under_a_cpu_budget_too_small_for_one_sample_the_fake_gpu_oom_on_cpu_makes_both_points_oom(one_rank):
    """2 MiB per rank holds less than the tiny model's states: the search records the OOM at batch 1 and measures
    nothing; a fixed batch meets the same budget in its first warm-up step (the harness enforces it on every point
    on CPU ranks, as a GPU's memory would be)."""
    run = one_rank["too_small"]
    assert run.proc.returncode == 0, run.output[-3000:]
    searched = next(r for r in run.records() if "batch_search" in r.ran)
    search = searched.ran["batch_search"]
    assert searched.status == "oom"
    assert searched.reason.startswith("per_device_batch_size=auto: not even one sample per device fits: batch 1")
    assert search["answer"] == 0 and search["smallest_failing"] == 1
    assert [t["batch"] for t in search["trials"]][-1] == 1
    assert searched.spec["per_device_batch_size"] == 1 and searched.failure["batch"] == 1
    assert not list((run.sweep_dir / "points" / searched.point_id).glob("rank*.json"))  # nothing was measured

    fixed = run.by(per_device_batch_size=16)
    assert fixed.status == "oom" and "batch_search" not in fixed.ran
    assert (fixed.failure["phase"], fixed.failure["step"]) == ("train", 0)  # mid-step, in the first warm-up step
    assert fixed.failure["capacity_bytes"] == pytest.approx(0.002 * 2**30, rel=1e-2)
    assert "raised on CPU by sweeper" in fixed.failure["message"]
