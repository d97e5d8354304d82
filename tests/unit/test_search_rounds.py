"""The frontier search's rounds (sweeper.search.driver.Search) on synthetic predictions and a synthetic launcher that
writes each job's record from a table of "true" numbers (no ranks: the Hydra launcher and the measurements are what
a unit test cannot have; tests/integration/test_search_frontier.py runs the real ones). Skips, promotion, the stop
rules, and the records every point ends with."""

from __future__ import annotations

import json
from pathlib import Path

from sweeper.capacity.predict import Prediction
from sweeper.config.spec import replay_command
from sweeper.point.identity import point_id
from sweeper.point.lifecycle import target_for
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.search.driver import SCREEN_OVERRIDE, Point, Search
from tests.unit.specs import make_spec

MIB = 2**20


def _points(n: int, **search) -> list[Point]:
    out = []
    for b in range(1, n + 1):
        spec = make_spec(per_device_batch_size=b, search={"name": "frontier", "screen": "never", **search})
        out.append(Point([f"per_device_batch_size={b}"], spec, point_id(spec), target_for(spec, "local", None)))
    return out


class SyntheticLauncher:
    """Writes each job's ``ok`` record from ``truth`` (pid -> (tokens/s per device, peak MiB)); a screen's
    throughput is ``screen_factor`` x the truth. Records the jobs it was given."""

    def __init__(self, sweep: SweepDir, points: list[Point], truth: dict[str, tuple[float, float]]) -> None:
        self.sweep, self.truth, self.jobs = sweep, truth, []
        self.by_overrides = {tuple(p.overrides): p for p in points}

    def __call__(self, jobs: list[list[str]], idx: int) -> list[str]:
        for ov in jobs:
            screen = SCREEN_OVERRIDE in ov
            p = self.by_overrides[tuple(o for o in ov if o != SCREEN_OVERRIDE)]
            self.jobs.append((p.pid, screen))
            spec = p.spec.to_dict()
            spec["search"] = {**spec["search"], "window": "screen" if screen else "full"}
            if self.sweep.final_status(p.pid):
                self.sweep.set_aside(p.pid)  # what lifecycle.begin does with a promoted screen
            t, mib = self.truth[p.pid]
            m = {"tokens_per_s_per_device": t, "step_time_s_median": 1.0, "step_time_s_ci95_low": 1.0,
                 "step_time_s_ci95_high": 1.0, "peak_mem_bytes": int(mib * MIB), "timed_steps": 3 if screen else 8}  # fmt: skip
            self.sweep.write_record(
                Record(self.sweep.sweep_id, p.pid, "ok", ov, spec, replay_command(ov), metrics=m, wall_time_s=10.0)
            )
        return ["ok"] * len(jobs)


def _predictor(table: dict[str, tuple[float | None, float]]):
    def predict(spec, target, cal):
        t, mib = table[point_id(spec)]
        return Prediction(tokens_per_s_per_device=t, peak_bytes=int(mib * MIB), step_time_s=0.1)

    return predict


def _run(tmp_path: Path, pts: list[Point], truth, predicted) -> tuple[Search, SyntheticLauncher]:
    sweep = SweepDir(tmp_path)
    launcher = SyntheticLauncher(sweep, pts, truth)
    search = Search(pts, sweep, launcher, predictor=_predictor(predicted))
    search.run()
    return search, launcher


def test_points_predicted_dominated_with_margin_are_skipped_and_the_search_stops(tmp_path: Path):
    pts = _points(5, batch_size=3)
    a, b, c, d1, d2 = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), b: (50.0, 0.5), c: (80.0, 0.8), d1: (40.0, 2.0), d2: (30.0, 3.0)}
    _, launcher = _run(tmp_path, pts, truth, truth)
    assert sorted(pid for pid, _ in launcher.jobs) == sorted([a, b, c])  # front 0 measured, nothing else
    recs = {r.point_id: r for r in SweepDir(tmp_path).records()}
    assert len(recs) == 5  # every point has a record
    for d in (d1, d2):
        assert recs[d].status == "skipped" and recs[d].search["decision"] == "predicted-dominated"
        # the witness with the least memory: b, faster than both with less memory
        assert recs[d].search["dominated_by"] == b and f"dominated by point {b}" in recs[d].reason
    log = json.loads((tmp_path / "search.json").read_text())
    assert log["stop"].startswith("no unmeasured point is predicted non-dominated")
    assert log["cost"]["grid_points"] == 5 and log["cost"]["skipped"] == 2 and log["cost"]["point_seconds"] == 30.0


def test_no_point_is_skipped_on_throughput_before_the_model_has_measured_errors(tmp_path: Path):
    """Batch of one: after the first measurement there is one out-of-sample error, too few for a margin (2)."""
    pts = _points(3, batch_size=1)
    a, d1, d2 = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), d1: (40.0, 2.0), d2: (30.0, 3.0)}
    _, launcher = _run(tmp_path, pts, truth, truth)
    assert [pid for pid, _ in launcher.jobs][:2] == [a, d1]  # d1 is measured: the margin is not known yet
    assert SweepDir(tmp_path).read_record(d2).status == "skipped"  # two errors known: d2 skipped on a's numbers


def test_screens_are_promoted_unless_their_upper_bound_is_dominated(tmp_path: Path):
    pts = _points(4, screen="always", batch_size=2)
    a, b, f, e = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), b: (50.0, 0.5), f: (130.0, 1.1), e: (60.0, 1.2)}
    # f is under-predicted, e over-predicted: neither can be skipped on the prediction; only their screens tell
    predicted = {a: (100.0, 1.0), b: (50.0, 0.5), f: (95.0, 1.1), e: (90.0, 1.2)}
    _, launcher = _run(tmp_path, pts, truth, predicted)
    assert launcher.jobs[:2] == [(a, False), (b, False)]  # nothing measured in full yet: no screen could be skipped
    assert launcher.jobs[2:] == [(f, True), (e, True), (f, False)]  # f promoted; e's 60 x 1.1 < a's 100
    sweep = SweepDir(tmp_path)
    rec = sweep.read_record(e)
    assert rec.status == "skipped" and rec.search["decision"] == "screen-dominated" and rec.search["dominated_by"] == a
    assert rec.search["screen_record"] == "result.0.json"
    assert Record.from_dict(json.loads((sweep.point(e) / "result.0.json").read_text())).screen  # history kept
    full = sweep.read_record(f)
    assert full.status == "ok" and not full.screen and full.metrics["timed_steps"] == 8  # the full window's numbers
    assert Record.from_dict(json.loads((sweep.point(f) / "result.0.json").read_text())).screen


def test_patience_stops_after_measurements_without_a_frontier_change(tmp_path: Path):
    pts = _points(4, batch_size=1, patience=1)
    a, b, c, d = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), b: (90.0, 1.5), c: (80.0, 2.0), d: (200.0, 0.5)}
    # a model 5-10x off: its margin (> 400 %) never lets it skip; measured by memory, d (least) first
    wrong = {pid: (1000.0, mib) for pid, (_, mib) in truth.items()}
    _, launcher = _run(tmp_path, pts, truth, wrong)
    assert [pid for pid, _ in launcher.jobs] == [d, a]  # d sets the frontier, a (dominated) does not change it
    recs = {r.point_id: r for r in SweepDir(tmp_path).records()}
    stopped = [r for r in recs.values() if r.status == "skipped"]
    assert len(stopped) == 2 and all(r.search["decision"] == "stopped" for r in stopped)
    assert all("search.patience=1" in r.reason for r in stopped)


def test_a_launcher_that_runs_one_job_at_a_time_gets_one_point_per_submission_decided_on_every_record(tmp_path):
    """Hydra's basic launcher (the local one) runs one point after the other. With ``search.batch_size=3`` the first
    round fills its third slot with d1, from the second predicted front, before anything is measured; one point per
    submission decides d1 after a and b are measured, and skips it (b dominates it with the margin)."""
    from sweeper.search.jobs import Launched

    pts = _points(3, batch_size=3)
    a, b, d1 = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), b: (50.0, 0.5), d1: (40.0, 0.8)}  # d1: slower than b with more memory
    rounds = SyntheticLauncher(SweepDir(tmp_path / "rounds"), pts, truth)
    Search(pts, SweepDir(tmp_path / "rounds"), rounds, predictor=_predictor(truth)).run()
    one = SyntheticLauncher(SweepDir(tmp_path / "one"), pts, truth)
    Search(pts, SweepDir(tmp_path / "one"), Launched(one, concurrent=1), predictor=_predictor(truth)).run()
    assert sorted(pid for pid, _ in rounds.jobs) == sorted([a, b, d1])  # one round of three
    assert sorted(pid for pid, _ in one.jobs) == sorted([a, b])
    log = json.loads((tmp_path / "one" / "search.json").read_text())
    assert [len(r["points"]) for r in log["rounds"]] == [1, 1], log["rounds"]
    rec = SweepDir(tmp_path / "one").read_record(d1)
    assert rec.status == "skipped" and rec.search["dominated_by"] == b, rec.reason
