"""``search=frontier``: the planner-ordered, successive-halving search over a multirun's grid (docs/search.md).

The Hydra sweeper (:class:`hydra_plugins.sweeper_slurm.SweeperBasicSweeper`) expands the grid as for ``search=grid``
and hands it to :func:`run_search`, which repeats, until a stop rule holds:

1. read every record (the truth: a killed search resumes from them);
2. recalibrate the time model on every ``ok`` record of the sweep, screens included
   (:func:`sweeper.capacity.calibrate.fit_calibration`), and set the margins from the model's own error on this
   sweep (each point's prediction as it was launched, against its measurement: :func:`sweeper.search.order.margin`);
3. decide each ``ok`` screen: promote it to the full window, or skip it when even its upper bound is surely dominated
   by a point measured in full;
4. predict every unmeasured point, skip those predicted not to fit or surely dominated (with the margins), order the
   rest by predicted front (:func:`sweeper.search.order.front_order`) and launch the first ``search.batch_size``
   through the sweep's own launcher (``launcher.launch(batch, initial_job_idx)``, as Hydra's Optuna and Ax sweepers
   do), each as a screen or in full (:func:`sweeper.search.order.screen_pays`).

It stops when no unmeasured point is left that is not skipped, or after ``search.patience`` full measurements with no
frontier change (the rest is skipped, the reason says so). Every point of the grid ends with a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.search import decide
from sweeper.search.order import Guess, front_order, margin, overhead_estimate, screen_pays, surely_dominated
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
    """One frontier search over ``points`` (see the module doc). ``launch(jobs, idx)`` is the Hydra launcher's
    ``launch``; ``sweep`` the sweep directory; ``predictor(spec, target, calibration)`` the model
    (:func:`sweeper.search.decide.guess`; a unit test gives synthetic predictions)."""

    def __init__(self, points: list[Point], sweep: SweepDir, launch: Any, predictor: Any = decide.guess) -> None:
        self.points = points
        self.predict = predictor
        self.sweep = sweep.resolved()
        self.launch_fn = launch
        self.by_id = {p.pid: p for p in points}
        self.job_idx = 0
        self.log = Log.read(self.sweep)
        self.log.grid = len(points)
        self.conf = points[0].spec.search

    # -- reading -----------------------------------------------------------------------------------------------

    def records(self) -> dict[str, Record | None]:
        """Each point's current record (None: none, or not final)."""
        out: dict[str, Record | None] = {}
        for p in self.points:
            status = self.sweep.final_status(p.pid)
            out[p.pid] = self.sweep.read_record(p.pid) if status else None
        return out

    def errors(self, recs: dict[str, Record | None]) -> tuple[list[float], list[float], list[float]]:
        """Out-of-sample relative errors, oldest launch first: throughput (full-window ok points), memory (any
        record with a peak), screens (full-window high over the screen's high, minus 1)."""
        tput, mem, scr = [], [], []
        for pid, info in sorted(self.log.points.items(), key=lambda kv: kv[1].get("round", 0)):
            r = recs.get(pid)
            if r is None or r.status != "ok":
                continue
            m = r.metrics or {}
            if info.get("peak_bytes") and m.get("peak_mem_bytes"):
                mem.append(m["peak_mem_bytes"] / info["peak_bytes"] - 1)
            if r.screen:
                continue
            if info.get("tokens_per_s_per_device") and m.get("tokens_per_s_per_device"):
                tput.append(m["tokens_per_s_per_device"] / info["tokens_per_s_per_device"] - 1)
            full = interval(r)
            screens = [h for h in history(self.sweep, pid) if h.screen and h.status == "ok"]
            if full and screens and (iv := interval(screens[-1])):
                scr.append(max(0.0, full[1] / iv[1] - 1))
        return tput, mem, scr

    # -- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> list[Any]:
        """Search until a stop rule holds; returns the launchers' job returns, batch by batch."""
        returns: list[Any] = []
        rnd = len(self.log.rounds)
        stalled: set[str] = set()
        while True:
            recs = self.records()
            measured = [m for r in recs.values() if r is not None and (m := measured_point(r)) is not None]
            cal = decide.calibration(recs.values())
            tput_e, mem_e, scr_e = self.errors(recs)
            mt = margin(tput_e, self.conf.throughput_margin, need=2)  # no skip on throughput before 2 errors
            mm = margin(mem_e, self.conf.memory_margin)
            sm = margin(scr_e, self.conf.screen_margin, need=0)  # a screen is promoted on its floor at first
            promote = self.screens(recs, measured, sm)
            if promote:
                rnd += 1
                returns.append(self.launch(promote, [False] * len(promote), rnd, measured, stalled, {}))
                continue
            open_points = [p for p in self.points if recs[p.pid] is None and p.pid not in stalled]
            if not open_points:
                self.log.stop = "every point has a record"
                break
            guesses = {p.pid: self.predict(p.spec, p.target, cal) for p in open_points}
            left = []
            for p in open_points:
                pred = guesses[p.pid]
                skipped = decide.skip_predicted(self.sweep, p, pred, measured, mt, mm)
                if skipped is None:
                    left.append(p)
            if not left:
                self.log.stop = "no unmeasured point is predicted non-dominated (with margin)"
                break
            patience = self.conf.patience
            if patience is not None and self.log.since_change >= patience:
                for p in left:
                    decide.skip_stopped(self.sweep, p, guesses[p.pid], patience)
                self.log.stop = f"{patience} full measurement(s) without a frontier change (search.patience)"
                break
            order = front_order([Guess(p.pid, guesses[p.pid].tokens_per_s_per_device, guesses[p.pid].peak_bytes)
                                 for p in left])  # fmt: skip
            batch = [self.by_id[g.pid] for g in order[: max(1, self.conf.batch_size)]]
            # before any point is measured in full nothing can dominate a screen: every screen would be promoted
            screens = [bool(measured) and self.screen(p, guesses[p.pid], recs) for p in batch]
            rnd += 1
            preds = {p.pid: guesses[p.pid] for p in batch}
            returns.append(self.launch(batch, screens, rnd, measured, stalled, preds, dict(mt=mt, mm=mm, sm=sm)))
        self.log.cost = decide.cost(
            self.sweep, self.points, self.records(), decide.calibration(self.records().values())
        )
        self.log.write(self.sweep)
        print(f"search=frontier: stopped: {self.log.stop}; {decide.cost_line(self.log.cost)}", flush=True)
        return returns

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
        step = pred.step_time_s
        saved = None if step is None else (p.spec.timed_window - self.conf.screen_timed_steps) * step
        samples = []
        for r in recs.values():
            m = (r.metrics or {}) if r else {}
            if r is not None and r.status == "ok" and r.wall_time_s and m.get("step_time_s_median"):
                spec = PointSpec.from_dict(r.spec)
                samples.append((r.wall_time_s, spec.total_steps, m["step_time_s_median"]))
        kinds = [i.get("window") for i in self.log.points.values()]
        promoted = sum(1 for pid, i in self.log.points.items() if i.get("window") == "screen" and
                       recs.get(pid) is not None and not recs[pid].screen and recs[pid].status == "ok")  # type: ignore[union-attr]  # fmt: skip
        return screen_pays(saved, overhead_estimate(samples), promoted, kinds.count("screen"))

    def launch(
        self,
        batch: list[Point],
        screens: list[bool],
        rnd: int,
        measured: list[Any],
        stalled: set[str],
        preds: dict[str, Any],
        margins: dict[str, float] | None = None,
    ) -> Any:
        """Launch one batch through the Hydra launcher, log it, and count full measurements without a frontier
        change (``search.patience``)."""
        before = frontier_ids(measured)
        for p, s in zip(batch, screens, strict=True):
            info = self.log.points.setdefault(p.pid, {})
            if p.pid in preds:
                pred = preds[p.pid]
                info.update(tokens_per_s_per_device=pred.tokens_per_s_per_device, peak_bytes=pred.peak_bytes,
                            round=rnd, window="screen" if s else "full")  # fmt: skip
        jobs = [
            [*p.overrides, SCREEN_OVERRIDE] if s else list(p.overrides) for p, s in zip(batch, screens, strict=True)
        ]
        kinds = f"{sum(screens)} screened first" if any(screens) else "full window"
        print(f"search=frontier: round {rnd}: {len(jobs)} point(s), {kinds}", flush=True)
        self.log.rounds.append({"round": rnd, "points": [p.pid for p in batch], "screens": sum(screens),
                                **(margins or {})})  # fmt: skip
        self.log.write(self.sweep)
        out = self.launch_fn(jobs, self.job_idx)
        self.job_idx += len(jobs)
        recs = self.records()
        for p in batch:
            if recs[p.pid] is None:
                stalled.add(p.pid)  # no final record (still pending on SLURM, or not written): never relaunched here
        fulls = sum(1 for p, s in zip(batch, screens, strict=True) if not s)
        after = frontier_ids(m for r in recs.values() if r is not None and (m := measured_point(r)) is not None)
        self.log.since_change = 0 if after != before else self.log.since_change + fulls
        self.log.write(self.sweep)
        return out


def run_search(points: list[Point], sweep_dir: str | Path, launch: Any) -> list[Any]:
    """Run the frontier search over ``points`` (deduplicated by point id, in grid order) with ``launch``, the Hydra
    launcher's ``launch(job_overrides, initial_job_idx)``.

    Raises:
        ValueError: an empty grid.
    """
    seen: dict[str, Point] = {}
    for p in points:
        seen.setdefault(p.pid, p)
    if not seen:
        raise ValueError("search=frontier: the grid has no point")
    return Search(list(seen.values()), SweepDir(Path(sweep_dir)), launch).run()


def grid_points(config_loader: Any, config: Any, job_overrides: list[list[str]]) -> list[Point]:
    """Every point of the grid as a :class:`Point`: composed and validated as the basic sweeper does
    (:func:`sweeper.config.compose.compose_points`), its spec, id and target (``launcher`` and ``cluster``).

    Raises:
        ValueError: ``search=frontier`` with ``launcher.wait=false`` (the search must see each batch's records), or
            an unknown ``search.screen``.
        hydra.errors.ConfigCompositionException: an override that does not compose.
    """
    from hydra.core.utils import filter_overrides

    from sweeper.config.compose import compose_points, plain_node
    from sweeper.config.spec import from_config
    from sweeper.point.identity import point_id
    from sweeper.point.lifecycle import target_for

    launcher = str(config.launcher.name)
    if launcher != "local" and not config.launcher.wait:
        raise ValueError("search=frontier needs launcher.wait=true: each round decides on the records of the last")
    if str(config.search.screen) not in ("auto", "always", "never"):
        raise ValueError(f"search.screen={config.search.screen!r}: use auto, always or never")
    cluster = plain_node(config.cluster)
    out = []
    for overrides, cfg in zip(job_overrides, compose_points(config_loader, config, job_overrides), strict=True):
        spec = from_config(cfg)
        out.append(Point(list(filter_overrides(overrides)), spec, point_id(spec), target_for(spec, launcher, cluster)))
    return out
