"""Is the frontier of the default 2x2 the same from run to run? A fixed timed window against ``timed_steps=auto``.

Runs ``python -m sweeper -m fsdp=none,full_shard gc=true,false wandb=off`` ``--repeats`` times with a fixed
``timed_steps`` (default 8) and ``--repeats`` times with ``timed_steps=auto``, interleaved (fixed, auto, fixed, auto,
...: the shared machine's noise hits both modes alike), each in its own ``hydra.sweep.dir`` under a temporary
directory, and prints:

* per run: the verdict of each point from ``results.csv``: ``frontier`` (``on_frontier``, tied with no one),
  ``tied`` (on the frontier, ``frontier_tie_with`` not empty) or ``dominated`` (not on it), with its timed steps;
* per mode: over all pairs of runs, how often the verdicts of all four points agree, and how often a single
  point's verdict agrees (pairs x points);
* for ``auto``: the median, min and max of the timed steps used (``timed_steps_measured``) and how many points
  stopped on the interval (``timed_stop = ci``) or at the cap;
* per mode: the median of the points' ``step_time_ci95_rel`` (half-width of the median's 95 % interval / median);
* per mode, when results.csv has the column: the median and max of the points' ``runqueue_wait_frac`` (the share of
  the timed window a rank's training thread waited for a CPU, docs/measurement.md "Contention") and how many points were
  ``contended``;
* the wall time of each run (``time.perf_counter`` around the command, seconds) and its median per mode.

Points are matched across runs by (fsdp, gc): ``timed_steps=auto`` is part of a point's identity, so its point ids
differ from the fixed runs'.

    python benchmarks/frontier_stability.py                        # 3 + 3 runs, about 10-20 min on 2 cores
    python benchmarks/frontier_stability.py --repeats 2 --timed-steps 8 --overrides seq_len=64 timing.ci_rel=0.05
    python benchmarks/frontier_stability.py --reuse DIR   # summarise the sweeps a --keep DIR run left (no wall times
                                                          # unless that run wrote DIR/walls.json)
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["-m", "fsdp=none,full_shard", "gc=true,false", "wandb=off"]


def verdicts(sweep_dir: Path) -> dict[tuple[str, str], dict[str, str]]:
    """(fsdp, gc) -> ``verdict`` (frontier / tied / dominated / the status when not ok), ``steps`` (timed steps
    measured), ``stop`` (``timed_stop``), ``tps`` (tokens/s per device), ``ci_rel`` (``step_time_ci95_rel``),
    ``rq`` (``runqueue_wait_frac``) and ``contended``, from ``results.csv`` ("" when a column is absent)."""
    out = {}
    with (sweep_dir / "results.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["status"] != "ok":
                verdict = row["status"]
            elif row["on_frontier"] in ("True", "true", "1"):
                verdict = "tied" if row.get("frontier_tie_with") else "frontier"
            else:
                verdict = "dominated"
            out[(row["fsdp"], row["gc"])] = {
                "verdict": verdict,
                "steps": row.get("timed_steps_measured", ""),
                "stop": row.get("timed_stop", ""),
                "tps": row.get("tokens_per_s_per_device", ""),
                "ci_rel": row.get("step_time_ci95_rel", ""),
                "rq": row.get("runqueue_wait_frac", ""),
                "contended": row.get("contended", ""),
            }
    return out


def run_once(root: Path, name: str, steps: str, overrides: list[str]) -> tuple[dict, float]:
    """One 2x2 sweep in ``root/name``; returns its verdicts and wall time (s)."""
    sweep_dir = root / name
    cmd = [sys.executable, "-m", "sweeper", *GRID, f"timed_steps={steps}", f"hydra.sweep.dir={sweep_dir}", *overrides]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not (sweep_dir / "results.csv").is_file():
        sys.exit(f"{name}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}")
    return verdicts(sweep_dir), wall


def agreement(runs: list[dict]) -> tuple[int, int, int, int]:
    """(pairs whose verdicts all agree, pairs, point-pairs that agree, point-pairs) over all pairs of ``runs``."""
    whole = points = n_points = 0
    pairs = list(itertools.combinations(runs, 2))
    for a, b in pairs:
        keys = sorted(set(a) | set(b))
        same = [a.get(k, {}).get("verdict") == b.get(k, {}).get("verdict") for k in keys]
        whole += all(same)
        points += sum(same)
        n_points += len(same)
    return whole, len(pairs), points, n_points


def contention(runs: list[dict]) -> str:
    """`` runqueue_wait_frac median X %, max Y % (N of M points contended);`` over every point of ``runs``, or
    ``""`` when no point has the column (results.csv of a version before it)."""
    points = [x for run in runs for x in run.values()]
    fracs = [float(x["rq"]) for x in points if x.get("rq")]
    if not fracs:
        return ""
    n = sum(x.get("contended") in ("True", "true", "1") for x in points)
    return (
        f" runqueue_wait_frac median {statistics.median(fracs) * 100:.1f} %, max {max(fracs) * 100:.1f} % "
        f"({n} of {len(points)} points contended);"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print it (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="runs per mode (default 3)")
    p.add_argument("--timed-steps", default="8", help="the fixed mode's timed_steps (default 8)")
    p.add_argument("--overrides", nargs="*", default=[], help="more overrides for every run (both modes)")
    p.add_argument("--keep", type=Path, default=None, help="write the sweeps here instead of a temporary directory")
    p.add_argument("--reuse", type=Path, default=None, help="summarise the sweeps of an earlier --keep DIR, no runs")
    args = p.parse_args(argv)
    modes = {"fixed": args.timed_steps, "auto": "auto"}
    results: dict[str, list[dict]] = {m: [] for m in modes}
    walls: dict[str, list[float]] = {m: [] for m in modes}

    def show(mode: str, i: int, v: dict, wall: float | None) -> None:
        cells = "  ".join(
            f"fsdp={k[0]} gc={k[1]}: {x['verdict']} ({x['steps']} steps{', ' + x['stop'] if x['stop'] else ''})"
            for k, x in sorted(v.items())
        )
        print(f"{mode:5} run {i + 1}  {'' if wall is None else f'{wall:6.1f} s'}  {cells}", flush=True)

    if args.reuse:
        saved = json.loads((args.reuse / "walls.json").read_text()) if (args.reuse / "walls.json").is_file() else {}
        for i in itertools.count():
            if not all((args.reuse / f"{m}_{i}" / "results.csv").is_file() for m in modes):
                break
            for mode in modes:
                results[mode].append(verdicts(args.reuse / f"{mode}_{i}"))
                wall = saved.get(mode, [])[i] if i < len(saved.get(mode, [])) else None
                if wall is not None:
                    walls[mode].append(wall)
                show(mode, i, results[mode][-1], wall)
    else:
        with tempfile.TemporaryDirectory(prefix="frontier_stability_") as tmp:
            root = args.keep or Path(tmp)
            root.mkdir(parents=True, exist_ok=True)
            for i in range(args.repeats):
                for mode, steps in modes.items():
                    v, wall = run_once(root, f"{mode}_{i}", steps, args.overrides)
                    results[mode].append(v)
                    walls[mode].append(wall)
                    show(mode, i, v, wall)
            (root / "walls.json").write_text(json.dumps(walls))
    print()
    for mode in modes:
        whole, pairs, points, n_points = agreement(results[mode])
        rels = [float(x["ci_rel"]) for run in results[mode] for x in run.values() if x["ci_rel"]]
        wall = (
            f"wall median {statistics.median(walls[mode]):.1f} s "
            f"(min {min(walls[mode]):.1f}, max {max(walls[mode]):.1f})"
            if walls[mode]
            else "wall times not recorded"
        )
        print(
            f"{mode:5} (timed_steps={modes[mode]}): all four verdicts agree in {whole}/{pairs} pairs of runs; "
            f"single verdicts agree in {points}/{n_points} point-pairs; median step_time_ci95_rel "
            f"{statistics.median(rels) * 100 if rels else float('nan'):.1f} %;{contention(results[mode])} {wall}"
        )
    steps = [int(x["steps"]) for run in results["auto"] for x in run.values() if x["steps"]]
    stops = [x["stop"] for run in results["auto"] for x in run.values()]
    if steps:
        print(
            f"auto timed steps: median {statistics.median(steps):g}, min {min(steps)}, max {max(steps)} over "
            f"{len(steps)} points; stopped on the interval: {stops.count('ci')}, at the cap: {stops.count('cap')}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
