"""How many optimizer steps each engine needs before its step time settles, on this machine's CPU ranks.

The product times ``timed_steps`` steps after ``warmup_steps`` (default 3 and 8): if an engine is still warming up
after the warm-up, its first timed steps are slow and its throughput is understated. This runs one sweep through
the product with a short warm-up and a long fixed window, and prints, per point, the median step time of each block
of :data:`BLOCK` steps after the first, as a ratio to the median of the last half of the run (the settled time):
a block above 1.0 is still warming. Same grid as ``plan_time.py`` at one precision: {DDP, ZeRO-2, FSDP full_shard}
x gc {off, on} x per_device_batch_size {2, 8}, 2 real gloo ranks, the tiny model.

    python benchmarks/warmup_drift.py                 # one sweep (about 4 min on 2 idle cores)
    python benchmarks/warmup_drift.py --reuse DIR     # an existing sweep directory of this script
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

GRID = ["zero=0,2", "fsdp=none,full_shard", "gc=false,true", "precision=fp32", "per_device_batch_size=2,8"]
#: One warm-up step (the very first, with the lazy set-up of every engine), then a long fixed window.
STEPS = ["warmup_steps=1", "timed_steps=32", "memory_steps=0", "profile_steps=0", "profile_trace=false", "wandb=off"]
#: Steps per block.
BLOCK = 4


def _engine(spec: dict) -> str:
    return "ZeRO-2" if spec.get("zero") else ("FSDP" if spec.get("fsdp", "none") != "none" else "DDP")


def drift(step_times: list[float]) -> tuple[list[float], float]:
    """(each block's median / the settled median, the settled median in s) for the timed steps ``step_times``
    (seconds, in order); the settled median is that of the last half."""
    settled = statistics.median(step_times[len(step_times) // 2 :])
    blocks = [step_times[i : i + BLOCK] for i in range(0, len(step_times) // 2, BLOCK)]
    return [statistics.median(b) / settled for b in blocks if b], settled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", type=Path, help="an existing sweep directory of this script")
    args = parser.parse_args()
    if args.reuse:
        out = args.reuse
    else:
        out = Path(tempfile.mkdtemp(prefix="warmup-drift-")) / "sweep"
        env = {**os.environ, "SWEEPER_CACHE_DIR": str(out.parent / "cache")}
        cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *GRID, *STEPS]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    print(f"sweep: {out}; load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"per point: median step time of each block of {BLOCK} timed steps / median of the last half")
    by_engine: dict[str, list[list[float]]] = {}
    for path in sorted(out.glob("points/*/result.json")):
        rec = json.loads(path.read_text())
        if rec["status"] != "ok":
            continue
        series = rec["series"]
        timed = [t for t, w in zip(series["step_time_s"], series["window"], strict=True) if w == "timed"]
        ratios, settled = drift(timed)
        spec = rec["spec"]
        engine = _engine(spec)
        by_engine.setdefault(engine, []).append(ratios)
        name = f"{engine:6} gc={str(spec['gc']).lower():5} batch={spec['per_device_batch_size']}"
        print(f"  {name}  settled {settled * 1000:6.1f} ms  blocks " + " ".join(f"{r:.2f}" for r in ratios))
    print("median over the points of each engine, block by block:")
    for engine, rows in sorted(by_engine.items()):
        cols = [statistics.median(r[i] for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
        print(f"  {engine:6} " + " ".join(f"{c:.2f}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
