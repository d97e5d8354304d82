"""Replay ``search=frontier``'s decisions on a full grid already measured: which points would the search have run,
and would it have found that grid's frontier, with no second measurement in between? (issue 21)

``benchmarks/frontier_search.py`` compares two sweeps run one after the other, so its recovery mixes the search's
decisions with the run-to-run noise of every point. This replay isolates the decisions: the real search
(:class:`sweeper.search.driver.Search`, the real time model, calibration and margins) runs over the grid's points,
and each job it submits is answered with the grid's own record of that point (copied into a fresh sweep
directory). Each point runs with today's ``search=frontier`` defaults (:class:`sweeper.config.sections.SearchConfig`),
not the ``search.*`` keys the grid recorded (budgets, not identity). A screen job is answered with the grid record
cut to its first ``search.screen_timed_steps`` timed steps (their median and [min, max] as the interval, the wall
time less the timed steps left out); its promotion with the full record.

Printed per grid: the grid's frontier and the search's (the report's rule, ties counted as in
``frontier_search.py``), the points run, and the point-seconds (the grid's own ``wall_time_s`` of each point run)
against the whole grid's; then how far a point's throughput moves between the grids given (:func:`spread`).

    python benchmarks/frontier_replay.py GRID_DIR [GRID_DIR ...] [--cache CACHE_DIR ...]

``--cache``: the ``SWEEPER_CACHE_DIR`` each grid ran with (``frontier_search.py``'s ``cache<i>`` beside
``grid<i>``, found by default): the model reads this host's gloo cost from it.

Two variants say what the search's rule costs by itself, whatever the model (the product has neither):

- ``--perfect``: every point is predicted with its own measurement from the grid (tokens/s per device and peak
  bytes): a model of no error, so every leave-one-out error is 0 and each margin sits at its floor once its
  standing has 2 errors;
- ``--margins-known`` (with ``--perfect``): every standing's margin is its floor from the first measurement on
  (as if the model's error were known before the sweep): what the skip rule, the order and the margin floors cost
  on that grid, and the least any model could cost with them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frontier_search import frontier, point_seconds, recovery


class ReplayJobs:
    """:class:`sweeper.search.jobs.Jobs` answering each job with the measured grid's record of its point."""

    concurrent = 1

    def __init__(self, grid: Path, sweep: Path) -> None:
        self.grid, self.sweep = grid, sweep
        self.returns: list[Any] = []
        self.ran: list[str] = []

    def running(self, point_ids: Collection[str]) -> set[str]:
        return set()

    def submit(self, job_overrides: list[list[str]], initial_job_idx: int) -> None:
        from sweeper.results.sweepdir import SweepDir

        sweep = SweepDir(self.sweep)
        for overrides in job_overrides:
            pid = self.by_overrides[tuple(o for o in overrides if not o.startswith("search.window="))]
            dest = self.sweep / "points" / pid
            dest.mkdir(parents=True, exist_ok=True)
            if sweep.final_status(pid):
                sweep.set_aside(pid)  # a promoted screen, as lifecycle.begin does
            source = self.grid / "points" / pid / "result.json"
            if "search.window=screen" in overrides:
                (dest / "result.json").write_text(json.dumps(screen_of(json.loads(source.read_text()))))
            else:
                shutil.copy(source, dest / "result.json")
            self.ran.append(pid)

    def wait(self, point_ids: Collection[str]) -> set[str]:
        return set(point_ids)


def screen_of(record: dict[str, Any]) -> dict[str, Any]:
    """The grid record of a point cut to a screen: its first ``search.screen_timed_steps`` timed steps."""
    import statistics

    series, m = record["series"], dict(record["metrics"])
    n = int(record["spec"].get("search", {}).get("screen_timed_steps", 3))
    timed = [t for t, w in zip(series["step_time_s"], series["window"], strict=True) if w == "timed"]
    med = statistics.median(timed[:n])
    for key in ("tokens_per_s", "tokens_per_s_per_device", "samples_per_s"):
        if m.get(key):
            m[key] = m[key] * m["step_time_s_median"] / med
    m.update(step_time_s_median=med, step_time_s_ci95_low=min(timed[:n]), step_time_s_ci95_high=max(timed[:n]),
             timed_steps=n)  # fmt: skip
    spec = {**record["spec"], "search": {**record["spec"].get("search", {}), "window": "screen"}}
    wall = (record.get("wall_time_s") or 0.0) - sum(timed[n:])
    return {**record, "metrics": m, "spec": spec, "wall_time_s": wall}


def perfect(grid: Path) -> Any:
    """A predictor that knows ``grid``: each point's own measured tokens/s per device and peak bytes (the search
    with a model of no error: what the skip rule and its margin floors cost by themselves)."""
    from sweeper.capacity.predict import Prediction
    from sweeper.point.lifecycle import identity_of
    from sweeper.results.record import read_record

    truth = {}
    for path in grid.glob("points/*/result.json"):
        r = read_record(path)
        m = r.metrics or {}
        truth[r.point_id] = Prediction(
            tokens_per_s_per_device=m.get("tokens_per_s_per_device"),
            peak_bytes=m.get("peak_mem_bytes"),
            step_time_s=m.get("step_time_s_median"),
        )

    def predict(spec: Any, target: Any, cal: Any) -> Any:
        return truth.get(identity_of(spec)) or Prediction(note="not measured in the grid")

    return predict


def spread(grids: list[Path]) -> str:
    """How far a point's tokens/s per device moves from run to run: over the points measured ``ok`` in at least two
    of ``grids`` (the same point id), the percentiles of |measured / that point's median over the grids − 1|, the
    error no model of the point can go under on this machine."""
    import statistics

    from sweeper.results.record import read_record

    by: dict[str, list[float]] = {}
    for grid in grids:
        for path in grid.glob("points/*/result.json"):
            r = read_record(path)
            if r.status == "ok" and (t := (r.metrics or {}).get("tokens_per_s_per_device")):
                by.setdefault(r.point_id, []).append(float(t))
    devs = sorted(abs(x / statistics.median(xs) - 1) for xs in by.values() if len(xs) >= 2 for x in xs)
    if len(devs) < 10:
        return "run-to-run spread: fewer than 10 repeated measurements"
    q = statistics.quantiles(devs, n=20, method="inclusive")
    return (f"run-to-run spread of tokens/s per device over {len(devs)} measurements of "
            f"{sum(len(xs) >= 2 for xs in by.values())} points: median {q[9]:.1%}, p90 {q[17]:.1%}, "
            f"p95 {q[18]:.1%}, largest {devs[-1]:.1%}")  # fmt: skip


def replay(grid: Path, keys: dict[str, Any] | None = None, oracle: bool = False) -> tuple[float, float, int]:
    """Run the search over ``grid``'s records (``keys``: ``search.*`` values other than the defaults; ``oracle``:
    :func:`perfect` predictions); print it; return (recovery, point-seconds ratio, points run)."""
    from sweeper.config.sections import SearchConfig
    from sweeper.config.spec import PointSpec
    from sweeper.point.lifecycle import target_for
    from sweeper.results.record import read_record
    from sweeper.results.sweepdir import SweepDir
    from sweeper.search.driver import Point, Search

    out = Path(tempfile.mkdtemp(prefix="frontier-replay-"))
    jobs = ReplayJobs(grid, out)
    points, by_overrides = [], {}
    for path in sorted(grid.glob("points/*/result.json")):
        r = read_record(path)
        # the search as it is today: its keys' defaults, not those the grid recorded when it ran (budgets only)
        search = SearchConfig(**{"name": "frontier", **(keys or {})})
        spec = dataclasses.replace(PointSpec.from_dict(r.spec), search=search)
        overrides = [str(o) for o in r.overrides]
        points.append(Point(overrides, spec, r.point_id, target_for(spec, "local", None)))
        by_overrides[tuple(overrides)] = r.point_id
    jobs.by_overrides = by_overrides  # type: ignore[attr-defined]
    Search(points, SweepDir(out), jobs, **({"predictor": perfect(grid)} if oracle else {})).run()
    _, gfront = frontier(grid)
    _, sfront = frontier(out)
    hit, n = recovery(gfront, sfront)
    total = point_seconds(grid)
    spent = point_seconds(out)
    print(f"{grid}: replayed in {out}")
    print(f"  grid frontier   {sorted(gfront['point_id'])}")
    print(f"  search frontier {sorted(sfront['point_id'])}")
    print(f"  ran {len(set(jobs.ran))} of {len(points)} points; recovery {hit}/{n}; point-seconds ratio "
          f"{spent / total:.2f}")  # fmt: skip
    return hit / n, spent / total, len(set(jobs.ran))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grids", nargs="+", type=Path)
    ap.add_argument("--cache", nargs="*", type=Path)
    say = "search.<KEY> values other than the defaults (YAML values: patience=4, coverage=0.8)"
    ap.add_argument("--search", nargs="*", default=[], metavar="KEY=VALUE", help=say)
    ap.add_argument("--perfect", action="store_true", help="predict each point with its own measurement (no error)")
    ap.add_argument("--margins-known", action="store_true", help="every margin at its floor from the start")
    args = ap.parse_args()
    import yaml

    keys = {k: yaml.safe_load(v) for k, _, v in (kv.partition("=") for kv in args.search)}
    caches = args.cache or [g.parent / g.name.replace("grid", "cache") for g in args.grids]
    if args.margins_known:
        from sweeper.search import driver, order

        # every standing holds its floor from the first measurement on (module doc): no error count needed
        driver.margins_by_standing = lambda errors, floor, coverage=0.9, need=2: order.margins_by_standing(
            errors, floor, coverage, 0
        )
    results = []
    for grid, cache in zip(args.grids, caches, strict=True):
        if cache.is_dir():
            os.environ["SWEEPER_CACHE_DIR"] = str(cache)
        results.append(replay(grid, keys, args.perfect))
    print(f"summary over {len(results)} grid(s): recovery {[f'{r:.0%}' for r, _, _ in results]}, point-seconds "
          f"ratio {[f'{x:.2f}' for _, x, _ in results]}, points run {[k for _, _, k in results]}")  # fmt: skip
    print(spread(args.grids))


if __name__ == "__main__":
    main()
