"""``search=frontier``: the planner-ordered, successive-halving search over a multirun's grid (docs/search.md).

The Hydra sweeper (:class:`hydra_plugins.sweeper_slurm.SweeperBasicSweeper`) expands the grid as for ``search=grid``
and hands it to :func:`run_search` with the sweep's jobs (:mod:`sweeper.search.jobs`: the SLURM launcher's, which
submits without waiting, or any Hydra launcher's blocking ``launch``). Up to ``search.batch_size`` jobs are in flight;
each time one ends (on SLURM, as soon as any job of the search ends; locally, when the launch returns) the driver:

1. reads every record (the truth: a killed search resumes from them, and waits for its jobs still on SLURM);
2. recalibrates the time model on every ``ok`` record of the sweep, screens included
   (:func:`sweeper.capacity.calibrate.fit_calibration`), and sets the margins from the model's own error on this
   sweep (each point's prediction as it was launched, against its measurement: :func:`sweeper.search.order.margin`);
3. decides each ``ok`` screen: promote it to the full window, or skip it when even its upper bound is surely
   dominated by a point measured in full;
4. predicts every unmeasured point not in flight, skips those predicted not to fit or surely dominated (with the
   margins), orders the rest by predicted front (:func:`sweeper.search.order.front_order`);
5. fills the free slots, promotions first (:func:`sweeper.search.schedule.next_step`), each new point as a screen or
   in full (:func:`sweeper.search.order.screen_pays`), and submits them; else waits for a job in flight to end.

It stops when nothing is in flight and nothing is left to submit: no unmeasured point is left that is not skipped,
or ``search.patience`` full measurements passed with no frontier change (the rest is skipped, the reason says so).
Every point of the grid ends with a record.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.search import decide
from sweeper.search.jobs import Jobs, Launched
from sweeper.search.order import (
    Guess,
    front_order,
    margin,
    margins_by_standing,
    overhead_estimate,
    screen_pays,
    surely_dominated,
    width_floor,
    widths,
)
from sweeper.search.schedule import Step, next_step, unchanged_streak
from sweeper.search.state import Log, frontier_ids, history, interval, measured_point

#: The override a screen job gets (a budget: the point's identity is unchanged).
SCREEN_OVERRIDE = "search.window=screen"


@dataclass(frozen=True)
class Point:
    """One grid point of the search: its grid overrides, spec, id and target."""

    overrides: list[str]
    spec: PointSpec
    pid: str
    target: Target


class Search:
    """One frontier search over ``points`` (see the module doc). ``jobs`` runs its jobs (:class:`Jobs`; a plain
    callable is taken as a Hydra launcher's blocking ``launch(job_overrides, initial_job_idx)``); ``sweep`` the sweep
    directory; ``predictor(spec, target, calibration)`` the model (:func:`sweeper.search.decide.guess`; a unit test
    gives synthetic predictions)."""

    def __init__(
        self, points: list[Point], sweep: SweepDir, jobs: Jobs | Callable[..., Any], predictor: Any = decide.guess
    ) -> None:
        self.points = points
        self.predict = predictor
        self.sweep = sweep.resolved()
        self.jobs: Jobs = jobs if isinstance(jobs, Jobs) else Launched(jobs)
        self.by_id = {p.pid: p for p in points}
        self.job_idx = 0
        self.log = Log.read(self.sweep)
        self.log.grid = len(points)
        self.conf = points[0].spec.search
        self.front: frozenset[str] = frozenset()  # the measured frontier's point ids when a job last ended
        self.stop: str | None = None  # why the search ends, once known

    # -- reading -----------------------------------------------------------------------------------------------

    def records(self) -> dict[str, Record | None]:
        """Each point's current record (None: none, or not final)."""
        out: dict[str, Record | None] = {}
        for p in self.points:
            status = self.sweep.final_status(p.pid)
            out[p.pid] = self.sweep.read_record(p.pid) if status else None
        return out

    def errors(self, recs: dict[str, Record | None]) -> tuple[list[tuple[str, float]], list[float], list[float]]:
        """Out-of-sample relative errors, oldest launch first: throughput (the model as it is now, each full-window
        ok point left out in turn: :func:`sweeper.search.decide.loo_errors`), memory (how far below its prediction
        at launch each record's peak came out, 1 − measured / predicted: a skip needs a lower bound on memory; the
        memory model is not calibrated), screens (full-window high over the screen's high, minus 1)."""
        mem, scr = [], []
        launched = sorted(self.log.points.items(), key=lambda kv: kv[1].get("round", 0))
        unlogged = [p.pid for p in self.points if p.pid not in self.log.points]
        tput = decide.loo_errors(self.points, recs, [*unlogged, *(pid for pid, _ in launched)], self.predict)
        for pid, info in launched:
            r = recs.get(pid)
            if r is None or r.status != "ok":
                continue
            m = r.metrics or {}
            if info.get("peak_bytes") and m.get("peak_mem_bytes"):
                mem.append(1 - m["peak_mem_bytes"] / info["peak_bytes"])
            if r.screen:
                continue
            full = interval(r)
            screens = [h for h in history(self.sweep, pid) if h.screen and h.status == "ok"]
            if full and screens and (iv := interval(screens[-1])):
                scr.append(max(0.0, full[1] / iv[1] - 1))
        return tput, mem, scr

    # -- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> list[Any]:
        """Search until a stop rule holds (module doc); returns the launcher's job returns, submission by
        submission."""
        recs = self.records()
        # a killed search's jobs still on SLURM: waited for, not decided again (their window is in search.json)
        unrecorded = [p.pid for p in self.points if recs[p.pid] is None]
        in_flight = {pid: self.window_of(pid) for pid in self.jobs.running(unrecorded)}
        if in_flight:
            print(f"search=frontier: {len(in_flight)} job(s) of an earlier run still queued or running, waited for: "
                  f"{' '.join(sorted(in_flight))}", flush=True)  # fmt: skip
        self.refuse([p for p in self.points if recs[p.pid] is None and p.pid not in in_flight])
        stalled: set[str] = set()  # a job ended without a final record: never submitted again by this search
        self.front = frontier_ids(m for r in recs.values() if r is not None and (m := measured_point(r)) is not None)
        while True:
            recs = self.records()
            self.settle(recs, in_flight)
            step = self.step(recs, in_flight, stalled)
            if step.wait:
                for pid in self.jobs.wait(set(in_flight)):
                    if self.sweep.final_status(pid) is None:
                        in_flight.pop(pid, None)
                        stalled.add(pid)  # given up (still pending on SLURM past its wait limit, or not written)
            elif step.done:
                break
        self.log.stop = self.stop or "every point has a record"
        recs = self.records()
        self.log.cost = decide.cost(self.sweep, self.points, recs, decide.calibration(recs.values()))
        self.log.write(self.sweep)
        print(f"search=frontier: stopped: {self.log.stop}; {decide.cost_line(self.log.cost)}", flush=True)
        return self.jobs.returns

    def refuse(self, todo: list[Point]) -> None:
        """Before anything is predicted: the points of ``todo`` (no record, no job running) that the gate or the
        pre-flight refuses get their refusal record (``invalid``, ``unsupported``, ``pruned``), as a grid would
        record them, and are never predicted, skipped or launched (:func:`sweeper.search.decide.refuse_many`)."""
        refused = decide.refuse_many([(p.spec, p.overrides, p.target) for p in todo], self.sweep)
        if any(r is not None for r in refused):
            print(f"search=frontier: {sum(r is not None for r in refused)} point(s) refused before anything runs "
                  "(their records say why)", flush=True)  # fmt: skip

    def settle(self, recs: dict[str, Record | None], in_flight: dict[str, str]) -> None:
        """Take the jobs that ended (their point has a final record) out of ``in_flight``, and count the full
        measurements since the measured frontier last changed (``search.patience``)."""
        ended = [pid for pid in in_flight if recs[pid] is not None]
        if not ended:
            return
        fulls = sum(in_flight.pop(pid) == "full" for pid in ended)
        now = frontier_ids(m for r in recs.values() if r is not None and (m := measured_point(r)) is not None)
        self.log.since_change = unchanged_streak(self.log.since_change, self.front, now, fulls)
        self.front = now
        self.log.write(self.sweep)

    def step(self, recs: dict[str, Record | None], in_flight: dict[str, str], stalled: set[str]) -> Step:
        """Steps 2-5 of the module doc on the records ``recs``: margins, screens promoted or skipped, unmeasured
        points skipped, the free slots filled (submitted, added to ``in_flight``). Returns the step taken: jobs
        submitted, a wait for a job in flight, or the end (its reason in ``self.stop``)."""
        measured = [m for r in recs.values() if r is not None and (m := measured_point(r)) is not None]
        cal = decide.calibration(recs.values())
        tput_e, mem_e, scr_e = self.errors(recs)
        cov = self.conf.coverage
        mts = margins_by_standing(tput_e, self.conf.throughput_margin, cov)  # nothing skipped before 2 errors
        mm = margin(mem_e, self.conf.memory_margin, cov, one_sided=True)  # a skip needs memory at least
        width = width_floor(widths(measured), cov)
        sm = margin(scr_e, self.conf.screen_margin, cov, need=0)  # a screen is promoted on its floor at first
        if self.reopen(recs, measured):
            recs = self.records()
        promote = self.screens(recs, measured, sm)
        open_points = [p for p in self.points if recs[p.pid] is None and p.pid not in stalled | set(in_flight)]
        guesses = {p.pid: self.predict(p.spec, p.target, cal) for p in open_points}
        stand = {p.pid: decide.standing(p.spec, cal) for p in open_points}
        left = [p for p in open_points if decide.skip_predicted(self.sweep, p, guesses[p.pid], measured,
                                                                mts[stand[p.pid]], mm, width,
                                                                stand[p.pid]) is None]  # fmt: skip
        if open_points and not left:
            self.stop = "no unmeasured point is predicted non-dominated (with margin)"
        patience = self.conf.patience
        if left and patience is not None and self.log.since_change >= patience:
            for p in left:
                decide.skip_stopped(self.sweep, p, guesses[p.pid], patience)
            self.stop, left = f"{patience} full measurement(s) without a frontier change (search.patience)", []
        order = front_order([Guess(p.pid, guesses[p.pid].tokens_per_s_per_device, guesses[p.pid].peak_bytes)
                             for p in left])  # fmt: skip
        slots = self.conf.batch_size
        if self.jobs.concurrent is not None:  # a launcher that runs fewer at once: the rest would wait, undecided
            slots = min(slots, max(1, self.jobs.concurrent))
        step = next_step([p.pid for p in promote], [g.pid for g in order], in_flight, slots)
        if step.submits:
            batch = [self.by_id[pid] for pid in (*step.promote, *step.start)]
            # before any point is measured in full nothing can dominate a screen: every screen would be promoted
            screens = [False] * len(step.promote) + [
                bool(measured) and self.screen(self.by_id[pid], guesses[pid], recs) for pid in step.start
            ]
            preds = {pid: (guesses[pid], stand[pid], mts[stand[pid]]) for pid in step.start}
            by_standing = {k: v for k, v in mts.items() if k != "*"}
            margins = dict(mt=mts["*"], mt_by_standing=by_standing, mm=mm, sm=sm, width=width)
            self.launch(
                batch,
                screens,
                in_flight,
                preds,
                len(step.promote),
                margins,
            )
        return step

    def reopen(self, recs: dict[str, Record | None], measured: list[Any]) -> list[str]:
        """Measure after all the points skipped as tied with a frontier point that a later measurement took off the
        frontier (:func:`sweeper.search.order.surely_dominated`), unless another measured point keeps them off it
        on the bounds they were skipped with: their ``skipped`` record is set aside (``result.<n>.json``) and they
        are open again. Returns their point ids."""
        out = []
        for p in self.points:
            r = recs[p.pid]
            d = (r.search or {}) if r is not None and r.status == "skipped" else {}
            if d.get("decision") not in ("predicted-dominated", "screen-dominated"):
                continue
            upper = d.get("upper_tokens_per_s_per_device")
            low = d.get("mem_low_bytes") if d["decision"] == "predicted-dominated" else d.get("screen_peak_mem_bytes")
            low_end = d.get("low_upper_tokens_per_s_per_device")  # absent from a skip decided before 2026-12-05
            if upper is None or low is None:
                continue
            tie = None if low_end is None else float(low_end)
            if surely_dominated(float(upper), float(low), measured, tie) is not None:
                continue
            self.sweep.set_aside(p.pid)
            self.log.points.setdefault(p.pid, {})["reopened"] = len(self.log.rounds)
            out.append(p.pid)
        if out:
            print(f"search=frontier: {len(out)} skipped point(s) open again (the frontier point they were tied with "
                  f"left the frontier): {' '.join(out)}", flush=True)  # fmt: skip
        return out

    def screens(self, recs: dict[str, Record | None], measured: list[Any], sm: float) -> list[Point]:
        """Decide every ``ok`` screen: the points to promote (returned); the others are skipped (recorded)."""
        promote = []
        for p in self.points:
            r = recs[p.pid]
            if r is None or r.status != "ok" or not r.screen:
                continue
            iv, peak = interval(r), (r.metrics or {}).get("peak_mem_bytes")
            if iv is None or not peak:
                promote.append(p)
                continue
            upper = iv[1] * (1 + sm)
            by = surely_dominated(upper, float(peak), measured)
            if by is None:
                promote.append(p)
            else:
                decide.skip_screen(self.sweep, p, r, upper, sm, by)
        return promote

    def screen(self, p: Point, pred: Any, recs: dict[str, Record | None]) -> bool:
        """Whether ``p`` starts with a screen (``search.screen``: always, never, or auto by the expected saving)."""
        mode = self.conf.screen
        if mode in ("always", "never") or p.spec.timed_window <= self.conf.screen_timed_steps:
            return mode == "always" and p.spec.timed_window > self.conf.screen_timed_steps
        samples = []
        for r in recs.values():
            m = (r.metrics or {}) if r else {}
            if r is not None and r.status == "ok" and r.wall_time_s and m.get("step_time_s_median"):
                spec = PointSpec.from_dict(r.spec)
                samples.append((r.wall_time_s, spec.total_steps, m["step_time_s_median"]))
        # a point the model cannot time yet (its precision's peak unmeasured): the sweep's median step instead
        step = pred.step_time_s or (statistics.median(t for _, _, t in samples) if samples else None)
        saved = None if step is None else (p.spec.timed_window - self.conf.screen_timed_steps) * step
        kinds = [i.get("window") for i in self.log.points.values()]
        promoted = 0  # screens measured in full since
        for pid, info in self.log.points.items():
            r = recs.get(pid)
            promoted += int(info.get("window") == "screen" and r is not None and not r.screen and r.status == "ok")
        return screen_pays(saved, overhead_estimate(samples), promoted, kinds.count("screen"))

    def window_of(self, pid: str) -> str:
        """The window a point's latest job measures, as ``search.json`` logged it at launch (``full`` when unknown)."""
        info = self.log.points.get(pid, {})
        return str(info.get("job") or info.get("window") or "full")

    def launch(
        self,
        batch: list[Point],
        screens: list[bool],
        in_flight: dict[str, str],
        preds: dict[str, Any],
        promoted: int,
        margins: dict[str, Any],
    ) -> None:
        """Log one submission in ``search.json`` (the predictions its new points are launched on, the jobs already
        in flight, the time), submit it, and add its points to ``in_flight`` (point id -> window)."""
        number = len(self.log.rounds) + 1
        for p, s in zip(batch, screens, strict=True):
            info = self.log.points.setdefault(p.pid, {})
            if p.pid in preds:  # what it was launched on: its prediction, the prediction's standing and margin
                pred, standing, mt = preds[p.pid]
                info.update(tokens_per_s_per_device=pred.tokens_per_s_per_device, peak_bytes=pred.peak_bytes,
                            standing=standing, throughput_margin=mt, round=number,
                            window="screen" if s else "full")  # fmt: skip
            info["job"] = "screen" if s else "full"  # its latest job's window (a promotion: full)
        jobs = [
            [*p.overrides, SCREEN_OVERRIDE] if s else list(p.overrides) for p, s in zip(batch, screens, strict=True)
        ]
        busy = sorted(in_flight)
        print(f"search=frontier: launch {number}: {len(jobs)} point(s) ({promoted} promoted, {sum(screens)} screened "
              f"first), {len(busy)} still in flight", flush=True)  # fmt: skip
        self.log.rounds.append({"round": number, "points": [p.pid for p in batch], "screens": sum(screens),
                                "promoted": promoted, "in_flight": busy, "at": time.time(), **margins})  # fmt: skip
        self.log.write(self.sweep)
        self.jobs.submit(jobs, self.job_idx)
        self.job_idx += len(jobs)
        for p, s in zip(batch, screens, strict=True):
            in_flight[p.pid] = "screen" if s else "full"


def run_search(points: list[Point], sweep_dir: str | Path, jobs: Jobs | Callable[..., Any]) -> list[Any]:
    """Run the frontier search over ``points`` (deduplicated by point id, in grid order) with ``jobs``
    (:class:`sweeper.search.jobs.Jobs`, or a Hydra launcher's blocking ``launch(job_overrides, initial_job_idx)``).

    Raises:
        ValueError: an empty grid.
    """
    seen: dict[str, Point] = {}
    for p in points:
        seen.setdefault(p.pid, p)
    if not seen:
        raise ValueError("search=frontier: the grid has no point")
    return Search(list(seen.values()), SweepDir(Path(sweep_dir)), jobs).run()


def grid_points(config_loader: Any, config: Any, job_overrides: list[list[str]]) -> list[Point]:
    """Every point of the grid as a :class:`Point`: composed and validated as the basic sweeper does
    (:func:`sweeper.config.compose.compose_points`), its spec, id (:func:`sweeper.point.lifecycle.identity_of`: the
    id its records are written under) and target (``launcher`` and ``cluster``).

    Raises:
        ValueError: ``search=frontier`` with ``launcher.wait=false`` (the search must see its jobs' records), an
            unknown ``search.screen``, or a ``search.coverage`` outside (0, 1).
        hydra.errors.ConfigCompositionException: an override that does not compose.
    """
    from hydra.core.utils import filter_overrides

    from sweeper.config.compose import compose_points
    from sweeper.config.spec import from_config
    from sweeper.point import preflight
    from sweeper.point.context import SweepContext
    from sweeper.point.lifecycle import identity_of, target_for

    ctx = SweepContext.of(config)
    launcher = ctx.launcher.name
    if launcher != "local" and not ctx.launcher.wait:
        raise ValueError("search=frontier needs launcher.wait=true: it decides on the records of its jobs as they end")
    if str(config.search.screen) not in ("auto", "always", "never"):
        raise ValueError(f"search.screen={config.search.screen!r}: use auto, always or never")
    if not 0 < float(config.search.coverage) < 1:
        raise ValueError(f"search.coverage={config.search.coverage!r}: a fraction between 0 and 1 (0.9: 90 %)")
    specs = [from_config(cfg) for cfg in compose_points(config_loader, config, job_overrides)]
    targets = [target_for(spec, launcher, ctx.cluster) for spec in specs]
    # a point's id is the lifecycle's (identity_of: without the entries the libraries resolve away), the folder its
    # records are written to; the libraries are asked in one go for the points that may restate something
    preflight.refusals([(s, t) for s, t in zip(specs, targets, strict=True) if preflight.may_restate(s)])
    return [
        Point(list(filter_overrides(overrides)), spec, identity_of(spec, target), target)
        for overrides, spec, target in zip(job_overrides, specs, targets, strict=True)
    ]
