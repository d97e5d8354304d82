"""Failures: turn what a failing rank left (exception type name, message, traceback text) into a result.

A failed grid point is a *result*, not a crash of the sweep. Statuses: ``oom`` for every out-of-memory (device
allocator, host allocator, ``MemoryError``), else ``error`` with an ``error_kind`` (see :data:`ERROR_KINDS`). Every
failure carries a ``reason`` a person can act on, a ``phase`` (``setup`` / ``train`` / ``eval``) and, when the text
names it, the ``rank``. Nothing here imports torch: it also classifies messages read back from logs.

Modules, one job each:

- :mod:`~sweeper.failures.oom`: recognise an out-of-memory message and parse its numbers (bytes) into
  :class:`OomInfo` (the wordings of torch 1.0 to today, ROCm, XPU, NPU, MPS, the CPU allocator).
- :mod:`~sweeper.failures.phase`: the phase, from the traceback's frames (:func:`infer_phase`).
- :mod:`~sweeper.failures.signals`: ranks killed by a signal (names, advice).
- :mod:`~sweeper.failures.text`: reading library text: ``[rankN]:`` prefixes, the informative lines of a
  message, import errors wrapped in or chained to another exception.
- :mod:`~sweeper.failures.reasons`: the sentence for each kind, including a rank that left early or died.
- :mod:`~sweeper.failures.classify`: :class:`Failure` and :func:`classify`, the order in which kinds are decided.
- :mod:`~sweeper.failures.incompatible`: combinations known to fail with some library versions (data).
- :mod:`~sweeper.failures.attribution`: which rank's failure explains a point, and its status, from the rank
  files as plain data (:func:`~sweeper.failures.attribution.decide_status`, called by
  :func:`sweeper.results.outcome.summarize_ranks`; nothing here imports :mod:`sweeper.results`).

Units: every byte count is an ``int`` in bytes; sizes printed by the allocators are converted with
:func:`parse_size` and displayed with :func:`format_bytes` (both from :mod:`sweeper.units`).

Floor (``docs/architecture.md``, the layers): ``config | failures``, beside the config (neither imports the other),
above the leaves only.
"""

from __future__ import annotations

from sweeper.failures.classify import ERROR_KINDS, Failure, classify
from sweeper.failures.incompatible import (
    KNOWN_INCOMPATIBLE,
    KnownIncompatible,
    known_incompatible,
    match_known_incompatible,
)
from sweeper.failures.oom import OomInfo, parse_oom
from sweeper.failures.phase import PHASES, infer_phase
from sweeper.failures.text import TRACEBACK_TAIL_LINES
from sweeper.units import format_bytes, parse_size

__all__ = [
    "ERROR_KINDS",
    "KNOWN_INCOMPATIBLE",
    "PHASES",
    "TRACEBACK_TAIL_LINES",
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
