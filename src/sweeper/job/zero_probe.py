"""DeepSpeed ZeRO-2's host cost on this host's CPU ranks, beyond the collectives the time model counts: measured once
after the host's first ZeRO-1/2 point and cached beside gloo's cost (:mod:`sweeper.job.gloo_probe`).

On CPU ranks a ZeRO-2 step does per parameter tensor what the time model's FLOPs and collectives leave out: the
gradient hook's bookkeeping (``reduce_ready_partitions_and_remove_grads``), the copies into the reduction bucket and
out of it into the rank's partition, the partitioned optimizer step's flat-buffer copies and the norm. On the tiny
model (21 tensors) that was about 13 ms per step on this 2-core host, every batch size (benchmarks/README.md,
``plan_time.py``, 2026-12-05), and the model predicted every ZeRO-2 point too fast.

The probe (:func:`measure_zero`): ``world`` fresh processes on a fresh port (as the gloo probe), each timing a step
(forward, backward, optimizer step) of :data:`PROBE_TENSORS` Linear layers of :data:`PROBE_WIDTH`² fp32 weights
at :data:`PROBE_ROWS` rows: plain (``torch.optim.AdamW``, no communication) and under ``deepspeed.initialize`` with
ZeRO stage 2 (``reduce_bucket_size`` width², HF's ``"auto"``; gradient clipping 1.0, HF's default), the mean of the
repeats, the slowest rank's. The rows make the compute between two gradient hooks a layer's, as in training: with
almost none (16 rows) the ranks reach every all-reduce in step and the collectives cost less than the gloo probe's
fit, which is measured after compute and absorbed DeepSpeed's own cost (this probe's first form, 2026-12-03,
measured 0). The cache keeps the raw times (:func:`sweeper.capacity.hostcomm.zero_key`); the reader subtracts the
modelled collectives at the link in force (:func:`sweeper.capacity.hostcomm.zero_tensor_cost`).

Only after a ZeRO point ran on this host: DeepSpeed JIT-builds its CPU communication op on first use
(:mod:`sweeper.job.jit_locks`), and a probe must not be the one that builds it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from sweeper.capacity.hostcomm import MAX_AGE_S, comm_cache_file, zero_key
from sweeper.job.gloo_probe import ATTEMPTS, RETRY_AFTER_S, _entries, _probe_times, _store, run_rank

#: The probe's layers: ``PROBE_TENSORS`` square Linear weights of ``PROBE_WIDTH`` (no bias, tanh between), at
#: ``PROBE_ROWS`` rows per micro-batch (the tiny model's tensor count and tokens per micro-batch at batch 8).
PROBE_TENSORS, PROBE_WIDTH, PROBE_ROWS = 21, 64, 1024
#: Seconds a try may take: DeepSpeed's import and engine set-up take a few seconds on a loaded host.
TIMEOUT_S = 180.0


def _layers() -> Any:
    import torch

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(PROBE_TENSORS):
        layers += [torch.nn.Linear(PROBE_WIDTH, PROBE_WIDTH, bias=False), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def _mean_s(fn: Any, reps: int) -> float:
    """Mean seconds of ``fn()`` over ``reps`` calls after three warm-up calls, each started after a barrier; the
    slowest rank's (a MAX all-reduce: a step ends when its slowest rank does). The mean, not the median: the waits
    of a rank for the other at a hook's all-reduce are the cost, and they sit in the tail."""
    import torch
    import torch.distributed as dist

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.fmean(times)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _time_steps(rank: int, world: int, port: int, out: Path | None, reps: int) -> None:
    """One probe rank: time the plain and the ZeRO-2 step; rank 0 writes ``{"plain_s", "zero2_s", "tensors",
    "tensor_bytes"}`` to ``out``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        x = torch.randn(PROBE_ROWS, PROBE_WIDTH)
        plain = _layers()
        opt = torch.optim.AdamW(plain.parameters(), lr=1e-4)

        def plain_step() -> None:
            plain(x).sum().backward()
            opt.step()
            opt.zero_grad()

        plain_s = _mean_s(plain_step, reps)
        import deepspeed

        model = _layers()
        config = {
            "train_micro_batch_size_per_gpu": PROBE_ROWS,
            "gradient_clipping": 1.0,
            "zero_optimization": {"stage": 2, "reduce_bucket_size": PROBE_WIDTH * PROBE_WIDTH},
        }
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)

        def zero2_step() -> None:
            engine.backward(engine(x).sum())
            engine.step()

        zero2_s = _mean_s(zero2_step, reps)
        if rank == 0 and out is not None:
            result = {"plain_s": plain_s, "zero2_s": zero2_s, "tensors": PROBE_TENSORS}
            out.write_text(json.dumps({**result, "tensor_bytes": PROBE_WIDTH * PROBE_WIDTH * 4}))
    finally:
        dist.destroy_process_group()


def measure_zero(world: int = 2, reps: int = 20, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Time the probe (module doc) between ``world`` fresh local processes, in up to ``ATTEMPTS`` tries.

    Returns:
        ``{"plain_s", "zero2_s", "tensors", "tensor_bytes"}`` (seconds per step, the mean; tensors; bytes each).

    Raises:
        RuntimeError: every try failed (a rank exited non-zero, timed out after ``timeout_s`` seconds, or wrote
            nothing); the message gives each try's failing ranks and the end of their stderr.
    """
    failures = []
    for _ in range(ATTEMPTS):
        try:
            return _probe_times(world, reps, timeout_s, module="sweeper.job.zero_probe")
        except RuntimeError as e:
            failures.append(str(e))
    raise RuntimeError(f"ZeRO-2 probe failed in {ATTEMPTS} tries: " + "; ".join(failures))


def host_zero(world: int, path: Path | None = None, now: float | None = None) -> bool:
    """Make sure this host's cache holds a ZeRO-2 probe younger than 7 days for ``world`` local ranks: measured
    (:func:`measure_zero`) and stored when missing or stale, unless a probe failed here within the last hour.
    Returns whether an entry is there now. Never raises (the prediction then leaves the term out and says so)."""
    if world <= 1:
        return False
    path = comm_cache_file() if path is None else path
    now = time.time() if now is None else now
    entries = _entries(path)
    key = zero_key(world)
    hit = entries.get(key)
    if isinstance(hit, dict) and 0 <= now - float(hit.get("measured_at", -1)) < MAX_AGE_S:
        return True
    failed = entries.get(f"{key}|failed")
    if isinstance(failed, dict) and 0 <= now - float(failed.get("at", 0)) < RETRY_AFTER_S:
        return False
    try:
        times = measure_zero(world)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        entries = _entries(path)  # the gloo probe may have written meanwhile
        entries[f"{key}|failed"] = {"at": now, "error": str(e)[:2000]}
        _store(path, entries)
        return False
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    source = f"measured: DeepSpeed ZeRO-2 step against plain, {world} local ranks, load average {load:.1f} on {day}"
    entries = _entries(path)
    entries.pop(f"{key}|failed", None)
    entries[key] = {**times, "measured_at": now, "source": source}
    _store(path, entries)
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m sweeper.job.zero_probe --rank R --world N --port P [--out FILE]``: one probe rank (internal)."""
    return run_rank(argv, _time_steps)


if __name__ == "__main__":
    sys.exit(main())
