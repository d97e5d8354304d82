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

from sweeper.job.budget import BudgetTracker
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
    """Tensor-byte peak (CPU, MemTracker) and model-state bytes of this rank, in the memory window.

    Attributes after training:
        peak_bytes: MemTracker's peak total over the window (CPU only; None on CUDA).
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
        self._tracker = None
        self._model = None
        self._optimizer = None

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step not in self.windows.memory:
            return
        self._model, self._optimizer = model, optimizer
        if self.cuda:
            return
        if self._tracker is None:
            self._tracker = BudgetTracker(self.budget_bytes) if self.budget_bytes else MemTracker()
            self._tracker.track_external(model, innermost_optimizer(optimizer))
            self._tracker.__enter__()
        else:
            self._tracker.reset_mod_stats()

    def on_substep_end(self, args, state, control, **kwargs):
        new_micro_batch(self._tracker)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if state.global_step == self.windows.memory.start and self._model is not None:
            self.state_bytes = model_state_bytes(self._model, self._optimizer)

    def on_step_end(self, args, state, control, **kwargs):
        if self._tracker is not None and state.global_step - 1 == self.windows.memory.stop - 1:
            self._tracker.__exit__(None, None, None)
            snap = self._tracker.get_tracker_snapshot("peak")
            totals: dict[str, int] = {}
            for per_dev in snap.values():
                for k, v in per_dev.items():
                    key = getattr(k, "value", str(k))
                    totals[key] = totals.get(key, 0) + int(v)
            self.peak_bytes = totals.pop("Total", None)
            self.breakdown_bytes = totals
            self._tracker = None

    def abandon(self) -> None:
        """Stop measuring after a fault of this window's own code (:func:`sweeper.job.faults.guard_callback`): leave
        the tracker if one is open (its hooks off the model) and forget its partial peak; ``state_bytes`` stays when
        it was measured."""
        tracker, self._tracker = self._tracker, None
        self.peak_bytes, self.breakdown_bytes = None, {}
        if tracker is not None:
            tracker.__exit__(None, None, None)


class BudgetWindow(TrainerCallback):
    """Enforces the budget over the optimizer steps ``steps`` (0-based) with one :class:`BudgetTracker`, entered at
    the first one's ``on_step_begin`` (the model and optimizer registered then) and left after the last one.

    The harness runs it over the warm-up steps (and :class:`MemoryWindow` enforces the budget in
    the memory window), never in the timed window, where the tracker's cost (about 4x a step) would be timed; a batch
    search trial runs it over both of its steps.

    Attributes:
        peak_bytes: the tracker's peak over the window (bytes), None until the window ends.
    """

    def __init__(self, steps: range, limit_bytes: int) -> None:
        self.steps = steps
        self.limit_bytes = int(limit_bytes)
        self.peak_bytes: int | None = None
        self.tracker: BudgetTracker | None = None

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step not in self.steps:
            return
        if self.tracker is None:
            self.tracker = BudgetTracker(self.limit_bytes)
            self.tracker.track_external(model, innermost_optimizer(optimizer))
            self.tracker.__enter__()
        else:
            self.tracker.reset_mod_stats()  # MemTracker refuses a second iteration without it

    def on_substep_end(self, args, state, control, **kwargs):
        new_micro_batch(self.tracker)

    def on_step_end(self, args, state, control, **kwargs):
        if self.tracker is not None and state.global_step - 1 == self.steps[-1]:
            self.close()

    def close(self) -> None:
        """Leave the tracker (also after an exception ended the window early); keeps :attr:`peak_bytes`."""
        if self.tracker is not None:
            self.peak_bytes = self.tracker.peak_bytes
            self.tracker.__exit__(None, None, None)
            self.tracker = None
