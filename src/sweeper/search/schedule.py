"""What the frontier search does next, on plain point ids: the jobs to submit into the free slots, or wait for a
job in flight to end, or stop; and the count of full-window measurements without a frontier change
(``search.patience``). docs/search.md, "Asynchronous promotion".

There are ``search.batch_size`` slots. Whenever a job ends the driver decides again on every record, and fills the
free slots (``batch_size`` less the jobs still in flight): promotions first (a screen that could be on the frontier,
its full window measured next), then unmeasured points in predicted-front order. With nothing to submit it waits
while a job is in flight, and stops when none is. A blocking launcher (local) has nothing in flight between two
submissions, so this is its rounds; on SLURM a slot is refilled as soon as its job ends, so no device idles at a
barrier.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """The next step of the search.

    Attributes:
        promote: screens to measure over their full window now (point ids).
        start: unmeasured points to start now, in predicted-front order.
        wait: nothing to submit now: wait until a job in flight ends.
    A step with nothing to submit and no wait ends the search.
    """

    promote: tuple[str, ...] = ()
    start: tuple[str, ...] = ()
    wait: bool = False

    @property
    def submits(self) -> bool:
        """Whether this step submits jobs."""
        return bool(self.promote or self.start)

    @property
    def done(self) -> bool:
        """Whether the search is over: nothing to submit and nothing in flight."""
        return not self.submits and not self.wait


def next_step(promote: Sequence[str], ordered: Sequence[str], in_flight: Collection[str], batch_size: int) -> Step:
    """The jobs to submit into the free slots: ``batch_size`` (at least 1) less the jobs ``in_flight``; promotions
    (``promote``, in order) first, then the unmeasured points ``ordered`` (predicted-front order). A point in flight
    is never submitted again. With no free slot, or nothing to submit, wait while a job is in flight; else stop."""
    busy = set(in_flight)
    free = max(0, max(1, batch_size) - len(busy))
    up = tuple(p for p in promote if p not in busy)[:free]
    new = tuple(p for p in ordered if p not in busy and p not in up)[: free - len(up)]
    if up or new:
        return Step(up, new)
    return Step(wait=bool(busy))


def unchanged_streak(streak: int, before: frozenset[str], after: frozenset[str], full_ended: int) -> int:
    """Full-window measurements since the measured frontier last changed: 0 when the frontier's point ids
    ``after`` the jobs that just ended differ from ``before``, else ``streak`` plus ``full_ended`` (the full-window
    jobs that ended, whatever their status)."""
    return 0 if after != before else streak + full_ended
