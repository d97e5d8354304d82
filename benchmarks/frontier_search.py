"""``search=frontier`` against the full grid, side by side: does the search recover the full grid's frontier, and at
what share of the point-seconds? (issue 21)

Grid: ``benchmarks/plan_time.py``'s, the grid on which the time model's ranking is benchmarked (the search stands
on that ranking): zero {0, 2} x fsdp {none, full_shard} x gc {off, on} x precision {fp32, bf16} x
per_device_batch_size {2, 8} on the tiny model, 2 real gloo ranks: 32 points, of which the 8 with both ZeRO-2 and
FSDP are refused by the gate before anything runs (``invalid``, no cost), so 24 measured ones: DDP, FSDP and
DeepSpeed ZeRO-2. Run through the product (``python -m sweeper -m ...``) both ways in each repeat, the order of the
two alternating between repeats (the machine is shared: neither always runs first). Each repeat uses a fresh
``SWEEPER_CACHE_DIR`` shared by its two sweeps (the matmul peaks, gloo's cost and the ZeRO probe are measured once
per repeat, by whichever runs first). Until 2026-12-05 the grid was fsdp {none, full_shard, shard_grad_op} x gc x
precision x batch {2, 8}: on 2 CPU ranks full_shard and shard_grad_op run within a few % of each other, so most of
its points were tied with a frontier point and no search could skip them (``benchmarks/README.md``).

Printed per repeat: both frontiers (point ids and axes), the frontier-recovery rate, the point-seconds each way
(every record's ``wall_time_s``, set-aside screens included) and their ratio, the load average.

**Recovery** counts ties as the report does: a frontier point P of the full grid is recovered when the search's
frontier holds P, or holds a point the full grid's report lists as tied with P (``frontier_tie_with``: the two
throughput intervals overlap on the same memory, so the measurement cannot tell them apart).

Goal (issue 21, "Done when"): recovery 100 % in every repeat with at most half the point-seconds. With more than
one repeat the summary also prints the noise floor of that rate: how often one full-grid run recovers another's
frontier (on this 2-core machine, 47 % of 240 ordered pairs of 16 runs of this grid on 2026-12-05): a recovery
below 100 % is then the measurement's, unless the search skipped the point (its record says ``skipped``);
``benchmarks/frontier_replay.py`` judges the search's decisions alone, on one set of measurements.

    python benchmarks/frontier_search.py                 # 2 repeats (about 5 min each on 2 quiet cores)
    python benchmarks/frontier_search.py --repeats 3
    python benchmarks/frontier_search.py --reuse GRID_DIR SEARCH_DIR [GRID_DIR SEARCH_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_time import GRID, STEPS  # one definition of the benchmark grid

AXES = ["zero", "fsdp", "gc", "precision", "per_device_batch_size"]


def _sweep(out: Path, cache: Path, search: bool) -> Path:
    env = {**os.environ, "SWEEPER_CACHE_DIR": str(cache)}
    extra = ["search=frontier"] if search else []
    cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *GRID, *STEPS, *extra]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return out


def point_seconds(sweep_dir: Path) -> float:
    """Every record's ``wall_time_s`` in the sweep, earlier records set aside (``result.<n>.json``) included."""
    total = 0.0
    for path in Path(sweep_dir, "points").glob("*/result*.json"):
        total += json.loads(path.read_text()).get("wall_time_s") or 0.0
    return total


def frontier(sweep_dir: Path):
    """The report's table of the sweep (rebuilt from the records), its frontier rows and their ties."""
    from sweeper.report import build_report
    from sweeper.results.row import read_results_csv

    build_report(sweep_dir)
    df = read_results_csv(Path(sweep_dir) / "results.csv")
    return df, df[df["on_frontier"].astype(bool)]


def recovery(full_front, search_front) -> tuple[int, int]:
    """(recovered, frontier points of the full grid), ties counted (module doc)."""
    got = set(search_front["point_id"].astype(str))
    hit = 0
    for _, row in full_front.iterrows():
        ties = set(str(row.get("frontier_tie_with") or "").split()) - {"", "nan", "None"}
        hit += str(row["point_id"]) in got or bool(ties & got)
    return hit, len(full_front)


def _show(label: str, front) -> None:
    print(f"  {label} frontier ({len(front)}):")
    for _, r in front.sort_values("peak_mem_bytes").iterrows():
        axes = " ".join(f"{a}={r[a]}" for a in AXES)
        print(f"    {r['point_id']}  {axes}  {r['tokens_per_s_per_device']:8.0f} tokens/s/device  "
              f"{r['peak_mem_bytes'] / 2**20:6.2f} MiB")  # fmt: skip


def compare(i: int, grid_dir: Path, search_dir: Path) -> tuple[float, float]:
    """Print one repeat; returns (recovery rate, point-seconds ratio)."""
    _, gfront = frontier(grid_dir)
    sdf, sfront = frontier(search_dir)
    hit, n = recovery(gfront, sfront)
    gs, ss = point_seconds(grid_dir), point_seconds(search_dir)
    counts = sdf["status"].value_counts().to_dict()
    log = json.loads(Path(search_dir, "search.json").read_text())
    print(f"repeat {i}: grid {grid_dir}  search {search_dir}")
    _show("full grid", gfront)
    _show("search", sfront)
    print(f"  search records: {counts}; stop: {log.get('stop')}")
    print(f"  recovery: {hit}/{n} = {hit / n:.0%}")
    print(f"  point-seconds: grid {gs:,.0f}  search {ss:,.0f}  ratio {ss / gs:.2f}  (load average {os.getloadavg()})")
    return hit / n, ss / gs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--reuse", nargs="*", type=Path, help="GRID_DIR SEARCH_DIR pairs already run")
    args = ap.parse_args()
    pairs = list(zip(args.reuse[::2], args.reuse[1::2], strict=True)) if args.reuse else []
    root = Path(tempfile.mkdtemp(prefix="frontier-search-"))
    for i in range(len(pairs), args.repeats if not args.reuse else len(pairs)):
        cache = root / f"cache{i}"
        g, s = root / f"grid{i}", root / f"search{i}"
        for search in (False, True) if i % 2 == 0 else (True, False):
            _sweep(s if search else g, cache, search)
        pairs.append((g, s))
    results = [compare(i, g, s) for i, (g, s) in enumerate(pairs)]
    print(f"summary over {len(results)} repeat(s): recovery {[f'{r:.0%}' for r, _ in results]}, "
          f"point-seconds ratio {[f'{x:.2f}' for _, x in results]}")  # fmt: skip
    if len(pairs) > 1:
        print(f"the noise floor: {baseline([g for g, _ in pairs])}")


def baseline(grids: list[Path]) -> str:
    """How often one full-grid run recovers another's frontier (the same rule, ties counted the same way): what
    the measurement's run-to-run noise alone does to the recovery rate, whatever decides which points to run."""
    import itertools

    fronts = {g: frontier(g)[1] for g in grids}
    rates = [hit / n for a, b in itertools.permutations(grids, 2) for hit, n in [recovery(fronts[a], fronts[b])]]
    full = sum(r == 1.0 for r in rates)
    return (f"a full-grid run recovers another full-grid run's frontier 100 % in {full} of {len(rates)} ordered "
            f"pairs (mean {sum(rates) / len(rates):.0%}, least {min(rates):.0%})")  # fmt: skip


if __name__ == "__main__":
    main()
