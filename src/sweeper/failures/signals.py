"""Ranks killed by a signal: the signal's name from an exception type or a message, and what to do about it."""

from __future__ import annotations

import re

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


def signal_name(exc_type: str) -> str | None:
    """The signal an exception *type name* stands for: ``"Signal 9"``, ``"signal 11"``, ``"SIGKILL"``,
    ``"Signals.SIGSEGV"`` -> ``"SIGKILL"``/``"SIGSEGV"`` (``"signal 42"`` for an unnamed number); else ``None``."""
    m = _SIGNAL_TYPE.match(exc_type or "")
    if m:
        if m.group(2):
            return m.group(2)
        num = int(m.group(1))
        return _SIGNAL_NAMES.get(num, f"signal {num}")
    return None


def crash_reason(sig: str) -> str:
    """What a rank killed by ``sig`` (``"SIGKILL"``, ...) usually means and what to check."""
    return _SIGNAL_ADVICE.get(sig, f"the rank was killed by {sig}: read its log for the cause")


def signal_in_message(message: str) -> str | None:
    """The signal a failure *message* names (torchrun's ``Signal 11 (SIGSEGV) received by PID``, ``SIGKILL``,
    ``Segmentation fault``, ``core dumped``), or ``None``."""
    m = _SIGNAL_MESSAGE.search(message or "")
    if not m:
        return None
    if m.group(1):
        return m.group(2)
    if m.group(3):
        return m.group(3)
    return "SIGSEGV" if m.group(4) else "a signal (core dumped)"
