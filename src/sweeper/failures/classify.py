"""Classification: turn an exception (its type name, message and traceback text) into a :class:`Failure`.

The job harness catches the exception on each rank and the driver calls :func:`classify` with plain text
(``type(e).__name__``, ``str(e)``, ``traceback.format_exc()``), so this works on names and text only and never
imports torch: it also classifies messages read back from logs.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeper.failures import reasons
from sweeper.failures.incompatible import known_incompatible, match_known_incompatible, normalise_value
from sweeper.failures.oom import OomInfo, parse_oom
from sweeper.failures.phase import EVAL_FUNCS, PHASES, STEP_FUNCS, frames, infer_phase
from sweeper.failures.signals import crash_reason, signal_in_message, signal_name
from sweeper.failures.text import import_failure, rank_from_prefix, short_type, traceback_tail

#: The ``error_kind`` values of a ``status="error"`` failure.
ERROR_KINDS: tuple[str, ...] = (
    # torch.utils.checkpoint recomputed different tensors (docs/cases.md#p01): sweep use_reentrant
    "checkpoint-recompute",
    # the configuration is wrong (docs/cases.md#p03, TrainingArguments/Trainer rejected it): fix it, do not retry
    "config",
    "incompatible",  # a known-broken combination for the installed library versions (docs/cases.md#p07): do not retry
    "collective",  # gloo/NCCL/c10d failure or timeout: often a symptom of another rank's failure
    "early-exit",  # a rank left training normally before the others (docs/cases.md#t07); their collectives then failed
    "import",  # a module is missing in the job's environment (also when wrapped in another exception)
    "crash",  # killed by a signal (SIGKILL, SIGSEGV, ...)
    # the harness's or the environment's fault, never the point's: here a rendezvous port that was taken (attribution
    # also gives it to a fault at a site of sweeper's own code, sweeper.job.faults)
    "internal",
    "runtime",  # anything else
)


@dataclass
class Failure:
    """A classified failure, ready for the result record.

    Attributes:
        status: ``"oom"`` or ``"error"``.
        error_kind: one of :data:`ERROR_KINDS` for ``error``; ``None`` for ``oom``.
        reason: one sentence a person can act on.
        phase: ``"setup"``, ``"train"`` or ``"eval"``.
        details: ``exc_type``, ``message`` (first 2000 characters), ``traceback_tail`` (last 30 lines), ``oom``
            (the :class:`OomInfo` dict, for OOMs), ``signal`` (crashes), ``versions`` and ``known_incompatible``
            (for ``incompatible``).
        rank: the rank named by a ``[rankN]:`` prefix of the message or traceback (torch.distributed's log
            prefix, docs/cases.md#t13); ``None`` when the text names none (the caller knows which rank file it read).
    """

    status: str
    error_kind: str | None
    reason: str
    phase: str
    details: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data."""
        return asdict(self)


_OOM_TYPES = frozenset({"OutOfMemoryError", "MemoryError"})
_IMPORT_TYPES = frozenset({"ImportError", "ModuleNotFoundError"})
_COLLECTIVE_TYPES = frozenset({"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"})
_COLLECTIVE = re.compile(
    r"NCCL error|\bnccl\w*(?:Error|Failure)|ProcessGroupNCCL|ProcessGroupGloo|\bgloo\b|Connection closed by peer"
    r"|Connection reset by peer|Watchdog caught collective operation timeout|collective operation timeout"
    r"|ran for \d+ milliseconds before timing out|Timed out waiting \d+ms|Socket Timeout|c10d|DistBackendError"
    r"|DistNetworkError|NCCL communicator was aborted",
    re.IGNORECASE,
)
#: The rank-to-GPU mapping is wrong: two ranks on one GPU (NCCL, accelerate#2246) or a device index the node does
#: not have. A configuration error, checked before the collective symptoms that usually follow it.
_DEVICE_MAPPING = re.compile(r"Duplicate GPU detected|invalid device ordinal", re.IGNORECASE)
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
        message: ``str(e)`` (may carry the ``Type: `` prefix, ``[rankN]:`` line prefixes and line breaks).
        traceback_text: ``traceback.format_exc()`` or the traceback read from a rank's log.
        phase: what the caller knows (``setup``/``train``/``eval``); overrides :func:`infer_phase`.
        spec: the flat point spec, if known: confirms ZeRO-3 and enables the known-incompatible lookup
            (:mod:`sweeper.failures.incompatible`).
        versions: installed library versions (``{"deepspeed": "0.19.2", ...}``), attached to ``incompatible``.

    Returns:
        ``Failure(status="oom", error_kind=None, ...)`` for any out-of-memory (``OutOfMemoryError``,
        ``MemoryError``, or a message :func:`parse_oom` recognises); otherwise ``status="error"`` with the first
        kind that applies, in this order: ``crash`` (signal as exc_type), ``import`` (an import error, also one
        wrapped in another exception or chained as its direct cause), ``incompatible`` (recomputed tensor of size
        0 under ZeRO-3, docs/cases.md#p07), ``checkpoint-recompute`` (P01), ``internal`` (the rendezvous could not
        listen on its port, in the message or the traceback/log: the environment's fault), ``config`` (P03, setup-time
        ValueError/TypeError from TrainingArguments/Trainer/accelerate/DeepSpeed), ``collective``, ``crash``
        (signal named in the message), ``runtime``. ``rank`` is read from a ``[rankN]:`` prefix when present.

    Raises:
        ValueError: ``phase`` is given and is not one of ``setup``, ``train``, ``eval``.
    """
    if phase is not None and phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    message = message or ""
    traceback_text = traceback_text or ""
    short = short_type(exc_type)
    frame_list = frames(traceback_text)
    raw_phase = infer_phase(traceback_text)
    the_phase = phase or raw_phase
    rank = rank_from_prefix(message, traceback_text)
    details: dict[str, Any] = {
        "exc_type": exc_type,
        "message": message[:2000],
        "traceback_tail": traceback_tail(traceback_text),
    }

    info = parse_oom(message)
    if info is not None or short in _OOM_TYPES:
        if info is None:
            info = OomInfo(device_kind="cpu" if short == "MemoryError" else None)
        details["oom"] = info.to_dict()
        return Failure("oom", None, reasons.oom_reason(info, the_phase, exc_type), the_phase, details, rank)

    def error(kind: str, reason: str, phase_: str = the_phase) -> Failure:
        return Failure("error", kind, reason, phase_, details, rank)

    sig = signal_name(exc_type)
    if sig:
        details["signal"] = sig
        return error("crash", crash_reason(sig))

    imported = message if short in _IMPORT_TYPES else import_failure(message, traceback_text)
    if imported is not None:
        import_phase = phase or (raw_phase if {f for _, f in frame_list} & (EVAL_FUNCS | STEP_FUNCS) else "setup")
        return error("import", reasons.import_reason(imported, wrapper=message), import_phase)

    recompute = short == "CheckpointError" or bool(_RECOMPUTE.search(message))
    empty = bool(_RECOMPUTED_EMPTY.search(message))
    if empty and (recompute or short == "RuntimeError") and _is_zero3(spec, message, traceback_text):
        row = match_known_incompatible(spec, versions or {}) if spec is not None else None
        if versions:
            details["versions"] = dict(versions)
        if row is not None:
            details["known_incompatible"] = row.source
            return error("incompatible", known_incompatible(spec or {}, versions or {}) or row.description)
        return error("incompatible", reasons.ZERO3_RECOMPUTE)
    if recompute:
        return error("checkpoint-recompute", reasons.CHECKPOINT_RECOMPUTE)

    for text in (message, traceback_text):  # the launcher's own rendezvous fails in its log, with no rank's file
        if reasons.RENDEZVOUS_LISTEN.search(text):
            return error("internal", reasons.rendezvous_port_reason(text))

    reason = reasons.config_reason(short, message, frame_list, raw_phase)
    if reason:
        return error("config", reason)
    if _DEVICE_MAPPING.search(message):
        return error("config", reasons.device_mapping_reason(message))

    if short in _COLLECTIVE_TYPES or _COLLECTIVE.search(message):
        return error("collective", reasons.collective_reason(message))

    sig = signal_in_message(message)
    if sig:
        details["signal"] = sig
        return error("crash", crash_reason(sig))

    return error("runtime", reasons.runtime_reason(short, message))
