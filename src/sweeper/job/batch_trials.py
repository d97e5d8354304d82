"""The rank side of ``per_device_batch_size=auto``: the mode ``search`` of every rank's entry point,
``python -m sweeper.job.harness --mode=search <point_dir>`` (torchrun; the life every rank shares is
:mod:`sweeper.job.rank`).

All ranks run the trials of :class:`sweeper.point.batch_search.SearchState` one after the other inside this one
launch. A trial builds the model and a Trainer at one batch and runs two optimizer steps (one to create the optimizer
states, one more at the steady peak) under the device budget (:mod:`sweeper.job.budget`); its peak is this rank's
tracked tensor bytes on CPU, or on a GPU the allocator's reserved peak plus the memory outside the allocator (CUDA
context, NCCL buffers). Then:

* **every rank agrees**: the ranks all-gather their peaks, so each applies the same verdict (the largest peak against
  the usable bytes, an all-reduce MAX) and picks the same next batch; rank 0 writes the trial to
  :data:`~sweeper.point.batch_search.SEARCH_FILE` and a barrier follows, so a trial agreed on is on disk before any
  rank can start the next one;
* **no deadlock**: a rank that runs out of memory mid-step cannot stay in the process group (the other ranks are
  inside a collective of the step it left: a DDP bucket all-reduce, an FSDP all-gather), so it writes its verdict to
  :data:`~sweeper.point.batch_search.OOM_FILE` and exits at once with :data:`OOM_EXIT_CODE`. torchrun then stops the
  other ranks (SIGTERM, about 1.6 s after the exit on the 2-core development machine) and the driver
  (:mod:`sweeper.launchers.batch_search`) records the ``oom`` trial and starts the ranks again from the trials so
  far. The process group's timeout (:data:`SEARCH_PG_TIMEOUT_S`) is the backstop should the launcher not stop them.

Any other exception ends the search: the rank writes its ``rank<r>.json`` failure (:meth:`sweeper.job.rank.Rank.write`,
the rank file every rank writes), and the driver records the point from the rank files. The search's own code between
the trials runs at attributed sites (:mod:`sweeper.job.faults`): ``search-state`` (the state read at start, with the
device capacity, and rank 0's write of each trial), ``search-step`` (the next batch, the verdict), ``search-peak`` (a
trial's peak reading) and ``budget`` (a trial's budget window on CPU); a fault there is the rank's failure, recorded
``internal``, never the point's own error.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch

from sweeper.config.spec import PointSpec
from sweeper.failures.oom import parse_oom
from sweeper.job.faults import attributed, guard_callback
from sweeper.job.jit_locks import before_build
from sweeper.job.rank import PhaseTracker, Rank, exit_now, user_callbacks
from sweeper.point.batch_search import OOM_FILE, SearchState
from sweeper.point.device_budget import read_budget
from sweeper.results.atomic import write_json_atomic
from sweeper.results.rankfile import MESSAGE_CHARS

#: Exit code of a rank that ran out of memory mid-trial (its verdict is in OOM_FILE).
OOM_EXIT_CODE = 3
#: The process group's timeout during a search (seconds, capped by the point's timeout_s): the backstop that ends a
#: collective whose peer died without the launcher stopping this rank.
SEARCH_PG_TIMEOUT_S = 300.0

NextBatch = Callable[[SearchState], "tuple[int, str] | None"]


def is_oom(exc: BaseException) -> bool:
    """``torch.OutOfMemoryError``, or any exception whose message is an out-of-memory message
    (:func:`sweeper.failures.oom.parse_oom`: CUDA, HIP, XPU, MPS, the CPU allocator, cuBLAS)."""
    return isinstance(exc, torch.OutOfMemoryError) or parse_oom(str(exc)) is not None


def run_search(point_dir: Path, next_batch: NextBatch = SearchState.next_batch) -> int:
    """Run trials until ``next_batch`` says the search is done; returns this rank's exit code (0: done, 1: the search
    failed for another reason than memory, its rank file written).

    Args:
        point_dir: the point directory: ``spec.json``, the search state and the device budget written by the driver.
        next_batch: which batch to try next (default: the search of :mod:`sweeper.point.batch_search`; a test may
            pass an exhaustive scan).

    A rank that runs out of memory never returns: it writes :data:`~sweeper.point.batch_search.OOM_FILE` and exits
    with :data:`OOM_EXIT_CODE` (see the module doc). Everything else runs inside the rank's error handling
    (:meth:`~sweeper.job.rank.Rank.attempt`): no search state, no device budget on CPU, the process group's set-up or
    a collective between trials failing are the rank file's failure.
    """
    me = Rank(point_dir)
    state = me.read_input(partial(SearchState.load, me.point_dir), "search-state") if me.ok else None
    if state is None:
        return me.write_unmeasured()
    point_dir, spec, use_cuda = me.point_dir, me.spec, me.use_cuda
    setup = PhaseTracker()
    me.attempt(partial(before_build, spec.zero, point_dir, me.rank, spec.timeout_s), setup)  # sweeper.job.jit_locks
    if me.ok:
        me.attempt(partial(_init_group, spec, use_cuda), setup)
    capacity = me.attempt(partial(_search_capacity, point_dir, use_cuda), setup) if me.ok else None
    if capacity is None:
        return me.write_unmeasured()
    if state.capacity_bytes is None:
        state.capacity_bytes = capacity
    agreed = 0  # the trials this launch agreed on: the step of the search sites' fault injection
    while True:
        phase = PhaseTracker()
        step = me.attempt(partial(_next, next_batch, state, agreed), phase)
        if not me.ok or step is None:
            return 0 if me.ok else me.write_unmeasured()
        batch, why = step
        t0 = time.perf_counter()
        work = partial(run_trial, spec, batch, point_dir, capacity, use_cuda, phase, agreed)
        peak = me.attempt(work, phase, partial(_leave_if_oom, point_dir, me.rank, batch, why, state.launches))
        if me.ok:
            me.attempt(partial(_agree, state, point_dir, me.rank, (batch, why, peak), use_cuda, t0, agreed), phase)
        if not me.ok:  # not memory: the search ends with this rank's failure
            return me.write_unmeasured()
        agreed += 1


def _next(next_batch: NextBatch, state: SearchState, agreed: int) -> tuple[int, str] | None:
    """``next_batch(state)``, as the site ``search-step`` (``agreed``: the trials this launch agreed on so far)."""
    with attributed("search-step", agreed):
        return next_batch(state)


def _search_capacity(point_dir: Path, use_cuda: bool) -> int:
    """The device capacity of the trials (:func:`_capacity` from the driver's device budget), as the site
    ``search-state``; its all-gather's collective error stays the point's own."""
    with attributed("search-state", at=None):  # injected at the state's read, the first thing of the site
        return _capacity(read_budget(point_dir), use_cuda)


def _agree(
    state: SearchState,
    point_dir: Path,
    rank: int,
    tried: tuple[int, str, int | None],
    use_cuda: bool,
    t0: float,
    agreed: int,
) -> None:
    """Every rank's verdict on the trial ``tried`` (its batch, why it was chosen, this rank's peak) from the
    all-gathered peaks (``search-step``), added to ``state``; rank 0 writes the state (``search-state``; ``agreed``:
    the trials this launch agreed on before this one), then a barrier, so that a trial agreed on is on disk before
    any rank starts the next one."""
    batch, why, peak = tried
    peaks = _all_gather(int(peak or 0), use_cuda)
    with attributed("search-step", at=None):  # injected at the next batch, the first thing of the site
        seconds = round(time.perf_counter() - t0, 3)
        trial = state.verdict(batch, peaks, why, launch=state.launches, seconds=seconds)
    state.trials.append(trial)
    if rank == 0:
        with attributed("search-state", agreed + 1):
            state.write(point_dir)
    _barrier()


def trial_spec(spec: PointSpec, batch: int) -> PointSpec:
    """``spec`` at ``batch`` for one trial: one warm-up and one memory step (the optimizer states exist from the
    first), nothing timed or profiled, no evaluation."""
    return replace(spec.with_batch(batch), warmup_steps=1, timed_steps=0, memory_steps=1, profile_steps=0, eval=False)


def run_trial(
    spec: PointSpec,
    batch: int,
    point_dir: Path,
    capacity: int,
    use_cuda: bool,
    phase: PhaseTracker | None = None,
    agreed: int = 0,
) -> int:
    """Train ``spec`` at ``batch`` for two optimizer steps under the budget; returns this rank's peak (bytes).
    ``phase`` (optional) follows the phase and step, for a failure's record; ``agreed``: the trials this launch
    agreed on before it (the step of the ``search-peak`` site's fault injection).

    CPU: the tensor-byte peak of a :class:`~sweeper.job.budget.BudgetTracker` over both steps, which raises the OOM
    a GPU would past ``capacity``. GPU: ``max_memory_reserved`` plus the device memory outside the allocator.

    Raises:
        torch.OutOfMemoryError: the trial does not fit (real on a GPU, the budget's on CPU); anything the Trainer
            raises.
    """
    from sweeper.job.memory import BudgetWindow
    from sweeper.job.trainer_setup import SweeperTrainer, SyntheticTokens, build_model, training_arguments

    tspec = trial_spec(spec, batch)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    window = None if use_cuda else BudgetWindow(range(tspec.total_steps), capacity)
    try:
        torch.manual_seed(spec.seed)
        model = build_model(tspec)
        own = partial(attributed, "trainer-args")
        args = training_arguments(tspec, str(point_dir / "trainer"), use_cpu=not use_cuda, own=own)
        n = batch * tspec.grad_accum * world * tspec.total_steps
        data = SyntheticTokens(n, tspec.seq_len, model.config.vocab_size, spec.seed)
        # sweeper's own callbacks are sites, as in a measured point (sweeper.job.faults)
        own_callbacks = [guard_callback(c, site) for c, site in ((phase, "phase"), (window, "budget")) if c is not None]
        callbacks = [*own_callbacks, *user_callbacks(tspec)]
        trainer = SweeperTrainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
        if use_cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        with attributed("search-peak", agreed):
            return _trial_peak(window)
    finally:
        if window is not None:
            window.close()
        _release(use_cuda)


def _trial_peak(window: Any) -> int:
    """The peak of the trial just trained (bytes): on CPU its budget window's (:class:`~sweeper.job.memory.
    BudgetWindow`, closed now), on a GPU the allocator's reserved peak plus the memory outside the allocator.

    Raises:
        ValueError: the budget window measured nothing (it never ran: the trial's verdict would be a guess).
    """
    if window is None:
        free, total = torch.cuda.mem_get_info()
        outside = max(0, total - free - torch.cuda.memory_reserved())
        return int(torch.cuda.max_memory_reserved() + outside)
    window.close()
    if window.peak_bytes is None:
        raise ValueError("the trial's budget window measured no peak")
    return int(window.peak_bytes)


def _release(use_cuda: bool) -> None:
    """Forget the trial's Trainer (accelerate's per-run state; the process group stays) and free its memory."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    gc.collect()
    if use_cuda:
        torch.cuda.empty_cache()


def _init_group(spec: PointSpec, use_cuda: bool) -> None:
    """Join the process group now (accelerate adopts it), with the search's timeout as the backstop."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        timeout = timedelta(seconds=min(spec.timeout_s, SEARCH_PG_TIMEOUT_S))
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)


def _capacity(budget: int | None, use_cuda: bool) -> int:
    """The device memory trials must fit in (bytes), the same on every rank (the smallest).

    Raises:
        ValueError: on CPU without a budget (the gate refuses such a point, rule B01).
    """
    if use_cuda:
        from sweeper.job.budget import apply_gpu_budget

        capacity = apply_gpu_budget(budget)
    elif budget is None:
        raise ValueError("per_device_batch_size=auto on CPU needs a tensor-byte budget: set cluster.gpu_mem_gib")
    else:
        capacity = budget
    return min(_all_gather(capacity, use_cuda))


def _all_gather(value: int, use_cuda: bool) -> list[int]:
    """``value`` of every rank, by rank (one rank: ``[value]``)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [int(value)]
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    mine = torch.tensor([int(value)], dtype=torch.int64, device=device)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(out, mine)
    return [int(t.item()) for t in out]


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _leave_if_oom(
    point_dir: Path, rank: int, batch: int, why: str, launch: int, exc: BaseException, phase: PhaseTracker
) -> None:
    """When ``exc`` is an out-of-memory error (:func:`is_oom`), write this rank's OOM verdict and exit at once (no
    interpreter teardown, no collective); else return (the exception becomes the rank file's failure)."""
    if not is_oom(exc):
        return
    info = parse_oom(str(exc))
    verdict: dict[str, Any] = {
        "batch": batch,
        "chosen_by": why,
        "rank": rank,
        "launch": launch,
        "exception_type": type(exc).__name__,
        "message": str(exc)[:MESSAGE_CHARS],
        "phase": phase.phase,
        "step": phase.step,
        "oom": info.to_dict() if info else None,
        "time": time.time(),  # the driver measures from here how long the launcher took to stop the others
    }
    try:
        write_json_atomic(point_dir / OOM_FILE.format(rank=rank), verdict)
    finally:
        exit_now(OOM_EXIT_CODE)
