"""Failure classification: turn an exception (its type name, message and traceback text) into a result.

A failed grid point is a *result*, not a crash of the sweep. The job harness catches the exception on each rank and
calls :func:`classify` with plain text (``type(e).__name__``, ``str(e)``, ``traceback.format_exc()``), so this module
works on names and text only and never imports torch: it also classifies messages read back from logs.

Statuses: ``oom`` for every out-of-memory (device allocator, host allocator, ``MemoryError``), else ``error`` with an
``error_kind`` (see :data:`ERROR_KINDS`). Every failure carries a ``reason`` a person can act on and a ``phase``
(``setup`` / ``train`` / ``eval``).

Units: every byte count is an ``int`` in bytes. Sizes printed by the allocators are converted with
:func:`parse_size` (labels taken literally: ``MiB`` = 2**20 bytes, ``MB`` = 10**6 bytes) and displayed with
:func:`format_bytes` (binary units, labelled as such).

OOM message wordings understood by :func:`parse_oom` (each field is found by its own pattern, in any order):

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
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeper.failures.incompatible import (
    KNOWN_INCOMPATIBLE,
    KnownIncompatible,
    known_incompatible,
    match_known_incompatible,
    normalise_value,
)
from sweeper.units import GIB, SIZE_PATTERN, format_bytes, parse_size

__all__ = [
    "ERROR_KINDS",
    "KNOWN_INCOMPATIBLE",
    "Failure",
    "KnownIncompatible",
    "OomInfo",
    "classify",
    "format_bytes",
    "infer_phase",
    "known_incompatible",
    "match_known_incompatible",
    "parse_oom",
    "parse_size",
]

#: The ``error_kind`` values of a ``status="error"`` failure.
ERROR_KINDS: tuple[str, ...] = (
    "checkpoint-recompute",  # torch.utils.checkpoint recomputed different tensors (case P01): sweep use_reentrant
    "config",  # the configuration is wrong (case P03, TrainingArguments/Trainer rejected it): fix it, do not retry
    "incompatible",  # a known-broken combination for the installed library versions (case P07): do not retry
    "collective",  # gloo/NCCL/c10d failure or timeout: often a symptom of another rank's failure
    "import",  # a module is missing in the job's environment
    "crash",  # killed by a signal (SIGKILL, SIGSEGV, ...)
    "runtime",  # anything else
)

PHASES: tuple[str, ...] = ("setup", "train", "eval")

#: How many traceback lines are kept in ``Failure.details["traceback_tail"]``.
TRACEBACK_TAIL_LINES = 30


# ------------------------------------------------------------------------------------------------------------- OOM


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
    The message may carry the exception prefix (``torch.OutOfMemoryError: ...``) and line breaks.
    """
    if not message or not _OOM_MARKERS.search(message):
        return None
    text = " ".join(message.split())  # wrapped log lines -> one line
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


# ------------------------------------------------------------------------------------------------ classification


@dataclass
class Failure:
    """A classified failure, ready for the result record.

    Attributes:
        status: ``"oom"`` or ``"error"``.
        error_kind: one of :data:`ERROR_KINDS` for ``error``; ``None`` for ``oom``.
        reason: one sentence a person can act on.
        phase: ``"setup"``, ``"train"`` or ``"eval"``.
        details: ``exc_type``, ``message`` (first 2000 characters), ``traceback_tail`` (last 30 lines), ``oom``
            (the :class:`OomInfo` dict, for OOMs), ``versions`` and ``known_incompatible`` (for ``incompatible``).
    """

    status: str
    error_kind: str | None
    reason: str
    phase: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_OOM_TYPES = frozenset({"OutOfMemoryError", "MemoryError"})
_IMPORT_TYPES = frozenset({"ImportError", "ModuleNotFoundError"})
_COLLECTIVE_TYPES = frozenset({"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"})
_CONFIG_TYPES = frozenset({"ValueError", "TypeError", "DeepSpeedConfigError"})

_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')
_EVAL_FUNCS = frozenset(
    {
        "evaluate",
        "_evaluate",
        "evaluation_loop",
        "prediction_loop",
        "prediction_step",
        "predict",
        "evaluation_step",
    }
)
_STEP_FUNCS = frozenset(
    {
        "training_step",
        "compute_loss",
        "forward",
        "backward",
        "_engine_run_backward",
        "run_backward",
        "unscale_",
        "clip_grad_norm_",
        "step",
        "optimizer_step",
    }
)
_SETUP_FUNCS = frozenset(
    {
        "from_pretrained",
        "from_config",
        "_from_config",
        "__post_init__",
        "_setup_devices",
        "post_init",
        "_wrap_model",
        "prepare",
        "prepare_model",
        "_prepare_deepspeed",
        "_prepare_fsdp",
        "deepspeed_init",
        "initialize",
        "init_process_group",
        "create_optimizer",
        "create_optimizer_and_scheduler",
        "create_accelerator_and_postprocess",
        "_load_from_checkpoint",
    }
)
_SETUP_INIT_FILES = re.compile(
    r"(?:^|/)(?:trainer|training_args|modeling_\w+|configuration_\w+)\.py$|/deepspeed/|/accelerate/"
    r"|/torch/nn/parallel/|/torch/distributed/fsdp/|/peft/"
)
_LIBRARY_CONFIG_FILES = re.compile(
    r"(?:^|/)(?:training_args|trainer|trainer_utils|configuration_utils|training_args_seq2seq)\.py$"
    r"|/accelerate/|/deepspeed/|/peft/"
)


def _frames(traceback_text: str) -> list[tuple[str, str]]:
    """(file, function) of every ``File "...", line N, in f`` line, outermost first."""
    return [(m.group(1).replace("\\", "/"), m.group(2)) for m in _FRAME.finditer(traceback_text or "")]


def infer_phase(traceback_text: str) -> str:
    """Tell the phase from the functions the traceback passes through.

    Rule, first that applies:

    1. ``eval``: any frame in evaluation code (``evaluate``, ``evaluation_loop``, ``prediction_step``, ``predict``,
       ...), also when evaluation runs inside ``train`` (``_maybe_log_save_evaluate``).
    2. ``train``: any frame of a training step (``training_step``, ``compute_loss``, ``forward``, ``backward``,
       ``unscale_``, ``clip_grad_norm_``, an optimizer ``step``).
    3. ``setup``: any frame of construction before the first step: model building (``from_pretrained``,
       ``from_config``, ``__init__`` of a ``modeling_*.py`` module), ``Trainer``/``TrainingArguments`` construction
       (``__init__`` in ``trainer.py``/``training_args.py``, ``__post_init__``), wrapping (``_wrap_model``,
       accelerate ``prepare``, ``deepspeed_init``, DDP/FSDP ``__init__``), ``init_process_group``,
       ``create_optimizer``; this holds also inside ``train`` → ``_inner_training_loop`` when no step has run.
    4. otherwise ``train`` (also for an empty traceback; the caller overrides the phase with what it knows).
    """
    frames = _frames(traceback_text)
    funcs = {f for _, f in frames}
    if funcs & _EVAL_FUNCS:
        return "eval"
    if funcs & _STEP_FUNCS:
        return "train"
    for path, func in frames:
        if func in _SETUP_FUNCS or (func == "__init__" and _SETUP_INIT_FILES.search(path)):
            return "setup"
    return "train"


def _first_line(message: str, limit: int = 200) -> str:
    for line in (message or "").splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _tail(traceback_text: str, n: int = TRACEBACK_TAIL_LINES) -> str:
    lines = (traceback_text or "").rstrip().splitlines()
    return "\n".join(lines[-n:])


def _short_type(exc_type: str) -> str:
    return (exc_type or "").strip().rsplit(".", 1)[-1]


# ---- OOM


def _oom_reason(info: OomInfo, phase: str, exc_type: str) -> str:
    if info.device_kind == "cpu" or (info.device_kind is None and _short_type(exc_type) == "MemoryError"):
        where = "the host (CPU)"
    else:
        where = info.device or "the device"
    head = "out of memory" + (" during evaluation" if phase == "eval" else "") + f" on {where}"
    if info.requested_bytes is not None:
        head += f" while trying to allocate {format_bytes(info.requested_bytes)}"
    facts = []
    if info.free_bytes is not None and info.capacity_bytes is not None:
        facts.append(f"{format_bytes(info.free_bytes)} free of {format_bytes(info.capacity_bytes)}")
    elif info.capacity_bytes is not None:
        label = "limit" if info.device_kind == "mps" else "capacity"
        facts.append(f"{label} {format_bytes(info.capacity_bytes)}")
    elif info.free_bytes is not None:
        facts.append(f"{format_bytes(info.free_bytes)} free")
    if info.other_process_bytes and info.in_use_bytes is not None:
        facts.append(f"other processes hold {format_bytes(info.other_process_bytes)}")
    if info.fragmentation_hint:
        tip = "fragmentation"
        if info.device_kind == "cuda":
            tip += ", try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        facts.append(f"{format_bytes(info.unallocated_reserved_estimate)} reserved but unallocated: {tip}")
    reason = head + (f" ({'; '.join(facts)})" if facts else "")
    if phase == "eval":
        return reason + (
            "; evaluation keeps all logits on the device until the end: set eval_accumulation_steps or lower "
            "the eval batch size (the training measurements stay valid)"
        )
    if info.fragmentation_hint:
        return reason
    if where == "the host (CPU)":
        return reason + "; reduce per_device_batch_size or seq_len, or run fewer ranks per node"
    return reason + "; reduce per_device_batch_size or seq_len, set gc=true, or shard more (fsdp=full_shard, zero=3)"


# ---- error kinds

_SIGNAL_TYPE = re.compile(r"^\s*(?:Signals\.)?(?:[Ss]ignal\s*(\d+)|(SIG[A-Z]{2,})\b)")
_SIGNAL_MESSAGE = re.compile(
    r"Signal (\d+) \((SIG[A-Z]+)\) received|\b(SIGSEGV|SIGKILL|SIGABRT|SIGBUS|SIGILL|SIGFPE)\b"
    r"|(Segmentation fault)|(core dumped)",
)
_SIGNAL_NAMES = {
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    15: "SIGTERM",
}
_SIGNAL_ADVICE = {
    "SIGKILL": "killed (SIGKILL): usually the kernel OOM killer (host memory) or the scheduler's memory limit; "
    "check dmesg or sacct MaxRSS and lower host memory use (fewer ranks per node, dataloader workers)",
    "SIGSEGV": "segmentation fault in native code (SIGSEGV): look at the rank's log for the faulting library; "
    "often a CUDA/NCCL/driver mismatch or a bad custom kernel",
    "SIGABRT": "aborted (SIGABRT): a native assertion, or NCCL's watchdog ending a rank after a collective timeout; "
    "read the first failing rank's log",
    "SIGTERM": "terminated (SIGTERM): the scheduler's time limit, preemption or a cancel; check the job's state",
    "SIGBUS": "bus error (SIGBUS): usually /dev/shm too small for dataloader workers or NCCL; raise the shm size",
}


def _signal_name(exc_type: str) -> str | None:
    m = _SIGNAL_TYPE.match(exc_type or "")
    if m:
        if m.group(2):
            return m.group(2)
        num = int(m.group(1))
        return _SIGNAL_NAMES.get(num, f"signal {num}")
    return None


def _crash_reason(sig: str) -> str:
    return _SIGNAL_ADVICE.get(sig, f"the rank was killed by {sig}: read its log for the cause")


def _crash_from_message(message: str) -> str | None:
    m = _SIGNAL_MESSAGE.search(message or "")
    if not m:
        return None
    if m.group(1):
        return m.group(2)
    if m.group(3):
        return m.group(3)
    return "SIGSEGV" if m.group(4) else "a signal (core dumped)"


_MODULE = re.compile(r"No module named '([^']+)'|cannot import name '([^']+)'")


def _import_reason(message: str) -> str:
    m = _MODULE.search(message or "")
    if m and m.group(1):
        what = f"module {m.group(1)!r} is missing"
    elif m:
        what = f"name {m.group(2)!r} cannot be imported (a version mismatch?)"
    else:
        what = f"import failed ({_first_line(message)})"
    return f"{what} in the job's environment: install it where the ranks run (not only on the submit host)"


_RECOMPUTE = re.compile(
    r"Recomputed values for the following tensors have different metadata"
    r"|A different number of tensors was saved during the original forward and recomputation"
    r"|torch\.utils\.checkpoint: trying to save more tensors during recomputation",
    re.IGNORECASE,
)
_RECOMPUTED_EMPTY = re.compile(
    r"recomputed(?: metadata)?:?\s*\{'shape':\s*(?:torch\.Size\()?\[0\]"
    r"|The size of tensor [ab] \(0\) must match",
    re.IGNORECASE,
)
_ZERO3_EVIDENCE = re.compile(r"deepspeed|zero[-_ ]?3|stage3|partition_parameters|ds_tensor", re.IGNORECASE)


def _is_zero3(spec: dict[str, Any] | None, message: str, traceback_text: str) -> bool:
    if spec is not None and "zero" in spec:
        return normalise_value(spec.get("zero")) == 3
    return bool(_ZERO3_EVIDENCE.search(message) or _ZERO3_EVIDENCE.search(traceback_text))


_CONFIG_MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Attempting to unscale FP16 gradients"),
        (
            "the model weights are float16 and fp16 AMP is on (fp16 weights + fp16 AMP): the GradScaler cannot unscale "
            "fp16 gradients; load the model in float32 "
            "(model_dtype=float32: fp16 means fp32 master weights + autocast) "
            "or use precision=bf16"
        ),
    ),
    (
        re.compile(r"activation_checkpointing in FSDP config and the gradient_checkpointing", re.IGNORECASE),
        (
            "FSDP activation checkpointing and the Trainer's gradient_checkpointing were both set: under FSDP, gc=true "
            "means FSDP-native activation checkpointing only"
        ),
    ),
    (
        re.compile(r"Your setup doesn't support bf16|requires Ampere or a newer GPU", re.IGNORECASE),
        (
            "this device cannot run the requested precision (bf16/tf32 need compute capability 8.0): choose another "
            "precision or partition"
        ),
    ),
    (
        re.compile(r"(?:TrainingArguments|Trainer|\w*Config)\.__init__\(\) got an unexpected keyword argument"),
        (
            "an argument is not accepted by the installed transformers version (renamed or removed): use that "
            "version's argument names"
        ),
    ),
)


def _config_reason(short: str, message: str, frames: list[tuple[str, str]], raw_phase: str) -> str | None:
    for pattern, reason in _CONFIG_MESSAGES:
        if pattern.search(message or ""):
            return reason
    from_library = any(_LIBRARY_CONFIG_FILES.search(path) for path, _ in frames)
    if short in _CONFIG_TYPES and raw_phase == "setup" and from_library:
        return (
            f"the configuration was rejected during setup ({short}: {_first_line(message)}): fix the point's "
            "configuration; retrying it unchanged fails the same way"
        )
    if short == "DeepSpeedConfigError":
        return f"the DeepSpeed configuration was rejected ({_first_line(message)}): fix the generated ds config"
    return None


_COLLECTIVE = re.compile(
    r"NCCL error|\bnccl\w*(?:Error|Failure)|ProcessGroupNCCL|ProcessGroupGloo|\bgloo\b|Connection closed by peer"
    r"|Connection reset by peer|Watchdog caught collective operation timeout|collective operation timeout"
    r"|ran for \d+ milliseconds before timing out|Timed out waiting \d+ms|Socket Timeout|c10d|DistBackendError"
    r"|DistNetworkError|NCCL communicator was aborted",
    re.IGNORECASE,
)
_TIMEOUT = re.compile(r"time[sd]? ?out|timing out", re.IGNORECASE)


def _collective_reason(message: str) -> str:
    low = (message or "").lower()
    backend = "NCCL" if "nccl" in low else "gloo" if "gloo" in low else "c10d"
    what = "timed out" if _TIMEOUT.search(message or "") else "failed"
    return (
        f"a {backend} collective {what} ({_first_line(message, 120)}): usually a symptom; another rank failed or "
        "hung first, so read the first failing rank's log; if all ranks were alive, raise the timeout or check the "
        "network interface"
    )


def classify(
    exc_type: str,
    message: str,
    traceback_text: str = "",
    *,
    phase: str | None = None,
    spec: dict[str, Any] | None = None,
    versions: dict[str, str] | None = None,
) -> Failure:
    """Classify a failure from its exception type name, message and traceback text.

    Args:
        exc_type: ``type(e).__name__`` or a qualified name (``torch.cuda.OutOfMemoryError``); for a rank killed by
            a signal, a name such as ``"Signal 9"``, ``"SIGKILL"`` or ``"SIGSEGV"``.
        message: ``str(e)`` (may carry the ``Type: `` prefix and line breaks).
        traceback_text: ``traceback.format_exc()`` or the traceback read from a rank's log.
        phase: what the caller knows (``setup``/``train``/``eval``); overrides :func:`infer_phase`.
        spec: the flat point spec, if known: confirms ZeRO-3 and enables the :data:`KNOWN_INCOMPATIBLE` lookup.
        versions: installed library versions (``{"deepspeed": "0.19.2", ...}``), attached to ``incompatible``.

    Returns:
        ``Failure(status="oom", error_kind=None, ...)`` for any out-of-memory (``OutOfMemoryError``,
        ``MemoryError``, or a message :func:`parse_oom` recognises); otherwise ``status="error"`` with the first
        kind that applies, in this order: ``crash`` (signal as exc_type), ``import``, ``incompatible``
        (recomputed tensor of size 0 under ZeRO-3, case P07), ``checkpoint-recompute`` (P01), ``config`` (P03,
        setup-time ValueError/TypeError from TrainingArguments/Trainer/accelerate/DeepSpeed), ``collective``,
        ``crash`` (signal named in the message), ``runtime``.

    Raises:
        ValueError: ``phase`` is given and is not one of ``setup``, ``train``, ``eval``.
    """
    if phase is not None and phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    message = message or ""
    traceback_text = traceback_text or ""
    short = _short_type(exc_type)
    frames = _frames(traceback_text)
    raw_phase = infer_phase(traceback_text)
    the_phase = phase or raw_phase
    details: dict[str, Any] = {
        "exc_type": exc_type,
        "message": message[:2000],
        "traceback_tail": _tail(traceback_text),
    }

    info = parse_oom(message)
    if info is not None or short in _OOM_TYPES:
        if info is None:
            info = OomInfo(device_kind="cpu" if short == "MemoryError" else None)
        details["oom"] = info.to_dict()
        return Failure("oom", None, _oom_reason(info, the_phase, exc_type), the_phase, details)

    def error(kind: str, reason: str, phase_: str = the_phase) -> Failure:
        return Failure("error", kind, reason, phase_, details)

    sig = _signal_name(exc_type)
    if sig:
        details["signal"] = sig
        return error("crash", _crash_reason(sig))

    if short in _IMPORT_TYPES:
        import_phase = phase or (raw_phase if {f for _, f in frames} & (_EVAL_FUNCS | _STEP_FUNCS) else "setup")
        return error("import", _import_reason(message), import_phase)

    recompute = short == "CheckpointError" or bool(_RECOMPUTE.search(message))
    empty = bool(_RECOMPUTED_EMPTY.search(message))
    if empty and (recompute or short == "RuntimeError") and _is_zero3(spec, message, traceback_text):
        row = match_known_incompatible(spec, versions or {}) if spec is not None else None
        if versions:
            details["versions"] = dict(versions)
        if row is not None:
            details["known_incompatible"] = row.source
            return error("incompatible", known_incompatible(spec or {}, versions or {}) or row.description)
        return error(
            "incompatible",
            "ZeRO-3 + gradient checkpointing: a recomputed tensor has size 0 (ZeRO-3 repartitioned a parameter, "
            "usually a frozen one, before the checkpoint recompute; huggingface/transformers#47254, fixed in "
            "DeepSpeed 0.19.3): do not retry this config unchanged; use use_reentrant=true, zero=2, or a fixed "
            "DeepSpeed",
        )
    if recompute:
        return error(
            "checkpoint-recompute",
            "gradient checkpointing recomputed tensors that differ from the forward pass (torch.utils.checkpoint "
            "CheckpointError): sweep the other use_reentrant value (use_reentrant=true,false); under FSDP use "
            "FSDP-native activation checkpointing",
        )

    reason = _config_reason(short, message, frames, raw_phase)
    if reason:
        return error("config", reason)

    if short in _COLLECTIVE_TYPES or _COLLECTIVE.search(message):
        return error("collective", _collective_reason(message))

    sig = _crash_from_message(message)
    if sig:
        details["signal"] = sig
        return error("crash", _crash_reason(sig))

    return error(
        "runtime",
        f"{short or 'error'}: {_first_line(message) or 'no message'} (see traceback_tail for where it was raised)",
    )
