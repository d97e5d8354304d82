"""Memory inside each rank: the bytes a rank holds, the memory window, and the window that enforces the device
budget, as HF ``TrainerCallback``s.

* model-state bytes (parameters, gradients, optimizer state held by this rank; :func:`model_state_bytes`): counted
  in the memory window, just before the optimizer step, when gradients exist.
* memory window (:class:`MemoryWindow`): on CPU, ``torch.distributed._tools.mem_tracker.MemTracker`` counts tensor
  bytes (the CPU analogue of the CUDA allocator's peak; it slows a step about 4x, hence its own window). On CUDA the
  allocator's peak (``max_memory_allocated``/``max_memory_reserved``) covers the whole run at no cost.
* the device budget (``cluster.gpu_mem_gib`` on CPU ranks, :mod:`sweeper.job.budget`): enforced in the memory
  window by :class:`MemoryWindow` and elsewhere (the warm-up, a batch-search trial) by :class:`BudgetWindow`, never
  in the timed window.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._tools.mem_tracker import MemTracker
from transformers import TrainerCallback

from sweeper.job.budget import BudgetTracker, TensorTracker
from sweeper.job.timing import Windows


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of a (possibly sharded) tensor that this rank holds: DTensor -> local shard; DeepSpeed ZeRO-3
    partitioned parameter -> its partition (the visible tensor is an empty placeholder)."""
    if hasattr(t, "ds_tensor"):
        t = t.ds_tensor
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(t: torch.Tensor | None) -> int:
    """Bytes this rank holds for ``t`` (DTensor: local shard; DeepSpeed ZeRO-3 param: its partition)."""
    if t is None:
        return 0
    t = local_tensor(t)
    return t.numel() * t.element_size()


def innermost_optimizer(opt: Any) -> Any:
    """Unwrap accelerate / DeepSpeed optimizer wrappers down to the torch optimizer that holds the state."""
    seen = set()
    while hasattr(opt, "optimizer") and id(opt) not in seen:
        seen.add(id(opt))
        opt = opt.optimizer
    return opt


def model_state_bytes(model: torch.nn.Module, optimizer: Any) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state that *this rank* holds.

    Gradients: ``param.grad`` (local shard); None under DeepSpeed (see below). Optimizer state: every tensor in
    the innermost torch optimizer's ``state`` (Adam: exp_avg, exp_avg_sq, step), plus DeepSpeed's fp32 master
    partitions (ZeRO keeps them apart from the model's parameters: 4 + 8 bytes/param / N, the ZeRO paper's 12x/N).

    Returns:
        ``{"param_bytes": int, "grad_bytes": int | None, "optimizer_state_bytes": int}``.
    """
    params = list(model.parameters())
    param_bytes = sum(tensor_bytes(p) for p in params)
    grad_bytes = sum(tensor_bytes(p.grad) for p in params)
    inner = innermost_optimizer(optimizer)
    state_bytes = 0
    for state in getattr(inner, "state", {}).values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                state_bytes += tensor_bytes(v)
    masters = _deepspeed_master_partitions(optimizer)
    if masters is not None:
        # DeepSpeed ZeRO steps fp32 master partitions that are copies of the model's parameters; its gradient
        # partitions are consumed inside its own step (before the Trainer's optimizer hooks), so not observable
        state_bytes += sum(tensor_bytes(p) for p in masters)
        return {"param_bytes": param_bytes, "grad_bytes": None, "optimizer_state_bytes": state_bytes}
    if type(optimizer).__name__ == "DeepSpeedOptimizerWrapper":
        # DeepSpeed at stage 0 (AutoTP): the engine steps and clears the gradients inside its own step, before the
        # Trainer's optimizer hooks run: not observable here, as under ZeRO
        return {"param_bytes": param_bytes, "grad_bytes": None, "optimizer_state_bytes": state_bytes}
    return {"param_bytes": param_bytes, "grad_bytes": grad_bytes, "optimizer_state_bytes": state_bytes}


def _deepspeed_master_partitions(optimizer: Any) -> list[torch.Tensor] | None:
    """DeepSpeed's fp32 master partitions held by this rank (ZeRO-1/2: ``single_partition_of_fp32_groups``,
    ZeRO-3: ``fp32_partitioned_groups_flat``), or None when the optimizer is not a DeepSpeed ZeRO optimizer."""
    seen = set()
    opt = optimizer
    while opt is not None and id(opt) not in seen:
        seen.add(id(opt))
        for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
            if hasattr(opt, attr):
                return list(getattr(opt, attr))
        opt = getattr(opt, "optimizer", None)
    return None


def new_micro_batch(tracker: MemTracker | None) -> None:
    """Ready ``tracker`` for the next micro-batch of the same optimizer step (gradient accumulation).

    ``MemTracker`` keeps per-module statistics and raises ``NotImplementedError`` ("does not support memory tracking
    for multiple iterative calls") when the root module runs forward a second time with them in place
    (``MemTracker._pre_fw_hook``, torch 2.13 ``torch/distributed/_tools/mem_tracker.py``): with ``grad_accum > 1``
    that is every micro-batch after the first, inside one optimizer step. ``reset_mod_stats`` clears only those
    per-module statistics (``memory_tracking``); the tracked tensors (``_curr_mem_snap``), the running peak
    (``_peak_mem``, ``_peak_mem_snap``) and the optimizer hooks stay, so the window's peak still covers every
    micro-batch, and the gradients accumulated by earlier micro-batches stay counted while later ones run.

    HF Trainer (transformers 5 ``Trainer._inner_training_loop``) calls ``on_substep_end`` after each micro-batch
    but the last of an optimizer step (the last one ends with ``on_step_end``), after its backward and before the
    next micro-batch's forward: the point where this is called. A no-op when no tracker runs.
    """
    if tracker is not None:
        tracker.reset_mod_stats()


class MemoryWindow(TrainerCallback):
    """Tensor-byte peak (CPU, :class:`~sweeper.job.budget.TensorTracker`) and model-state bytes of this rank, in the
    memory window.

    On CPU each optimizer step of the window gets a tracker of its own (:class:`StepTrackers`): a step counts what
    it allocates plus the model states, as every CPU counter of sweeper does, and the window's peak is the largest
    step's.

    Attributes after training:
        peak_bytes: the largest step's peak total (bytes; CPU only, None on CUDA).
        breakdown_bytes: that peak split by MemTracker's categories (Parameter, Buffer, Gradient, Activation,
            Temp, Optstate, Other).
        state_bytes: :func:`model_state_bytes` measured before the window's first optimizer step.
    """

    def __init__(self, windows: Windows, cuda: bool, budget_bytes: int | None = None) -> None:
        self.windows = windows
        self.cuda = cuda
        self.budget_bytes = budget_bytes  # CPU: raise the OOM a GPU would past it (BudgetTracker)
        self.peak_bytes: int | None = None
        self.breakdown_bytes: dict[str, int] = {}
        self.state_bytes: dict[str, int] = {}
        self._steps = StepTrackers(budget_bytes)
        self._model = None
        self._optimizer = None

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step not in self.windows.memory:
            return
        self._model, self._optimizer = model, optimizer
        if not self.cuda:
            self._steps.begin(model, optimizer)

    def on_substep_end(self, args, state, control, **kwargs):
        new_micro_batch(self._steps.tracker)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if state.global_step == self.windows.memory.start and self._model is not None:
            self.state_bytes = model_state_bytes(self._model, self._optimizer)

    def on_step_end(self, args, state, control, **kwargs):
        if self._steps.tracker is None:
            return
        self._steps.end()
        if state.global_step - 1 == self.windows.memory.stop - 1:
            totals = dict(self._steps.peak_snapshot)
            self.peak_bytes = totals.pop("Total", None)
            self.breakdown_bytes = totals

    def abandon(self) -> None:
        """Stop measuring after a fault of this window's own code (:func:`sweeper.job.faults.guard_callback`): leave
        the tracker if one is open (its hooks off the model) and forget its partial peak; ``state_bytes`` stays when
        it was measured."""
        self._steps.end()
        self.peak_bytes, self.breakdown_bytes = None, {}


class StepTrackers:
    """One CPU tracker per optimizer step (:class:`~sweeper.job.budget.TensorTracker`, or
    :class:`~sweeper.job.budget.BudgetTracker` under a budget), and the largest step's peak.

    A tracker sees the model states (``track_external``) and what is allocated while it runs, not what an earlier
    step left alive. One tracker over several steps would count from a later step's start what the earlier steps
    left alive (under DDP the reducer's gradient bucket, which a tracker first sees when a step's backward writes
    into it: a gradient's size), so its later steps would read higher than its first. One per step keeps every step,
    every window and the budget on one rule.

    Attributes:
        tracker: the open tracker (None between steps). peak_bytes: the largest step's peak total (bytes; None
            before a step ended). peak_snapshot: that step's peak split by MemTracker's categories, ``Total``
            included (bytes). last_peak_bytes: the peak of the step that ended last (bytes).
    """

    def __init__(self, budget_bytes: int | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.tracker: TensorTracker | None = None
        self.peak_bytes: int | None = None
        self.peak_snapshot: dict[str, int] = {}
        self.last_peak_bytes: int | None = None

    def begin(self, model: Any, optimizer: Any) -> None:
        """Open this step's tracker (the previous one, if a step ended without :meth:`end`, is ended first)."""
        self.end()
        tracker = BudgetTracker(self.budget_bytes) if self.budget_bytes else TensorTracker()
        tracker.track_external(model, innermost_optimizer(optimizer))
        tracker.__enter__()
        self.tracker = tracker

    def end(self) -> None:
        """Leave the open tracker (also after an exception ended the step) and keep its peak if it is the largest."""
        tracker, self.tracker = self.tracker, None
        if tracker is None:
            return
        tracker.__exit__(None, None, None)
        totals: dict[str, int] = {}
        for per_dev in tracker.get_tracker_snapshot("peak").values():
            for k, v in per_dev.items():
                key = getattr(k, "value", str(k))
                totals[key] = totals.get(key, 0) + int(v)
        total = self.last_peak_bytes = totals.get("Total", 0)
        if self.peak_bytes is None or total > self.peak_bytes:
            self.peak_bytes, self.peak_snapshot = total, totals


class BudgetWindow(TrainerCallback):
    """Enforces the budget over the optimizer steps ``steps`` (0-based), each step with a tracker of its own
    (:class:`StepTrackers`: the rule of the memory window), opened at its ``on_step_begin`` (the model and optimizer
    registered then) and left at its ``on_step_end``.

    The harness runs it over the warm-up steps (and :class:`MemoryWindow` enforces the budget in
    the memory window), never in the timed window, where the tracker's cost (about 4x a step) would be timed; a batch
    search trial runs it over both of its steps.

    Attributes:
        peak_bytes: the largest step's peak (bytes), None until a step of the window ended.
    """

    def __init__(self, steps: range, limit_bytes: int) -> None:
        self.steps = steps
        self.limit_bytes = int(limit_bytes)
        self._steps = StepTrackers(self.limit_bytes)

    @property
    def peak_bytes(self) -> int | None:
        return self._steps.peak_bytes

    @property
    def tracker(self) -> TensorTracker | None:
        """The open step's tracker (None between steps)."""
        return self._steps.tracker

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step in self.steps:
            self._steps.begin(model, optimizer)

    def on_substep_end(self, args, state, control, **kwargs):
        new_micro_batch(self._steps.tracker)

    def on_step_end(self, args, state, control, **kwargs):
        self._steps.end()

    def close(self) -> None:
        """Leave the open tracker (also after an exception ended the window early); keeps :attr:`peak_bytes`."""
        self._steps.end()
