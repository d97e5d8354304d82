"""Asynchronous promotion (docs/search.md): the search's next step on plain point ids (sweeper.search.schedule), and
the driver (sweeper.search.driver.Search) over jobs that end one at a time, in a scripted order on a synthetic
clock (tests/integration/test_search_slurm.py runs the real SLURM launcher): each free slot is refilled as soon as
its job ends, a promotion is submitted while another job still runs, never more than ``search.batch_size`` jobs in
flight, every point ends with a record."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sweeper.results.sweepdir import SweepDir
from sweeper.search.driver import SCREEN_OVERRIDE
from sweeper.search.schedule import Step, next_step, unchanged_streak
from tests.search_synthetic import SyntheticLauncher


def test_free_slots_are_filled_with_promotions_first_then_the_predicted_front_order():
    step = next_step(["s1", "s2"], ["n1", "n2", "n3"], in_flight={"r1"}, batch_size=4)
    assert step == Step(promote=("s1", "s2"), start=("n1",)) and step.submits and not step.done


def test_a_point_in_flight_is_never_submitted_again():
    assert next_step(["r1"], ["r2", "n1"], in_flight={"r1", "r2"}, batch_size=3) == Step(start=("n1",))


def test_with_every_slot_busy_the_search_waits_and_with_nothing_in_flight_it_stops():
    full = next_step(["s1"], ["n1"], in_flight={"r1", "r2"}, batch_size=2)
    assert full == Step(wait=True) and not full.submits and not full.done
    idle = next_step([], [], in_flight=set(), batch_size=2)
    assert idle.done and not idle.wait
    assert next_step([], [], in_flight={"r1"}, batch_size=2) == Step(wait=True)  # its record may promote it


def test_a_batch_size_below_one_still_runs_one_job_at_a_time():
    assert next_step([], ["n1", "n2"], in_flight=set(), batch_size=0) == Step(start=("n1",))
    assert next_step([], ["n2"], in_flight={"n1"}, batch_size=0) == Step(wait=True)


def test_full_measurements_without_a_frontier_change_are_counted_and_a_change_resets_the_count():
    same = frozenset({"a"})
    assert unchanged_streak(2, same, same, full_ended=1) == 3
    assert unchanged_streak(2, same, same, full_ended=0) == 2  # a screen ended: not a full measurement
    assert unchanged_streak(2, same, frozenset({"a", "b"}), full_ended=1) == 0


class ScriptedCluster:
    """:class:`Jobs` on a synthetic clock: a job of point p ends ``seconds[(p, screen)]`` after its submission, and
    then (in :meth:`wait`, one job at a time, the earliest first) writes its record from ``launcher``'s table of
    true numbers. As the SLURM launcher does at submission (lifecycle.begin), a promotion sets its screen aside."""

    def __init__(self, sweep: SweepDir, launcher: SyntheticLauncher, seconds: dict[tuple[str, bool], float]) -> None:
        self.sweep, self.launcher, self.seconds = sweep, launcher, seconds
        self.concurrent: int | None = None
        self.now = 0.0
        self.returns: list[Any] = []
        self.queue: list[tuple[float, str, list[str]]] = []  # (end, point id, overrides)
        self.events: list[tuple[float, str, str, bool, int]] = []  # (time, "submit"|"end", pid, screen, in flight)

    def running(self, point_ids: Collection[str]) -> set[str]:
        return set()

    def submit(self, job_overrides: list[list[str]], initial_job_idx: int) -> None:
        for ov in job_overrides:
            screen = SCREEN_OVERRIDE in ov
            p = self.launcher.by_overrides[tuple(o for o in ov if o != SCREEN_OVERRIDE)]
            if not screen and self.sweep.final_status(p.pid):
                self.sweep.set_aside(p.pid)  # the promoted screen: history kept, no record until the full window
            self.queue.append((self.now + self.seconds[(p.pid, screen)], p.pid, ov))
            self.events.append((self.now, "submit", p.pid, screen, len(self.queue)))

    def wait(self, point_ids: Collection[str]) -> set[str]:
        self.queue.sort()
        end, pid, ov = self.queue.pop(0)
        self.now = end
        self.launcher([ov], 0)  # writes the job's record
        self.events.append((end, "end", pid, SCREEN_OVERRIDE in ov, len(self.queue)))
        return {pid}
