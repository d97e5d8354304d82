"""Out-of-memory messages: recognise one and read its numbers (bytes) into :class:`OomInfo`.

Works on text only (no torch), so it also reads messages back from logs. Sizes are converted with
:func:`sweeper.units.parse_size` (labels taken literally: ``MiB`` = 2**20 bytes, ``MB`` = 10**6 bytes).

Wordings understood by :func:`parse_oom` (each field is found by its own pattern, in any order):

- torch 1.0 to 1.4 (c10/cuda/CUDACachingAllocator.cpp): ``CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0;
  10.92 GiB total capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)``
- torch 1.5 to 2.0: ``... (GPU 0; 7.93 GiB total capacity; 130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB
  reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb ...``
- torch 2.1 (note the typo): ``Tried to allocate 496.00 MiB. GPU 0 has a total capacty of 14.75 GiB of which 235.06 MiB
  is free. Process 20398 has 14.52 GiB memory in use. Of the allocated memory 14.06 GiB is allocated by PyTorch, and
  330.42 MiB is reserved by PyTorch but unallocated.``
- torch 2.2 and later: ``... GPU 1 has a total capacity of 94.97 GiB of which 17.69 MiB is free. Including
  non-PyTorch memory, this process has 94.95 GiB memory in use. Of the allocated memory 86.44 GiB is allocated by
  PyTorch, and 7.53 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try
  setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ...``; ROCm prints ``HIP out of memory``, Intel GPUs
  ``XPU out of memory`` (both the old parenthesised and the new sentence form).
- Ascend (torch_npu): ``NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; 49.47 GiB
  already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch)``
- Apple MPS: ``MPS backend out of memory (MPS allocated: 9.57 GiB, other allocations: 17.35 GiB, max allowed:
  27.20 GiB). Tried to allocate 292.50 MiB on private pool.`` (older releases label the same numbers ``GB``/``MB``)
- CPU (c10/core/impl/alloc_cpu.cpp): ``DefaultCPUAllocator: can't allocate memory: you tried to allocate 123456
  bytes. Error code 12 (Cannot allocate memory)`` and, on Windows, ``DefaultCPUAllocator: not enough memory: you
  tried to allocate 26214400 bytes.``
- other CUDA wordings with no numbers: ``CUDA error: out of memory``, ``CUBLAS_STATUS_ALLOC_FAILED``, NCCL's
  ``Cuda failure 'out of memory'``.

Any of these may come from a distributed log with every line prefixed ``[rank3]:`` (torch >= 2.2 under torchrun):
the prefixes are removed before parsing (see :func:`sweeper.failures.text.strip_rank_prefixes`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from sweeper.failures.text import strip_rank_prefixes
from sweeper.units import GIB, SIZE_PATTERN, parse_size


@dataclass
class OomInfo:
    """The numbers an out-of-memory message gives, in bytes; ``None`` where that wording lacks the field.

    Attributes:
        requested_bytes: the allocation that failed ("Tried to allocate ...", "you tried to allocate ... bytes").
        device_index: the device number ("GPU 1", "(NPU 3;"); None for host memory or when not printed.
        device_kind: torch device type: "cuda" (also ROCm's "HIP"), "xpu", "npu", "mps", "cpu"; None if unknown.
        capacity_bytes: the device's total memory ("total capacity"); for MPS the allocator's limit ("max allowed").
        free_bytes: memory the driver reported free on the device.
        in_use_bytes: memory this process holds on the device including non-PyTorch memory (CUDA context, NCCL
            buffers): "this process has ... memory in use" (torch >= 2.2).
        other_process_bytes: sum of "Process N has ... memory in use" (torch 2.1 prints the own process this way
            too, and in containers the own PID may not be recognised, so this can include this process).
        allocated_bytes: memory held by live tensors ("is allocated by PyTorch", "already allocated",
            MPS "MPS allocated").
        reserved_unallocated_bytes: cached by PyTorch's allocator but not in tensors ("is reserved by PyTorch but
            unallocated").
        reserved_total_bytes: everything PyTorch's allocator holds ("reserved in total by PyTorch"; torch <= 1.4
            called it "cached").
        fragmentation_hint: True when the memory reserved but unallocated is large: more than 1 GiB, or more than
            10 % of the capacity. It is the printed reserved-but-unallocated amount, or, for the older wording,
            ``reserved_total_bytes - allocated_bytes``. The allocator's advice "If reserved but unallocated memory is
            large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" (or max_split_size_mb) is printed on
            *every* CUDA OOM since torch 1.10, whatever the numbers, so it is not taken as evidence.
    """

    requested_bytes: int | None = None
    device_index: int | None = None
    device_kind: str | None = None
    capacity_bytes: int | None = None
    free_bytes: int | None = None
    in_use_bytes: int | None = None
    other_process_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    reserved_total_bytes: int | None = None
    fragmentation_hint: bool = False

    @property
    def unallocated_reserved_estimate(self) -> int | None:
        """Bytes reserved but not in tensors: printed, or reserved total minus allocated (older wordings)."""
        if self.reserved_unallocated_bytes is not None:
            return self.reserved_unallocated_bytes
        if self.reserved_total_bytes is not None and self.allocated_bytes is not None:
            return max(0, self.reserved_total_bytes - self.allocated_bytes)
        return None

    @property
    def device(self) -> str | None:
        """``"cuda:1"``, ``"cpu"``, ``"mps"``: the device as torch names it, when known."""
        if self.device_kind and self.device_index is not None and self.device_kind != "cpu":
            return f"{self.device_kind}:{self.device_index}"
        return self.device_kind

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (the result record's ``failure["oom"]``)."""
        return asdict(self)


#: Markers of an out-of-memory message (any one suffices).
_OOM_MARKERS = re.compile(
    r"\bout of memory\b|DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
    r"|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|hipErrorOutOfMemory",
    re.IGNORECASE,
)
#: Device kind from the message's own words; first match wins.
_KIND_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bMPS backend out of memory", re.IGNORECASE), "mps"),
    (re.compile(r"\bXPU out of memory"), "xpu"),
    (re.compile(r"\bNPU out of memory"), "npu"),
    (
        re.compile(
            r"\b(?:CUDA|HIP)\b[^.]*\bout of memory|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
            r"|hipErrorOutOfMemory|Cuda failure 'out of memory'",
            re.IGNORECASE,
        ),
        "cuda",
    ),
    (re.compile(r"DefaultCPUAllocator"), "cpu"),
)
# One list of alternative patterns per field; each pattern has exactly one capture group (a size).
_FIELD_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    name: tuple(re.compile(p, re.IGNORECASE) for p in pats)
    for name, pats in {
        "requested_bytes": (rf"tried to allocate\s+{SIZE_PATTERN}",),
        "capacity_bytes": (
            rf"total capac\w*\s+of\s+{SIZE_PATTERN}",
            rf"{SIZE_PATTERN}\s+total capacity",
            rf"max allowed:\s*{SIZE_PATTERN}",
        ),
        "free_bytes": (rf"{SIZE_PATTERN}\s+(?:is\s+)?free\b",),
        "in_use_bytes": (rf"this process has\s+{SIZE_PATTERN}\s+memory in use",),
        "allocated_bytes": (
            rf"{SIZE_PATTERN}\s+is allocated by PyTorch",
            rf"{SIZE_PATTERN}\s+already allocated",
            rf"MPS allocated:\s*{SIZE_PATTERN}",
        ),
        "reserved_unallocated_bytes": (rf"{SIZE_PATTERN}\s+is reserved by PyTorch but unallocated",),
        "reserved_total_bytes": (rf"{SIZE_PATTERN}\s+reserved in total by PyTorch", rf"{SIZE_PATTERN}\s+cached\)"),
    }.items()
}
_OTHER_PROCESS = re.compile(rf"\bProcess\s+\d+\s+has\s+{SIZE_PATTERN}\s+memory in use", re.IGNORECASE)
_DEVICE_INDEX = re.compile(r"\b(?:GPU|NPU|XPU|HPU)\s+(\d+)\b")


def _fragmentation(info: OomInfo) -> bool:
    unalloc = info.unallocated_reserved_estimate
    if unalloc is None:
        return False
    if unalloc > GIB:
        return True
    return info.capacity_bytes is not None and info.capacity_bytes > 0 and unalloc > info.capacity_bytes // 10


def parse_oom(message: str) -> OomInfo | None:
    """Parse an out-of-memory message into :class:`OomInfo`; ``None`` when ``message`` is not an OOM.

    Each field has its own patterns (see the module docstring for the wordings), searched anywhere in the message,
    so the order of the sentences and the wording version do not matter; a field the wording lacks stays ``None``.
    Sizes are converted by :func:`parse_size` (exact decimal product rounded to the nearest byte, ties to even).
    The message may carry the exception prefix (``torch.OutOfMemoryError: ...``), ``[rankN]:`` line prefixes and
    line breaks.
    """
    if not message or not _OOM_MARKERS.search(message):
        return None
    text = " ".join(strip_rank_prefixes(message).split())  # wrapped log lines -> one line
    info = OomInfo()
    for pattern, kind in _KIND_PATTERNS:
        if pattern.search(text):
            info.device_kind = kind
            break
    for name, patterns in _FIELD_PATTERNS.items():
        for pattern in patterns:
            m = pattern.search(text)
            if m:
                setattr(info, name, parse_size(m.group(1)))
                break
    others = [parse_size(m.group(1)) for m in _OTHER_PROCESS.finditer(text)]
    if others:
        info.other_process_bytes = sum(others)
    if info.device_kind != "cpu":
        m = _DEVICE_INDEX.search(text)
        if m:
            info.device_index = int(m.group(1))
    info.fragmentation_hint = _fragmentation(info)
    return info
