"""sweeper's CPU tensor counters on a real ``DistributedDataParallel`` (2 gloo ranks): one tracker per optimizer step,
and DDP's bucket rebuild in the second iteration left out, so that every step, the memory window and the budget read
on one rule. Before, the budget's one tracker over the warm-up counted the rebuilt buckets in the second step and, on
gloo, the previous step's all-reduce result (a gradient's size) in every later one: a point whose memory window fits
its budget ended ``oom`` at warm-up step 1 (docs/cases.md U14)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    # a wide output, as a language model's head: backward starts with a logits-sized gradient, before any
    # parameter's gradient reaches DDP's bucket, so a step's peak comes before its backward first touches the bucket
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4096))


def _peak(tracker) -> int:
    return int(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])


def _rank(rank: int, out: str) -> None:
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.nn.parallel import DistributedDataParallel

    from sweeper.job.budget import TensorTracker
    from sweeper.job.memory import StepTrackers

    # a timeout: a rank left waiting in a collective fails the test instead of hanging the suite
    dist.init_process_group(
        "gloo", init_method=f"file://{out}/store", rank=rank, world_size=WORLD, timeout=timedelta(seconds=120)
    )
    got: dict = {}

    def fresh():
        model = _model()
        return model, DistributedDataParallel(model), torch.optim.SGD(model.parameters(), lr=0.1)

    def step(wrapped, opt) -> None:
        wrapped(torch.randn(64, 64)).logsumexp(-1).sum().backward()
        opt.step()
        opt.zero_grad()

    # the product's rule: a tracker per step over four steps (the rebuild is in the second)
    model, wrapped, opt = fresh()
    steps, peaks = StepTrackers(), []
    for _ in range(4):
        steps.begin(model, opt)
        step(wrapped, opt)
        steps.end()
        peaks.append(steps.last_peak_bytes)
    got["per_step"] = peaks
    got["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    # a plain MemTracker over the second step sees the rebuilt buckets; ours over the same step does not
    model, wrapped, opt = fresh()
    step(wrapped, opt)
    plain = MemTracker()
    plain.track_external(model, opt)
    with plain:
        step(wrapped, opt)
    got["plain_second_step"] = _peak(plain)
    # one tracker over four steps (the rule before) counts more than any step: read without a limit, so that no rank
    # leaves a step (and its all-reduce) by an exception the other rank may raise elsewhere, or not at all
    model, wrapped, opt = fresh()
    long = TensorTracker()
    long.track_external(model, opt)
    with long:
        for _ in range(4):
            step(wrapped, opt)
            long.reset_mod_stats()
    got["long_peak"] = _peak(long)
    # the product's budget rule at the same limit: a fresh budget tracker each step, never raises
    model, wrapped, opt = fresh()
    for _ in range(4):
        budget = StepTrackers(max(peaks))
        budget.begin(model, opt)
        step(wrapped, opt)
        budget.end()
    got["budget_peak"] = budget.peak_bytes
    Path(out, f"rank{rank}.json").write_text(json.dumps(got))
    dist.barrier()
    dist.destroy_process_group()


def test_every_step_reads_alike_the_rebuild_is_left_out_and_the_budget_of_one_step_holds_in_every_step(tmp_path):
    mp.start_processes(_rank, args=(str(tmp_path),), nprocs=WORLD, start_method="spawn")
    for rank in range(WORLD):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        per_step = got["per_step"]
        assert len(set(per_step[1:])) == 1 and per_step[0] <= per_step[1], per_step  # the second step as the rest
        assert got["plain_second_step"] - per_step[1] >= got["param_bytes"], got  # the rebuild really allocates
        assert got["long_peak"] > max(per_step), got  # one tracker over the steps counts more: the rule before
        assert got["budget_peak"] == max(per_step), got  # the product's rule at that limit: four steps, no OOM
