"""The frontier search's synthetic parts (no ranks): points of a tiny grid, a launcher that writes each job's record
from a table of "true" numbers, a predictor from a table, and the search run over them: shared by the fast tier's
search tests (tests/unit/test_search_async.py) and the rounds that ask the pre-flight worker
(tests/integration/test_search_rounds.py)."""

from __future__ import annotations

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
    """Writes each job's ``ok`` record from ``truth`` (pid -> (tokens/s per device, peak MiB[, w])): the step time's
    95 % interval is 1 ± w (0 by default), so the throughput interval is [t / (1 + w), t / (1 - w)]. Records the
    jobs it was given."""

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
            t, mib, *w = self.truth[p.pid]
            w = w[0] if w else 0.0
            m = {"tokens_per_s_per_device": t, "step_time_s_median": 1.0, "step_time_s_ci95_low": 1.0 - w,
                 "step_time_s_ci95_high": 1.0 + w, "peak_mem_bytes": int(mib * MIB), "timed_steps": 3 if screen else 8}  # fmt: skip
            self.sweep.write_record(
                Record(self.sweep.sweep_id, p.pid, "ok", ov, spec, replay_command(ov), metrics=m, wall_time_s=10.0)
            )
        return ["ok"] * len(jobs)


def _predictor(table: dict[str, tuple[float | None, float]]):
    def predict(spec, target, cal):
        t, mib = table[point_id(spec)][:2]  # a truth table may give a width third
        return Prediction(tokens_per_s_per_device=t, peak_bytes=int(mib * MIB), step_time_s=0.1)

    return predict


def _by_hand(tmp_path: Path, pts: list[Point], truth):
    """A search whose jobs a test launches itself: (sweep, launcher, search, the measured points now)."""
    from sweeper.search.state import measured_point

    sweep = SweepDir(tmp_path)
    launcher = SyntheticLauncher(sweep, pts, truth)
    search = Search(pts, sweep, launcher, predictor=_predictor(truth))

    def measured():
        return [m for r in search.records().values() if r is not None and (m := measured_point(r)) is not None]

    return sweep, launcher, search, measured


def _run(tmp_path: Path, pts: list[Point], truth, predicted) -> tuple[Search, SyntheticLauncher]:
    sweep = SweepDir(tmp_path)
    launcher = SyntheticLauncher(sweep, pts, truth)
    search = Search(pts, sweep, launcher, predictor=_predictor(predicted))
    search.run()
    return search, launcher
