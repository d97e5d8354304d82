"""Asynchronous promotion (docs/search.md): the search's next step on plain point ids (sweeper.search.schedule), and
the driver (sweeper.search.driver.Search) over jobs that end one at a time, in a scripted order on a synthetic
clock (tests/integration/test_search_slurm.py runs the real SLURM launcher): each free slot is refilled as soon as
its job ends, a promotion is submitted while another job still runs, never more than ``search.batch_size`` jobs in
flight, every point ends with a record."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from sweeper.results.sweepdir import SweepDir
from sweeper.search.driver import SCREEN_OVERRIDE, Point, Search
from sweeper.search.jobs import Jobs
from sweeper.search.schedule import Step, next_step, unchanged_streak
from tests.unit.test_search_rounds import SyntheticLauncher, _points, _predictor


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


def test_a_slot_is_refilled_as_soon_as_its_job_ends_and_a_promotion_runs_beside_a_slow_job(tmp_path: Path):
    """Two slots, every later point screened. a and b start in full; b is slow. When a ends, f's screen starts
    beside b; when it ends, f is promoted at once, still beside b (rounds would have waited for b). f's full window
    is the model's second measured error (37 % too low on f): e's prediction plus that margin is dominated by f, so
    e is skipped without running. Every point has a record when b ends the search."""
    pts: list[Point] = _points(4, screen="always", batch_size=2)
    a, b, f, e = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), b: (50.0, 0.5), f: (130.0, 1.1), e: (60.0, 1.2)}
    predicted: dict[str, tuple[float | None, float]]
    predicted = {a: (100.0, 1.0), b: (50.0, 0.5), f: (95.0, 1.1), e: (90.0, 1.2)}
    sweep = SweepDir(tmp_path)
    seconds = {(a, False): 10.0, (b, False): 100.0, (f, True): 4.0, (f, False): 10.0, (e, True): 4.0}
    cluster = ScriptedCluster(sweep, SyntheticLauncher(sweep, pts, truth), seconds)
    assert isinstance(cluster, Jobs)
    Search(pts, sweep, cluster, predictor=_predictor(predicted)).run()
    submits = [(t, pid, screen) for t, kind, pid, screen, _ in cluster.events if kind == "submit"]
    assert submits == [(0.0, a, False), (0.0, b, False), (10.0, f, True), (14.0, f, False)]
    assert max(in_flight for *_, in_flight in cluster.events) <= 2  # search.batch_size
    assert cluster.events[-1] == (100.0, "end", b, False, 0)  # every later job ran while b was still running
    recs = {r.point_id: r for r in sweep.records()}
    assert recs[f].status == "ok" and not recs[f].screen and recs[f].metrics["timed_steps"] == 8
    assert recs[e].status == "skipped" and recs[e].search["decision"] == "predicted-dominated"
    assert recs[e].search["dominated_by"] == f
    assert {recs[a].status, recs[b].status} == {"ok"}
    log = json.loads(sweep.search_file.read_text())
    promotion = next(r for r in log["rounds"] if r["promoted"])
    assert promotion["points"] == [f] and promotion["in_flight"] == [b]  # submitted while b was in flight
    assert [r["in_flight"] for r in log["rounds"]] == [[], [b], [b]]
    assert log["stop"].startswith("no unmeasured point is predicted non-dominated")
    assert log["cost"]["grid_points"] == 4 and log["cost"]["screened"] == 1 and log["cost"]["skipped"] == 1
