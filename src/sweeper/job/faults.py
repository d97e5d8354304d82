"""Faults of sweeper's own measurement code inside a rank: never the user's error, never a lost measurement.

Every piece of the harness that runs in a rank during or after ``trainer.train()`` (the step timer, the memory
window and its ``MemTracker``, the profiler, the loss log, the progress marker, the label checks, the device-budget
tracker, the MFU peak, the rank file's fields), before it (the rank's reads of its inputs, the Trainer's set-up),
and a batch search's own code (in its ranks, and the driver's side: ``search-driver``) runs at a named **site**
(:data:`SITES`), in one of two ways:

* **contained** (:meth:`Degradations.value`, :func:`guard_callback` with ``notes``): the site only
  measures something beside the point's timed numbers (its history, its artifacts, its memory breakdown). A fault
  there is kept as a note (:class:`sweeper.results.rankfile.HarnessNote`: site, exception type, message, step), the
  site stops for the rest of the run, training goes on, and the point stays ``ok`` with the note in its record
  (``measurement_note``: what was not measured and why).
* **attributed** (:func:`attributed`, :func:`guard_callback` without ``notes``): the site decides what the
  point's numbers mean (the timed window, the labels, the device budget); a fault there ends the rank with a
  :class:`HarnessFault` whose ``site`` the rank file keeps (``RankFailure.site``); the driver records the point
  as ``error`` / ``internal`` (never ``runtime``), with the step times measured before the fault kept.

Both pass on, unchanged, what is the point's own outcome and not a fault of the harness (:func:`is_outcome`): an
out-of-memory error (the budget tracker raises the OOM a GPU would), a label mismatch, a collective error (another
rank's failure reaching this one).

Testing aid: ``SWEEPER_FAULT_INJECT=<site>[@<step>][,...]`` in the ranks' environment makes each named site raise
:class:`InjectedFault` where it runs (:func:`inject`), for a callback site from the first event at which
``state.global_step`` is at least ``<step>`` (0 when left out; a batch search's sites count trials or launches
instead, see ``docs/failures.md``, which documents it). A guarded callback reads the variable once, when the harness
sets it up; unset, nothing more runs.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sweeper.results.rankfile import MESSAGE_CHARS, HarnessNote

T = TypeVar("T")
#: The environment variable of the fault-injection testing aid (comma-separated site names).
FAULT_ENV = "SWEEPER_FAULT_INJECT"
#: Site name -> what runs there, and whether a fault there is contained or attributed ``internal``.
SITES: dict[str, str] = {
    "phase": "the phase/step tracker (attributed)",
    "verify": "the label checks after the first step and the dtype probe in the first forward (attributed)",
    "data": "the synthetic token data, read by the Trainer's data loader (attributed)",
    "rank-spec": "a rank's read of what the driver wrote for it: spec.json, the device budget, the searched batch "
    "(attributed)",
    "budget": "the device-budget tracker of the warm-up window and of a batch-search trial, CPU (attributed)",
    "timing": "the step timer: the timed window, its stop rule, its contention readings (attributed)",
    "step-memory": "the memory high-water reading after each step, for the per-step series (contained)",
    "progress": "the rank<r>.step progress marker (contained)",
    "memory": "the memory window: MemTracker's tensor peak and the model-state bytes (contained)",
    "memory-tracker": "MemTracker's hooks inside the model's forward/backward (attributed; found by traceback)",
    "profiler": "the profile window: torch.profiler trace and top-ops table (contained)",
    "losses": "the loss log (contained)",
    "trainer-run": "rank 0's trainer_run.json: the Trainer's config and times for the W&B run (contained)",
    "model-shape": "the model's shape for the FLOPs per token (contained: no MFU)",
    "peak": "rank 0's device peak for the MFU (contained: no MFU)",
    "host-comm": "rank 0's gloo (and, on a ZeRO-1/2 point, DeepSpeed) cost measurement for the driver's prediction "
    "(contained)",
    "rank-fields": "the rank file's fields after training: contention, RSS, CUDA peaks (contained, each)",
    "rank-file": "the rank file's serialisation (attributed: the measurements that serialise are kept)",
    "trainer-args": "sweeper's mapping of the point's keys to TrainingArguments, before the library sees it "
    "(attributed)",
    "trainer-shim": "SweeperTrainer's switch of accelerate's state to FSDP2 on a multi-CPU run (attributed)",
    "jit-lock": "the check of DeepSpeed's JIT-build locks before a ZeRO point's ranks build (attributed)",
    "search-state": "a batch-search rank's search state: its read at start with the device capacity, and rank 0's "
    "write of each agreed trial (attributed)",
    "search-step": "a batch-search rank's choice of the next batch and its verdict on each trial (attributed)",
    "search-peak": "a batch-search trial's peak reading after its two steps (attributed)",
    "search-driver": "the driver's side of a batch search: its search state after each launch, the next batch, the "
    "ranks' OOM verdicts (attributed: the point is recorded error/internal with the trials so far)",
}
#: Exception type names that are the point's outcome, never a fault of the harness (see :func:`is_outcome`).
OUTCOME_TYPES = frozenset({"OutOfMemoryError", "MemoryError", "LabelMismatch"})
#: A frame in one of these files belongs to the harness's own memory tracking (MemTracker's hooks run inside the
#: model's forward and backward, where no callback guard is).
TRACKER_FILES = ("torch/distributed/_tools/",)
#: The exceptions MemTracker's own code raises (its refusal of a second forward is a ``NotImplementedError``); the
#: ops it forwards raise others (``RuntimeError``, ``IndexError``, ...), which stay the point's own.
TRACKER_OWN_TYPES = (NotImplementedError, AssertionError, KeyError, AttributeError)


class InjectedFault(RuntimeError):
    """The fault :func:`inject` raises at a site named in ``SWEEPER_FAULT_INJECT`` (a testing aid)."""


class HarnessFault(Exception):
    """A fault of sweeper's own code at ``site`` that ends the rank (an attributed site): recorded as ``internal``.

    Attributes:
        site: the site name (:data:`SITES`).
        cause: the exception the site raised (also ``__cause__``).
    """

    def __init__(self, site: str, cause: BaseException) -> None:
        self.site = site
        self.cause = cause
        super().__init__(f"sweeper's own {site} code failed: {type(cause).__name__}: {cause}")


def armed(site: str) -> int | None:
    """The optimizer step from which ``SWEEPER_FAULT_INJECT`` asks ``site`` to fail (``<site>@<step>``; 0 for a
    bare ``<site>``), or None when it does not name ``site`` (or is unset). A malformed step counts as 0."""
    for entry in os.environ.get(FAULT_ENV, "").split(","):
        name, _, at = entry.strip().partition("@")
        if name == site:
            return int(at) if at.strip().isdigit() else 0
    return None


def inject(site: str, step: int | None = None, at: int | None = -1) -> None:
    """Raise :class:`InjectedFault` when ``SWEEPER_FAULT_INJECT`` names ``site`` and ``step`` (the current
    ``state.global_step``; None where there is none: any) has reached the step it names; else nothing. ``at``:
    :func:`armed`'s answer when already read (-1: read it now).

    Raises:
        InjectedFault: the site is named and its step reached.
    """
    at = armed(site) if at == -1 else at
    if at is not None and (step is None or step >= at):
        raise InjectedFault(f"fault injected at site {site!r} ({FAULT_ENV}, a testing aid)")


def is_outcome(e: BaseException) -> bool:
    """Whether ``e`` is the point's own outcome passing through harness code, not a fault of it: an out-of-memory
    error (``torch.OutOfMemoryError``, ``MemoryError``; the device budget's OOM on CPU), a ``LabelMismatch``
    (sweeper.job.verify), or a collective error (``torch.distributed.DistError`` and its subclasses: another
    rank's failure reaching this one through a collective the harness runs)."""
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & OUTCOME_TYPES) or "DistError" in names


def site_of(e: BaseException) -> str | None:
    """The harness site a rank's exception ``e`` comes from: a :class:`HarnessFault`'s ``site``; ``memory-tracker``
    when MemTracker's own code raised it (one of :data:`TRACKER_OWN_TYPES`, raised in a frame of
    :data:`TRACKER_FILES`: the innermost frame of its traceback); else None (the user's, or a library's, error: an
    op that fails while the tracker forwards it is the point's own)."""
    if isinstance(e, HarnessFault):
        return e.site
    if is_outcome(e) or not isinstance(e, TRACKER_OWN_TYPES):
        return None
    frames = traceback.extract_tb(e.__traceback__)
    if frames and any(t in frames[-1].filename.replace(os.sep, "/") for t in TRACKER_FILES):
        return "memory-tracker"
    return None


@contextmanager
def attributed(site: str, step: int | None = None, at: int | None = -1) -> Iterator[None]:
    """Run the block as the attributed site ``site``: an exception that is not an outcome becomes a
    :class:`HarnessFault` (chained). ``step``, ``at``: for :func:`inject`, first thing in the block.

    Raises:
        HarnessFault: the block raised something that is not an outcome (:class:`InjectedFault` included).
    """
    try:
        inject(site, step, at)
        yield
    except HarnessFault:
        raise
    except Exception as e:
        if is_outcome(e):
            raise
        raise HarnessFault(site, e) from e


class Degradations:
    """The contained faults of one rank, in the order they happened (:attr:`notes`, for the rank file).

    Attributes:
        notes: one :class:`~sweeper.results.rankfile.HarnessNote` per contained fault.
        step: a callable giving the current optimizer step (0-based index of the running step), for the notes.
    """

    def __init__(self, step: Callable[[], int | None] = lambda: None) -> None:
        self.notes: list[HarnessNote] = []
        self.step = step
        #: the sites with a contained fault so far.
        self.failed_sites: set[str] = set()

    def failed(self, site: str) -> bool:
        """Whether ``site`` has had a contained fault already (it then stays off for the rest of the run)."""
        return site in self.failed_sites

    def keep(self, site: str, e: BaseException) -> None:
        """Keep ``e`` as the note of a contained fault at ``site``."""
        self.failed_sites.add(site)
        self.notes.append(
            {
                "site": site,
                "exception_type": type(e).__name__,
                "message": str(e)[:MESSAGE_CHARS],
                "step": self.step(),
            }
        )

    def value(self, site: str, fn: Callable[[], T], default: T, step: int | None = None) -> T:
        """``fn()`` run as the contained site ``site``: an exception that is not an outcome is kept as a note and
        ``default`` returned instead. ``step``: the current ``state.global_step``, for :func:`inject` (checked
        before ``fn`` runs).

        Raises:
            BaseException: an outcome (:func:`is_outcome`) or a ``BaseException`` that is not an ``Exception``,
                unchanged.
        """
        try:
            inject(site, step)
            return fn()
        except Exception as e:
            if is_outcome(e):
                raise
            self.keep(site, e)
            return default

    def run(self, site: str, fn: Callable[[], object], step: int | None = None) -> bool:
        """:meth:`value` for ``fn`` run for its effect: True when it ran without a fault."""
        return self.value(site, lambda: fn() or True, False, step)


def guard_callback(
    cb: Any,
    site: str,
    notes: Degradations | None = None,
    on_fault: Callable[[], None] | None = None,
) -> Any:
    """Guard every ``on_*`` event method of the ``TrainerCallback`` instance ``cb`` as ``site`` (the methods are
    replaced on the instance; the class is unchanged). Returns ``cb``.

    ``notes`` None: attributed (:func:`attributed`). ``notes`` given: contained; after the first fault every event
    of ``cb`` is skipped, and ``on_fault()`` (itself contained: a second fault is one more note) releases what the
    callback held (an open tracker or profiler).
    """
    at = armed(site)
    for name in dir(type(cb)):
        if not name.startswith("on_") or not callable(getattr(cb, name)):
            continue
        method = getattr(cb, name)

        @functools.wraps(method)
        def guarded(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            # plain try blocks (no cost without an exception): events run inside timed steps' clocks too
            if notes is not None and site in notes.failed_sites:
                return None
            try:
                if at is not None:  # TrainerCallback events are called (args, state, control, **kwargs)
                    inject(site, getattr(args[1], "global_step", None) if len(args) > 1 else None, at)
                return _method(*args, **kwargs)
            except HarnessFault:
                raise
            except Exception as e:
                if is_outcome(e):
                    raise
                if notes is None:
                    raise HarnessFault(site, e) from e
                notes.keep(site, e)
                if on_fault is not None:
                    notes.value(site, on_fault, None, -1)  # -1: before any step, never injected again
                return None

        setattr(cb, name, guarded)
    return cb
