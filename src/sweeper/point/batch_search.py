"""``per_device_batch_size=auto``: which batch to try next, and when the search is done (no torch; the ranks and the
driver share it). ``docs/batch-search.md`` is the user's page.

A *trial* runs the point at one batch for two optimizer steps (:mod:`sweeper.job.batch_trials`) and ends in one of
three outcomes: ``fits`` (every rank's peak <= the usable bytes), ``over_margin`` (it ran, but some rank's peak is over
the usable bytes) or ``oom`` (a rank ran out of memory mid-step). The usable bytes are the device capacity less the
margin: ``capacity_bytes x (1 - margin)``. Peaks grow with the batch, so the trials bracket the answer: ``lo`` is the
largest batch that fits, ``hi`` the smallest that does not, and the search is done when ``hi = lo + 1`` (the answer is
``lo``; 0 when not even one sample fits).

The next batch (:meth:`SearchState.next_batch`):

1. the seed (the memory model's largest batch, :func:`sweeper.capacity.predict.max_batch_size`, else 1);
2. *plain* steps: double ``lo`` while nothing has failed, then bisect ``(lo, hi)``;
3. *fitted* steps: the peaks measured so far are affine in the batch (activations and logits grow linearly), so a line
   through the two largest measured trials (one trial: through the origin, which under-estimates the answer) names the
   batch ``e`` expected to be the answer; it is tried, then ``e + 1`` to close the bracket. A fitted step is taken only
   inside the bracket, never more than doubles ``lo``, and at most :data:`FITTED_ALLOWANCE` more fitted steps than plain
   ones are taken, so a wrong fit costs at most as many trials as plain steps: the count stays logarithmic
   (:func:`trial_bound`). A right fit ends the search in about four trials; and since the batch just above the answer
   usually lands inside the margin, it ends ``over_margin`` rather than ``oom``, which spares a relaunch.

Files in the point directory: :data:`SEARCH_FILE` holds the :class:`SearchState` (written by the driver between
launches and by rank 0 after each agreed trial, atomically); :data:`OOM_FILE` is written by a rank that ran out of
memory mid-step just before it exits (the driver turns it into an ``oom`` trial and relaunches the ranks).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweeper.results.atomic import write_json_atomic

#: The state of a point's search, in its directory.
SEARCH_FILE = "batch_search.json"
#: What a rank that ran out of memory mid-step leaves before it exits (``.format(rank=r)``).
OOM_FILE = "batch_oom_rank{rank}.json"
#: The largest per-device batch the search tries (samples).
MAX_BATCH = 1 << 16
#: How many more fitted steps than plain ones the search may take (see the module doc).
FITTED_ALLOWANCE = 2


@dataclass
class Trial:
    """One trial of a search.

    Attributes:
        batch: per-device batch tried (samples).
        outcome: ``fits``, ``over_margin`` or ``oom`` (see the module doc).
        chosen_by: why this batch: ``seed``, ``double``, ``bisect`` (plain steps) or ``fitted``.
        peak_bytes: the largest peak over the ranks (bytes; CPU: tensor bytes, GPU: allocator reserved plus memory
            outside the allocator); None for an ``oom`` trial.
        peak_bytes_per_rank: each rank's peak, by rank (bytes).
        rank: the rank that ran out of memory (``oom``).
        oom: the OOM's parsed numbers (:class:`sweeper.failures.oom.OomInfo`, bytes) and its message.
        launch: which launch of the ranks ran it (1-based).
        seconds: wall time of the trial on rank 0 (model, Trainer and two steps).
    """

    batch: int
    outcome: str
    chosen_by: str = "seed"
    peak_bytes: int | None = None
    peak_bytes_per_rank: list[int] | None = None
    rank: int | None = None
    oom: dict[str, Any] | None = None
    launch: int = 0
    seconds: float | None = None

    @property
    def fits(self) -> bool:
        """The trial fits in the usable bytes."""
        return self.outcome == "fits"


@dataclass
class SearchState:
    """A point's search: its settings and the trials so far.

    Attributes:
        capacity_bytes: device memory per rank (bytes): ``cluster.gpu_mem_gib`` x 2**30, or on a GPU without it the
            device's total memory (filled in by the ranks); on CPU the tensor-byte budget the harness enforces.
        margin: ``plan.memory_margin``, the fraction of the capacity held back.
        seed: the first batch tried; seed_source: where it comes from.
        trials: every trial, in the order run.
        launches: how many times the ranks were started for this search.
        max_batch: the largest batch tried (:data:`MAX_BATCH`).
    """

    capacity_bytes: int | None
    margin: float
    seed: int
    seed_source: str
    trials: list[Trial] = field(default_factory=list)
    launches: int = 0
    max_batch: int = MAX_BATCH

    @property
    def usable_bytes(self) -> int | None:
        """``capacity_bytes x (1 - margin)``, rounded down (bytes); None while the capacity is unknown."""
        if self.capacity_bytes is None:
            return None
        return math.floor(self.capacity_bytes * (1.0 - self.margin))

    def verdict(self, batch: int, peaks: list[int], chosen_by: str, **extra: Any) -> Trial:
        """The trial of ``batch`` that ran on every rank with these peaks (bytes, by rank): ``fits`` when the largest
        is at most :attr:`usable_bytes`, else ``over_margin``.

        Raises:
            ValueError: the capacity is unknown (nothing to compare with).
        """
        usable = self.usable_bytes
        if usable is None:
            raise ValueError("the device capacity is unknown: set cluster.gpu_mem_gib")
        peak = max(peaks)
        outcome = "fits" if peak <= usable else "over_margin"
        return Trial(batch, outcome, chosen_by, peak, list(peaks), **extra)

    def bracket(self) -> tuple[int, int | None]:
        """``(lo, hi)``: the largest batch that fits below the smallest that does not (0 when none), and that
        smallest failing batch (None when none failed). A trial that fits above a failing one (a measurement that is
        not monotone) is not trusted: the failure wins."""
        hi = min((t.batch for t in self.trials if not t.fits), default=None)
        lo = max((t.batch for t in self.trials if t.fits and (hi is None or t.batch < hi)), default=0)
        return lo, hi

    @property
    def done(self) -> bool:
        """The answer is known: ``hi = lo + 1``, or ``lo`` reached :attr:`max_batch`."""
        lo, hi = self.bracket()
        return (hi is not None and hi <= lo + 1) or (hi is None and lo >= self.max_batch)

    @property
    def answer(self) -> int | None:
        """The largest per-device batch that fits (0: not even one sample), or None while the search goes on."""
        return self.bracket()[0] if self.done else None

    def next_batch(self) -> tuple[int, str] | None:
        """The next batch to try and why (``seed``, ``double``, ``bisect``, ``fitted``); None when :attr:`done`."""
        if self.done:
            return None
        if not self.trials:
            return max(1, min(self.seed, self.max_batch)), "seed"
        lo, hi = self.bracket()
        top = min(self.max_batch, 2 * lo if hi is None else hi - 1)  # the largest batch worth trying now
        tried = {t.batch for t in self.trials}
        fitted = sum(t.chosen_by == "fitted" for t in self.trials)
        if fitted < len(self.trials) - fitted + FITTED_ALLOWANCE:
            e = self.fitted_answer()
            for b in (e, None if e is None else e + 1):
                if b is not None and lo < b <= top and b not in tried:
                    return b, "fitted"
        if hi is None:
            return min(max(2 * lo, 1), self.max_batch), "double"
        return max(1, (lo + hi) // 2), "bisect"

    def fitted_answer(self) -> int | None:
        """The largest batch whose peak, on a line through the measured trials, is at most :attr:`usable_bytes`:
        through the two largest measured batches, or through the origin and the one measured batch; None when no
        trial was measured or the line does not rise."""
        usable = self.usable_bytes
        measured = sorted({t.batch: t.peak_bytes for t in self.trials if t.peak_bytes is not None}.items())
        if usable is None or not measured:
            return None
        (b1, p1), (b2, p2) = ((0, 0), measured[-1]) if len(measured) == 1 else measured[-2:]
        slope = (p2 - p1) / (b2 - b1)
        if slope <= 0:
            return None
        return max(0, b2 + math.floor((usable - p2) / slope))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (the :data:`SEARCH_FILE` and ``record.ran["batch_search"]``), with the answer,
        the bracket and the usable bytes spelt out for a reader."""
        lo, hi = self.bracket()
        return {
            **asdict(self),
            "usable_bytes": self.usable_bytes,
            "answer": self.answer,
            "largest_fitting": lo,
            "smallest_failing": hi,
            "trial_count": len(self.trials),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchState:
        """Inverse of :meth:`to_dict` (derived keys ignored)."""
        keys = {"capacity_bytes", "margin", "seed", "seed_source", "launches", "max_batch"}
        state = cls(**{k: v for k, v in data.items() if k in keys})
        state.trials = [Trial(**t) for t in data.get("trials", [])]
        return state

    def write(self, pdir: Path) -> None:
        """Write :data:`SEARCH_FILE` in ``pdir`` atomically."""
        write_json_atomic(Path(pdir) / SEARCH_FILE, self.to_dict())

    @classmethod
    def load(cls, pdir: Path) -> SearchState:
        """The state in ``pdir``, where it must be (written by the driver before the ranks start, by rank 0 after
        each trial).

        Raises:
            OSError, ValueError, TypeError, AttributeError: no state there, or one that cannot be read.
        """
        return cls.from_dict(json.loads((Path(pdir) / SEARCH_FILE).read_text()))

    @classmethod
    def read(cls, pdir: Path) -> SearchState | None:
        """The state in ``pdir`` (:meth:`load`), or None when there is none (or it cannot be read)."""
        try:
            return cls.load(pdir)
        except (OSError, ValueError, TypeError, AttributeError):
            return None


def searched_batch(pdir: Path) -> int:
    """The batch a finished search found in ``pdir`` (samples), for the measurement run.

    Raises:
        ValueError: no finished search there, or not even one sample fits (the driver records such a point as
            ``oom`` and never starts the measurement).
    """
    state = SearchState.read(pdir)
    answer = state.answer if state is not None else None
    if not answer:
        raise ValueError(f"{pdir}: per_device_batch_size=auto but no batch was found there ({SEARCH_FILE})")
    return answer


def trial_bound(answer: int, seed: int) -> int:
    """At most how many trials a search takes (plain steps, plus fitted ones; see the module doc).

    Plain steps: the seed, then doubling up to the first failure and bisecting the bracket it leaves (at most
    ``log2`` of the larger of the answer and the seed each). Fitted steps: at most the plain ones plus
    :data:`FITTED_ALLOWANCE`.
    """
    n = max(answer, seed, 1)
    plain = 1 + 2 * math.ceil(math.log2(n + 1))
    return 2 * plain + FITTED_ALLOWANCE
