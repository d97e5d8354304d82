"""The frontier search's rounds (sweeper.search.driver.Search) on synthetic predictions and a synthetic launcher that
writes each job's record from a table of "true" numbers (no ranks: the Hydra launcher and the measurements are what
a unit test cannot have; tests/integration/test_search_frontier.py runs the real ones). Skips, promotion, the stop
rules, and the records every point ends with. In the full tier: the gate's pre-flight worker answers for these points."""

from __future__ import annotations

import json
from pathlib import Path

from sweeper.capacity.predict import Prediction
from sweeper.config.spec import PointSpec
from sweeper.point.identity import point_id
from sweeper.point.lifecycle import target_for
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.search.driver import Point, Search
from tests.search_synthetic import MIB, SyntheticLauncher, _by_hand, _points, _predictor, _run
from tests.unit.specs import make_spec


def test_points_predicted_dominated_with_margin_are_skipped_and_the_search_stops(tmp_path: Path):
    pts = _points(5, batch_size=3)
    a, b, c, d1, d2 = (p.pid for p in pts)
    truth = {a: (100.0, 1.0), b: (50.0, 0.5), c: (80.0, 0.8), d1: (40.0, 2.0), d2: (30.0, 3.0)}
    _, launcher = _run(tmp_path, pts, truth, truth)
    assert sorted(pid for pid, _ in launcher.jobs) == sorted([a, b, c])  # front 0 measured, nothing else
    launched = json.loads((tmp_path / "search.json").read_text())["points"][a]
    assert launched["tokens_per_s_per_device"] == 100.0 and launched["standing"] == "none"  # no calibration here
    assert launched["throughput_margin"] is None and launched["round"] == 1  # no margin yet: null, standard JSON
    assert "Infinity" not in (tmp_path / "search.json").read_text()
    recs = {r.point_id: r for r in SweepDir(tmp_path).records()}
    assert len(recs) == 5  # every point has a record
    for d in (d1, d2):
        assert recs[d].status == "skipped" and recs[d].search["decision"] == "predicted-dominated"
        # the witness with the least memory: b, faster than both with less memory
        assert recs[d].search["dominated_by"] == b and f"dominated by point {b}" in recs[d].reason
    log = json.loads((tmp_path / "search.json").read_text())
    assert log["stop"].startswith("no unmeasured point is predicted non-dominated")
    assert log["cost"]["grid_points"] == 5 and log["cost"]["skipped"] == 2 and log["cost"]["point_seconds"] == 30.0
    said = _skipped_section(tmp_path)  # what a skip promises: per point, at search.coverage
    assert "holds for its point with a probability of about 90 % (`search.coverage`" in said, said
    assert "not for all of them at once" in said and "search.patience" not in said  # no patience set: no stop skip


def _skipped_section(sweep_dir: Path) -> str:
    """The report's "Skipped by the search" section, rebuilt from the records."""
    from sweeper.report import build_report

    build_report(sweep_dir)
    text = (sweep_dir / "report.md").read_text()
    return text.split("## Skipped by the search")[1].split("\n## ")[0]


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
    said = _skipped_section(tmp_path)
    assert "A point left when the search stopped (`search.patience`) has no such bound." in said, said


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


def test_a_point_skipped_as_tied_with_a_frontier_point_is_measured_when_that_point_leaves_the_frontier(tmp_path):
    """x is skipped as tied with a (a frontier point then, with less memory). k, measured later with still less
    memory, ties a's wide interval and takes it off the frontier; k is slower than x could be, so nothing keeps x
    off the frontier any more: its skip is set aside and x is open again. With a faster point of no more memory
    measured as well, the skip stands."""
    from sweeper.search import decide

    pts = _points(4, batch_size=1)
    k, a, x, f = pts
    truth = {k.pid: (60.0, 1.0), a.pid: (70.0, 2.0, 0.25), x.pid: (85.0, 3.0), f.pid: (200.0, 1.5)}
    sweep, launcher, search, measured = _by_hand(tmp_path, pts, truth)
    launcher([a.overrides], 0)
    pred = Prediction(tokens_per_s_per_device=80.0, peak_bytes=3 * MIB)
    skip = decide.skip_predicted(sweep, x, pred, measured(), 0.15, 0.05)
    assert skip is not None and skip.search["dominated_by"] == a.pid  # 92 tokens/s at most, a reaches 93.3
    assert search.reopen(search.records(), measured()) == []  # a is still on the frontier
    launcher([k.overrides], 1)
    assert search.reopen(search.records(), measured()) == [x.pid]
    assert sweep.final_status(x.pid) is None
    assert Record.from_dict(json.loads((sweep.point(x.pid) / "result.0.json").read_text())).status == "skipped"
    assert search.log.points[x.pid]["reopened"] == 0
    # the same with f (faster than x can be, with less memory) measured: x stays skipped, on f's word now
    launcher([f.overrides], 2)
    on_f = decide.skip_predicted(sweep, x, pred, measured(), 0.15, 0.05)
    assert on_f.search["dominated_by"] == f.pid and f"slower than {f.pid} with no less memory" in on_f.reason
    assert search.reopen(search.records(), measured()) == []
    assert sweep.read_record(x.pid).status == "skipped"


def test_a_point_the_model_cannot_time_is_screened_only_when_the_sweeps_own_steps_say_it_pays(tmp_path: Path):
    """No step-time prediction (its precision's peak not measured yet): the sweep's median step stands in for it.
    With a start-up far longer than the steps a screen leaves out, the point is measured in full at once (a screen
    would cost a second start-up for nothing); with a short start-up it is screened."""
    pts = _points(2, screen="auto")
    a, b = pts
    sweep = SweepDir(tmp_path)
    launcher = SyntheticLauncher(sweep, pts, {a.pid: (100.0, 1.0), b.pid: (50.0, 0.5)})
    search = Search(pts, sweep, launcher, predictor=_predictor({a.pid: (100.0, 1.0), b.pid: (50.0, 0.5)}))
    launcher([a.overrides], 0)
    record = sweep.read_record(a.pid)
    unknown = Prediction(tokens_per_s_per_device=None, peak_bytes=MIB)  # no step_time_s
    steps = PointSpec.from_dict(record.spec).total_steps
    for start_up, screened in ((100.0, False), (0.5, True)):
        sweep.set_aside(a.pid)
        sweep.write_record(Record.from_dict({**record.to_dict(), "wall_time_s": steps * 1.0 + start_up}))
        assert search.screen(b, unknown, search.records()) is screened, start_up


def test_a_point_the_gate_refuses_is_recorded_as_refused_and_never_predicted_or_launched(tmp_path: Path):
    """ZeRO-2 with FSDP cannot run: the search records it ``invalid`` (the gate's reason), as a grid would, before
    predicting anything, so it is never ``skipped`` as predicted dominated (on 2026-12-05 five such points of the
    benchmark grid were, the gate refusing only the three the search launched)."""
    pts = _points(2, batch_size=1)
    spec = make_spec(per_device_batch_size=2, zero=2, fsdp="full_shard", search={"name": "frontier", "screen": "never"})
    bad = Point(["zero=2", "fsdp=full_shard"], spec, point_id(spec), target_for(spec, "local", None))
    a, b = pts
    truth = {a.pid: (100.0, 1.0), b.pid: (50.0, 0.5), bad.pid: (1.0, 9.0)}  # predicted slow and big: dominated
    _, launcher = _run(tmp_path, [*pts, bad], truth, truth)
    assert bad.pid not in {pid for pid, _ in launcher.jobs}
    rec = SweepDir(tmp_path).read_record(bad.pid)
    assert rec.status == "invalid" and "zero" in rec.reason and "fsdp" in rec.reason, rec.reason
    cost = json.loads((tmp_path / "search.json").read_text())["cost"]
    assert cost["skipped"] == 0 and cost["refused"] == 1 and cost["measured_full"] == 2
    from sweeper.search.decide import cost_line

    assert "(0 screened first, 0 skipped, 1 refused before launch)" in cost_line(cost)  # every point said


def test_a_tie_skip_rests_on_the_low_end_of_the_points_interval_and_is_reopened_on_it(tmp_path: Path):
    """With the sweep's narrowest interval reaching 10 % below its median, a point predicted at 90 tokens/s (+15 %:
    at most 103.5) starts its interval at most at 93.15, within a's 80.5-93.8: tied with a, with more memory, so it
    is skipped on a's word (on its median alone it could be faster than a). The reason says both bounds, in MiB,
    and the record holds the low end, on which the skip is re-checked: k2 (less memory, tied with a, reaching 94.7)
    takes a off the frontier and keeps x off it; k1 (still less memory, tied with k2, reaching only 89.5) takes k2
    off, and nothing keeps x off any more: open again (on its median bound alone, k2 would already have)."""
    from sweeper.search import decide

    pts = _points(4, batch_size=1)
    k1, k2, a, x = pts
    truth = {k1.pid: (85.0, 1.0, 0.05), k2.pid: (90.0, 1.5, 0.05), a.pid: (86.65, 2.0, 0.0765), x.pid: (95.0, 3.0)}
    sweep, launcher, search, measured = _by_hand(tmp_path, pts, truth)
    launcher([a.overrides], 0)
    (a_m,) = measured()
    assert round(a_m.low, 1) == 80.5 and round(a_m.high, 1) == 93.8
    pred = Prediction(tokens_per_s_per_device=90.0, peak_bytes=3 * MIB)
    assert decide.skip_predicted(sweep, x, pred, measured(), 0.15, 0.02) is None  # 103.5 could beat a
    skip = decide.skip_predicted(sweep, x, pred, measured(), 0.15, 0.02, width=0.1, standing="fitted")
    assert skip is not None and skip.search["dominated_by"] == a.pid
    assert skip.search["low_upper_tokens_per_s_per_device"] == 90.0 * 1.15 * 0.9
    assert "its interval starting at most at 93.1 tokens/s per device" in skip.reason, skip.reason
    assert (
        "the margin of 'fitted' predictions" in skip.reason and "2.940 MiB (predicted 3.000 MiB - 2.0%)" in skip.reason
    )
    # the bound checks out as printed: predicted x (1 + the printed margin), to the printed tenth
    assert "at most 103.5 tokens/s per device (predicted 90.0 + 15.0%" in skip.reason, skip.reason
    assert "reaches 10.0% below its median" in skip.reason, skip.reason
    assert (
        f"tied with {a.pid} or slower (the report ties points whose intervals overlap) with more memory" in skip.reason
    )
    assert search.reopen(search.records(), measured()) == []  # a is still on the frontier
    launcher([k2.overrides], 1)
    assert search.reopen(search.records(), measured()) == []  # a is off the frontier, k2 (94.7) keeps x off
    launcher([k1.overrides], 2)
    assert search.reopen(search.records(), measured()) == [x.pid]
    assert sweep.final_status(x.pid) is None


def test_the_width_a_tie_is_judged_with_is_the_narrowest_measured_interval_once_nine_points_are_measured(tmp_path):
    """Ten points, each faster and bigger than the last (all on the frontier: all measured, one per submission),
    point b's step interval 1 ± b/100, so its throughput interval starts b/100 / (1 + b/100) below its median.
    Before 9 points are measured no width is assumed (0, logged per submission); from then on the narrowest."""
    import pytest

    pts = _points(10, batch_size=1)
    truth = {p.pid: (10.0 * b, float(b), b / 100) for b, p in enumerate(pts, start=1)}
    _, launcher = _run(tmp_path, pts, truth, truth)
    assert len(launcher.jobs) == 10
    rounds = json.loads((tmp_path / "search.json").read_text())["rounds"]
    assert [r["width"] for r in rounds[:9]] == [0.0] * 9
    batch = {p.pid: b for b, p in enumerate(pts, start=1)}
    first_nine = [batch[pid] for r in rounds[:9] for pid in r["points"]]
    assert rounds[9]["width"] == pytest.approx(min(b / 100 / (1 + b / 100) for b in first_nine))
    assert rounds[9]["width"] > 0
