"""Tests of ``tests/unit/test_search_async.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import json
from pathlib import Path

from sweeper.results.sweepdir import SweepDir
from sweeper.search.driver import Point, Search
from sweeper.search.jobs import Jobs
from tests.search_synthetic import SyntheticLauncher, _points, _predictor
from tests.unit.test_search_async import ScriptedCluster


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
