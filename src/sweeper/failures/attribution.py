"""Failure attribution and the status decision: which rank's failure explains a point, from its rank files.

Driver side, no torch. The cause is told apart from its consequences: a rank that died (a signal, no rank file) or
left training early (``ok`` with fewer steps than it was to run, docs/cases.md#t07) explains the other ranks' collective
errors or their wait until the timeout, not the other way round; among the failures the ranks reported, an OOM or a
label mismatch comes first and a collective error (usually a symptom of another rank dying) last. Each failure is
classified by :func:`sweeper.failures.classify.classify`; the sentences come from :mod:`sweeper.failures.reasons`.

Plain data in, plain data out: the rank files as parsed JSON (:class:`sweeper.results.rankfile.RankFile`), the point
as anything with the :class:`PointShape` attributes (a :class:`sweeper.config.spec.PointSpec`). Imports go one way:
:func:`sweeper.results.outcome.summarize_ranks` calls :func:`decide_status`; nothing here imports ``sweeper.results``
or ``sweeper.config``.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sweeper.failures import reasons
from sweeper.failures.classify import Failure, classify
from sweeper.failures.phase import PHASES
from sweeper.failures.text import first_line, short_type

#: A parsed rank file, read only (:class:`sweeper.results.rankfile.RankFile`, a TypedDict, is one).
RankFile = Mapping[str, Any]


class PointShape(Protocol):
    """What the decision reads of a point (:class:`sweeper.config.spec.PointSpec` has it all)."""

    # read-only (properties): a frozen dataclass's fields and its properties both match

    @property
    def world_size(self) -> int:
        """Ranks (nodes x ranks per node)."""

    @property
    def timeout_s(self) -> float:
        """The point's wall-clock budget, seconds."""

    @property
    def total_steps(self) -> int:
        """Optimizer steps asked for (warm-up + timed + memory + profile; under ``timed_steps=auto`` the timed cap)."""

    @property
    def memory_steps(self) -> int:
        """Optimizer steps of the memory window."""

    @property
    def profile_steps(self) -> int:
        """Optimizer steps of the profile window."""

    def to_dict(self) -> dict[str, Any]:
        """The point as plain data (what :func:`~sweeper.failures.classify.classify` matches known failures on)."""


def steps_planned(spec: PointShape, rank: RankFile) -> int:
    """Optimizer steps ``rank`` was to run: ``stop + memory_steps + profile_steps`` once its timed window ended
    (``timed_window``; under ``timed_steps=auto`` earlier than the cap), else ``spec.total_steps``."""
    w = rank.get("timed_window")
    if isinstance(w, list) and len(w) == 2 and isinstance(w[1], int):
        return w[1] + spec.memory_steps + spec.profile_steps
    return spec.total_steps


_KIND_RANK = {"checkpoint-recompute": 0, "incompatible": 0, "config": 1, "import": 1, "internal": 1, "runtime": 2}


def _root_failure(ranks: Sequence[RankFile], spec: PointShape, versions: dict[str, str]):
    """The failure that explains the point: an OOM or a label mismatch first, then a specific error, and a
    collective error (usually a symptom of another rank dying) last."""
    best = None
    for r in ranks:
        f = r.get("failure")
        if not f:
            continue
        c = classify(
            f["exception_type"],
            f["message"],
            f["traceback"],
            phase=f["phase"] if f["phase"] in PHASES else None,
            spec=spec.to_dict(),
            versions=versions,
        )
        if f.get("site") and c.status != "oom":  # sweeper's own code (sweeper.job.faults): never the user's error
            c.details["site"] = f["site"]
            reason = reasons.internal_reason(f["site"], short_type(f["exception_type"]), f["message"])
            c = Failure("error", "internal", reason, c.phase, c.details, c.rank)
        if f["exception_type"] == "LabelMismatch":
            prio = -1
        elif c.status == "oom":
            prio = 0
        elif c.error_kind == "collective":
            prio = 9
        else:
            prio = 1 + _KIND_RANK.get(c.error_kind or "", 3)
        if best is None or prio < best[0]:
            best = (prio, r, f, c)
    return best


def _signal_from_log(log_tail: str) -> str | None:
    """The signal that killed a rank, from torchrun's error summary (``Signal 9 (SIGKILL) received by PID``).

    torchrun stops the surviving ranks with SIGTERM once one fails, and its "Root Cause" section names whichever
    failure it observed first (sometimes a survivor's collective error), so any other signal in the summary is the
    cause; SIGTERM only when it is the only one (e.g. the scheduler stopping the job).
    """
    names = re.findall(r"Signal \d+ \((SIG[A-Z0-9]+)\)", log_tail)
    if not names:
        m = re.search(r"exitcode\s*:\s*-(\d+)", log_tail)
        return f"Signal {m.group(1)}" if m else None
    return next((n for n in names if n != "SIGTERM"), names[0])


def rank_exit_codes(log_tail: str) -> dict[int, int]:
    """Global rank -> exit code of each failed rank in torchrun's error summary (``rank : 1 (local_rank: 1)`` then
    ``exitcode : -9 (pid: ...)``; a negative code is the signal that ended it). Ranks not in the summary are absent."""
    pairs = re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", log_tail)
    return {int(rank): int(code) for rank, code in pairs}


def _killed_first(missing: list[int], log_tail: str) -> list[int]:
    """Of the ranks that wrote no rank file, those that explain the point: the ones a signal other than SIGTERM ended
    (torchrun stops the survivors with SIGTERM once one rank fails, and a survivor stopped before it could write its
    file is a consequence); all of ``missing`` when the summary does not tell them apart."""
    codes = rank_exit_codes(log_tail)
    cause = [r for r in missing if codes.get(r, 0) < 0 and codes[r] != -signal.SIGTERM]
    return cause or missing


def _steps_completed(rank: RankFile, steps: dict[int, int]) -> int | None:
    """Optimizer steps a rank finished: its rank file's ``steps_completed``, else its progress file."""
    done, who = rank.get("steps_completed"), rank.get("rank")
    if isinstance(done, int):
        return done
    return steps.get(who) if isinstance(who, int) else None


def _early_ranks(spec: PointShape, ranks: Sequence[RankFile], steps: dict[int, int]) -> dict[int, int]:
    """Ranks that ended ``ok`` with fewer optimizer steps than they were to run (:func:`steps_planned`: they left
    training early)."""
    early: dict[int, int] = {}
    for r in ranks:
        done, who = _steps_completed(r, steps), r.get("rank")
        if r.get("status") == "ok" and isinstance(who, int) and done is not None and done < steps_planned(spec, r):
            early[who] = done
    return early


def decide_status(
    spec: PointShape,
    ranks: Sequence[RankFile],
    *,
    returncode: int | None,
    timed_out: bool,
    log_tail: str,
    steps: dict[int, int] | None = None,
) -> dict[str, Any]:
    """The point's status, reason, error kind and failure from its rank files.

    Args:
        ranks: the parsed ``rank<r>.json`` files (possibly fewer than the world size if a rank died hard).
        returncode: the rank launcher's exit code, None if unknown (never taken for a clean exit).
        timed_out: the point ran past ``spec.timeout_s``.
        log_tail: the end of the ranks' combined log, kept for failures no rank could report.
        steps: rank -> optimizer steps finished, from the ``rank<r>.step`` files
            (:func:`sweeper.results.rankfile.read_rank_steps`): says at which step a rank killed by a signal died.

    Returns:
        ``status``, ``reason``, ``error_kind`` and ``failure`` (keyword arguments for
        :class:`sweeper.results.record.Record`). The cause is told apart from its consequences: a rank that died
        (signal, no rank file) or left training early (``ok`` with fewer steps than asked, docs/cases.md#t07)
        explains the other ranks' collective errors or their wait until the timeout, not the other way round.
    """
    from sweeper.envinfo import library_versions

    steps = dict(steps or {})
    out: dict[str, Any] = dict(failure=None, error_kind=None)
    all_ok = len(ranks) == spec.world_size and all(r.get("status") == "ok" for r in ranks)
    early = _early_ranks(spec, ranks, steps)
    if timed_out and early:
        out.update(_early_exit(spec, early, None, waited_s=spec.timeout_s, log_tail=log_tail))
        return out
    if timed_out:
        out.update(
            status="timeout",
            reason=f"the point ran past timeout_s={spec.timeout_s:g} s and its ranks were stopped "
            "(a hung collective or a slow configuration; raise timeout_s if it was only slow)",
            failure={"log_tail": log_tail[-3000:], "rank_steps": {str(k): v for k, v in sorted(steps.items())}},
        )
        return out
    if all_ok and returncode == 0 and early:  # every rank stopped before the steps asked: not the point asked for
        out.update(_early_exit(spec, early, None, waited_s=None, log_tail=log_tail))
        return out
    if all_ok and returncode == 0:
        out.update(status="ok", reason=None)
        return out
    root = _root_failure(ranks, spec, library_versions())
    sig = _signal_from_log(log_tail) or (f"Signal {-returncode}" if returncode is not None and returncode < 0 else None)
    reported = {r.get("rank") for r in ranks}
    missing = [r for r in range(spec.world_size) if r not in reported]
    died = bool(missing) and sig is not None
    # a rank that died without a word (signal) explains the others' collective errors, not the other way round
    if root is None or (died and root[3].error_kind == "collective"):
        if early and not died:
            out.update(_early_exit(spec, early, root, waited_s=None, log_tail=log_tail))
            return out
        c = classify(
            sig or "RankExit",
            f"rank launcher exited with {'an unknown code' if returncode is None else f'code {returncode}'} and no "
            "rank reported an exception",
            log_tail,
        )
        failure = {**c.details, "exit_code": returncode, "log_tail": log_tail[-3000:]}
        reason = c.reason
        if missing:
            cause = _killed_first(missing, log_tail)
            at = {r: steps.get(r) for r in cause}
            first = at[cause[0]]
            failure.update(
                rank=cause[0], ranks_missing=missing, step=first, phase="setup" if first is None else "train"
            )
            reason = reasons.dead_rank_reason(at, spec.total_steps, c.reason)
        elif c.rank is not None:
            failure["rank"] = c.rank
        out.update(status=c.status, error_kind=c.error_kind or "crash", reason=reason, failure=failure)
        return out
    if early and root[3].error_kind == "collective":
        out.update(_early_exit(spec, early, root, waited_s=None, log_tail=log_tail))
        return out
    _, rank, f, c = root
    failure = {
        **c.details,
        **(c.details.get("oom") or {}),  # parsed OOM numbers (bytes) at the top level, beside rank/phase/step
        "exception_type": f["exception_type"],
        "rank": c.rank if c.rank is not None else rank.get("rank"),
        "phase": c.phase,
        "step": f.get("step"),
    }
    if f["exception_type"] == "LabelMismatch":
        out.update(
            status="unsupported",
            reason=f"label not truthful on this hardware: {f['message']}",
            failure=failure,
        )
    else:
        out.update(status=c.status, error_kind=c.error_kind, reason=c.reason, failure=failure)
    if c.phase == "eval":
        out["reason"] += " (training finished; its measurements are valid)"
    return out


def _early_exit(
    spec: PointShape, early: dict[int, int], root: Any, *, waited_s: float | None, log_tail: str
) -> dict[str, Any]:
    """The outcome of a point where ``early`` ranks left training before the others (docs/cases.md#t07): status
    ``error``, kind ``early-exit``; the others' failure (``root``: their collective error) kept as a consequence."""
    consequence = None
    failure: dict[str, Any] = {
        "rank": min(early),
        "phase": "train",
        "step": early[min(early)],
        "steps_asked": spec.total_steps,
        "ranks_stopped_early": {str(r): s for r, s in sorted(early.items())},
    }
    if root is not None:
        _, rank, f, c = root
        consequence = f"rank {rank.get('rank')}: {f['exception_type']}: {first_line(f['message'], 100)}"
        failure["consequence"] = {
            **c.details,
            "rank": rank.get("rank"),
            "exception_type": f["exception_type"],
            "phase": c.phase,
            "step": f.get("step"),
            "error_kind": c.error_kind,
        }
    else:
        failure["log_tail"] = log_tail[-3000:]
    reason = reasons.early_exit_reason(early, spec.total_steps, consequence, waited_s, spec.world_size)
    return dict(status="error", error_kind="early-exit", reason=reason, failure=failure)
