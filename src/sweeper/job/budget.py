"""A device-memory budget per rank: the OOM a GPU would raise, raised on CPU ranks too.

A CPU has no device memory to run out of, so on a CPU cluster ``cluster.gpu_mem_gib`` is a tensor-byte budget per
rank: :class:`BudgetTracker` (torch's ``MemTracker``, the counter of the memory window, ``docs/measurement.md``)
raises ``torch.OutOfMemoryError`` with the CUDA allocator's wording the moment this rank's live tensor bytes pass the
budget, in the middle of the step, as the allocator would. The message says it was raised on CPU by sweeper; its
numbers parse like a real one (:func:`sweeper.failures.oom.parse_oom`). On a GPU the allocator raises the real one;
a budget under the device's memory is applied with ``torch.cuda.set_per_process_memory_fraction``
(:func:`apply_gpu_budget`).

The driver puts the budget in the point directory (:data:`sweeper.point.device_budget.BUDGET_FILE`); it is not part
of the point's identity. Only ``sweeper.job`` imports torch.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _UpdateType
from torch.nn.parallel import DistributedDataParallel

from sweeper.units import MIB

#: The CPU budget's OOM says where it comes from (after the CUDA wording the parsers read).
FAKE_NOTE = (
    "(raised on CPU by sweeper: this rank's tensor bytes passed the per-rank budget cluster.gpu_mem_gib, "
    "docs/batch-search.md)"
)


def _mib(n: int) -> str:
    return f"{n / MIB:.2f} MiB"


def budget_oom(requested: int, allocated: int, limit: int, device_index: int) -> torch.OutOfMemoryError:
    """The ``torch.OutOfMemoryError`` a CUDA allocator of ``limit`` bytes raises when ``requested`` more bytes do not
    fit beside ``allocated`` (bytes), in torch >= 2.2's wording, followed by :data:`FAKE_NOTE`."""
    free = max(0, limit - allocated)
    return torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {_mib(requested)}. GPU {device_index} has a total capacity of "
        f"{_mib(limit)} of which {_mib(free)} is free. Of the allocated memory {_mib(allocated)} is allocated by "
        f"PyTorch, and 0.00 MiB is reserved by PyTorch but unallocated. {FAKE_NOTE}"
    )


class TensorTracker(MemTracker):
    """``MemTracker`` (the tensors created inside it, plus the model and optimizer given to ``track_external``), less
    what ``DistributedDataParallel`` allocates in its own pre-forward: the reducer's gradient buckets, rebuilt once,
    in the second iteration's forward (``DistributedDataParallel._pre_forward`` calls ``reducer._rebuild_buckets``).

    sweeper's CPU counters run one per optimizer step (:class:`sweeper.job.memory.MemoryWindow`,
    :class:`sweeper.job.memory.BudgetWindow`): a step's tensor bytes are what it allocates plus the model states,
    never what earlier steps left alive (DDP's buckets; the memory model keeps them as the GPU-only ``ddp_buckets``
    term, docs/measurement.md). Without this exclusion the second step alone would also count the rebuilt buckets
    (one gradient's size), and a point whose memory window fits the budget would end ``oom`` at warm-up step 1
    (docs/cases.md U14). The exclusion runs from DDP's forward pre-hook to its wrapped module's (every allocation
    between them is DDP's own) and is off for a DDP that calls its module's ``forward`` directly
    (``_delay_all_reduce_all_params``: no pre-hook of the wrapped module would end it).
    """

    def __init__(self) -> None:
        super().__init__()
        self._ddp_pre_forward: torch.nn.Module | None = None  # the DDP module whose pre-forward runs now
        self._hook: Any = None

    def _forward_pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        if isinstance(module, DistributedDataParallel):
            self._ddp_pre_forward = None if getattr(module, "_delay_all_reduce_all_params", False) else module
        elif self._ddp_pre_forward is not None and module is getattr(self._ddp_pre_forward, "module", None):
            self._ddp_pre_forward = None

    def __enter__(self) -> TensorTracker:
        from torch.nn.modules.module import register_module_forward_pre_hook

        self._hook = register_module_forward_pre_hook(self._forward_pre_hook)
        super().__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._ddp_pre_forward = None
        super().__exit__(*args)

    def _track(self, reftype: Any, t: torch.Tensor) -> None:
        if self._ddp_pre_forward is None:
            super()._track(reftype, t)


class BudgetTracker(TensorTracker):
    """:class:`TensorTracker` that raises :func:`budget_oom` when this rank's tracked tensor bytes pass
    ``limit_bytes``: it counts what the memory window counts, so a point under the budget there is under it in
    every step. The check runs on every new or resized storage, so the error comes from the operation that crossed
    the budget (forward, backward, optimizer step or an FSDP gather), mid-step.

    Attributes:
        limit_bytes: the budget (bytes). peak_bytes: the largest total seen so far (bytes).
    """

    def __init__(self, limit_bytes: int) -> None:
        super().__init__()
        self.limit_bytes = int(limit_bytes)
        self.device_index = int(os.environ.get("LOCAL_RANK", "0"))

    def _update_snap(self, u_type: Any, winfo: Any, old_mem_consumed: int | None = None, old_reftype: Any = None):
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        if u_type == _UpdateType.ADD:
            grew = winfo.mem_consumed
        elif u_type == _UpdateType.SIZE:
            grew = winfo.mem_consumed - (old_mem_consumed or 0)
        else:
            return
        total = self.current_bytes
        if grew > 0 and total > self.limit_bytes:
            raise budget_oom(grew, total - grew, self.limit_bytes, self.device_index)

    @property
    def current_bytes(self) -> int:
        """Tensor bytes tracked now, over all devices."""
        return sum(int(snap.get("Total", 0)) for snap in self._curr_mem_snap.values())

    @property
    def peak_bytes(self) -> int:
        """The largest total seen (bytes), over all devices."""
        return sum(int(v) for v in self._peak_mem.values())


def apply_gpu_budget(limit_bytes: int | None) -> int:
    """On a GPU, cap this process's allocator at ``limit_bytes`` when that is below the device's memory, so the real
    allocator raises at the planned capacity (a smaller GPU than this one). Returns the capacity in force (bytes)."""
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if limit_bytes and limit_bytes < total:
        torch.cuda.set_per_process_memory_fraction(limit_bytes / total)
        return int(limit_bytes)
    return int(total)
