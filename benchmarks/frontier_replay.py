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
against the whole grid's.

    python benchmarks/frontier_replay.py GRID_DIR [GRID_DIR ...] [--cache CACHE_DIR ...]

``--cache``: the ``SWEEPER_CACHE_DIR`` each grid ran with (``frontier_search.py``'s ``cache<i>`` beside
``grid<i>``, found by default): the model reads this host's gloo cost from it.
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


def replay(grid: Path, keys: dict[str, Any] | None = None) -> tuple[float, float, int]:
    """Run the search over ``grid``'s records (``keys``: ``search.*`` values other than the defaults); print it;
    return (recovery, point-seconds ratio, points run)."""
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
    Search(points, SweepDir(out), jobs).run()
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
    args = ap.parse_args()
    import yaml

    keys = {k: yaml.safe_load(v) for k, _, v in (kv.partition("=") for kv in args.search)}
    caches = args.cache or [g.parent / g.name.replace("grid", "cache") for g in args.grids]
    results = []
    for grid, cache in zip(args.grids, caches, strict=True):
        if cache.is_dir():
            os.environ["SWEEPER_CACHE_DIR"] = str(cache)
        results.append(replay(grid, keys))
    print(f"summary over {len(results)} grid(s): recovery {[f'{r:.0%}' for r, _, _ in results]}, point-seconds "
          f"ratio {[f'{x:.2f}' for _, x, _ in results]}, points run {[k for _, _, k in results]}")  # fmt: skip


if __name__ == "__main__":
    main()
