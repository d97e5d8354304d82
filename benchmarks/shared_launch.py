"""A grid run both ways in one run: every point's ranks fresh under torchrun (``SWEEPER_RANK_START=exec``, one
launch per point with its own imports) against ranks forked from the warm pre-flight worker
(``SWEEPER_RANK_START=fork``: every CPU point forked, the libraries imported once per sweep; sweeper's default forks
plain data-parallel points only); the wall time, the point-seconds and each point's numbers side by side.

The two ways alternate (exec, fork, fork, exec, ...) so that a drift in the machine's load hits both. Per point:
tokens/s per device (median step), its 95 % interval's relative half-width, peak tensor bytes (MemTracker on CPU)
and the first loss; "within noise" says whether the two medians' intervals overlap. Point-seconds: the sum of the
records' ``wall_time_s`` (the ranks' launch to the record).

    python benchmarks/shared_launch.py                       # the default 2x2 grid (fsdp x gc), 2 repeats
    python benchmarks/shared_launch.py --grid seed=range(0,12) --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_GRID = ["fsdp=none,full_shard", "gc=true,false"]
WAYS = ("exec", "fork")


def run_grid(grid: list[str], way: str) -> dict:
    """One multirun of ``grid`` with ``SWEEPER_RANK_START=way``: wall time (s) and the records by point id."""
    env = {**os.environ, "SWEEPER_RANK_START": way}
    with tempfile.TemporaryDirectory(prefix=f"shared_{way}_") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "sweeper", "-m", *grid], cwd=tmp, env=env, capture_output=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            sys.exit(f"{way}: sweep failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')[-3000:]}")
        records = {}
        for path in Path(tmp).glob("multirun/*/points/*/result.json"):
            rec = json.loads(path.read_text())
            records[rec["point_id"]] = rec
    starts = {r["ran"].get("rank_start") for r in records.values()}
    if starts != {way}:
        sys.exit(f"{way}: the records say the ranks started as {starts}")
    return {"wall": wall, "records": records}


def label(rec: dict) -> str:
    return " ".join(rec["overrides"]) or "(defaults)"


def interval(m: dict) -> tuple[float, float]:
    """tokens/s per device at the step time's 95 % interval (high step time = low throughput)."""
    per_step = m["tokens_per_s_per_device"] * m["step_time_s_median"]
    return per_step / m["step_time_s_ci95_high"], per_step / m["step_time_s_ci95_low"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", nargs="*", default=DEFAULT_GRID, help="the multirun's overrides (default: fsdp x gc)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each way, alternated (default 2)")
    opt = ap.parse_args()
    runs: dict[str, list[dict]] = {w: [] for w in WAYS}
    for i in range(opt.repeats):
        for way in WAYS if i % 2 == 0 else WAYS[::-1]:
            runs[way].append(run_grid(opt.grid, way))
            print(f"repeat {i + 1}/{opt.repeats}: {way} {runs[way][-1]['wall']:.1f} s", flush=True)
    n = len(runs["exec"][0]["records"])
    print(f"\ngrid: {' '.join(opt.grid)} ({n} points), {opt.repeats} run(s) each way, alternated\n")
    print(f"{'':<28}{'exec':>10}{'fork':>10}{'fork/exec':>11}")
    for what, value in (
        ("sweep wall s (median)", lambda r: r["wall"]),
        ("point-seconds (median)", lambda r: sum(x["wall_time_s"] or 0 for x in r["records"].values())),
    ):
        e, f = (statistics.median(value(r) for r in runs[w]) for w in WAYS)
        print(f"{what:<28}{e:10.1f}{f:10.1f}{f / e:11.3f}")
    print("\neach point, last run of each way: tokens/s per device, peak tensor MiB, first loss; 'noise?': do the")
    print("two 95 % intervals overlap; median over runs: each way's median tokens/s over its runs")
    last = {w: runs[w][-1]["records"] for w in WAYS}
    medians = {
        w: {pid: statistics.median(r["records"][pid]["metrics"].get("tokens_per_s_per_device") or 0 for r in runs[w])
            for pid in last[w]}
        for w in WAYS
    }  # fmt: skip
    print(
        f"{'point':<36}{'exec tok/s':>12}{'fork tok/s':>12}{'f/e':>7}{'noise?':>8}{'MiB e/f':>14}{'loss same':>10}"
        f"{'f/e, medians':>14}"
    )
    ratios, outside, median_ratios = [], 0, []
    for pid, e in sorted(last["exec"].items(), key=lambda kv: label(kv[1])):
        f = last["fork"].get(pid)
        if f is None or e["status"] != "ok" or f["status"] != "ok":
            print(f"{label(e)[:35]:<36}{e['status']:>12}{(f or {}).get('status', 'missing'):>12}")
            continue
        me, mf = e["metrics"], f["metrics"]
        (elo, ehi), (flo, fhi) = interval(me), interval(mf)
        overlap = elo <= fhi and flo <= ehi
        outside += not overlap
        ratio = mf["tokens_per_s_per_device"] / me["tokens_per_s_per_device"]
        ratios.append(ratio)
        mib = f"{me['peak_mem_bytes'] / 2**20:.2f}/{mf['peak_mem_bytes'] / 2**20:.2f}"
        same = "yes" if me["loss_first"] == mf["loss_first"] else "NO"
        print(
            f"{label(e)[:35]:<36}{me['tokens_per_s_per_device']:12,.0f}{mf['tokens_per_s_per_device']:12,.0f}"
            f"{ratio:7.3f}{'within' if overlap else 'OUTSIDE':>8}{mib:>14}{same:>10}"
            f"{medians['fork'][pid] / medians['exec'][pid]:14.3f}"
        )
        median_ratios.append(medians["fork"][pid] / medians["exec"][pid])
    if ratios:
        print(f"\ntokens/s fork/exec: median {statistics.median(ratios):.3f} over {len(ratios)} points;", end=" ")
        print(f"{outside} point(s) with intervals that do not overlap (last runs)")
        print(f"tokens/s fork/exec of the per-way medians over runs: median {statistics.median(median_ratios):.3f}")


if __name__ == "__main__":
    main()
