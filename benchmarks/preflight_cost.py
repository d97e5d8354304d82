"""What the pre-flight (docs/gate.md, "The pre-flight") costs on a 1,000-point grid, beside the gate's validation
of the same points, measured side by side in one run.

Two grids of N points (default 1,000), built through the real typed schema (:func:`tests.unit.specs.make_spec`;
spec construction is outside every timing):

* **seeds**: ``seed=range(0,N)`` on the tiny model (the grid of the 1,000-point submission benchmark): one distinct
  point without its seed, so the pre-flight checks ``seed`` N times and the libraries once;
* **mixed**: N points that all differ outside ``seed``: fsdp x gc x precision x zero x batch x seq_len x
  ``training_args.max_grad_norm`` (a passthrough value per point), the worst case: one TrainingArguments build
  (and, under DeepSpeed, one DeepSpeedConfig) per point.

For each grid, timed with ``time.perf_counter``:

1. **gate**: :func:`sweeper.point.gate.check` on every point (what a grid's validation is without the pre-flight);
2. **pre-flight, cold**: a fresh worker started (its imports: torch, transformers, DeepSpeed), then
   :func:`sweeper.point.preflight.refusal` on every point; printed with the time to the first answer;
3. **pre-flight, warm**: the same points again in a second fresh worker after one warm-up point, so that the
   per-point cost is seen without the imports.

    python benchmarks/preflight_cost.py [--points 1000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from omegaconf import OmegaConf  # noqa: E402
from tests.unit.specs import make_spec  # noqa: E402

from sweeper.config.target import Target  # noqa: E402
from sweeper.point import preflight  # noqa: E402
from sweeper.point.gate import InvalidPoint, check  # noqa: E402

TINY = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "model" / "tiny.yaml"))
CPU = Target("local", "cpu")


def seeds(n: int) -> list:
    return [make_spec(model=TINY, seed=s) for s in range(n)]


def mixed(n: int) -> list:
    axes = itertools.product(
        [("none", 0), ("none", 1), ("none", 2), ("none", 3), ("full_shard", 0), ("shard_grad_op", 0)],
        [False, True],
        ["fp32", "bf16"],
        [1, 2, 4, 8],
        [16, 32, 64],
    )
    out = []
    for i, ((fsdp, zero), gc, precision, batch, seq) in enumerate(itertools.cycle(axes)):
        if len(out) == n:
            break
        out.append(
            make_spec(
                model=TINY,
                fsdp=fsdp,
                zero=zero,
                gc=gc,
                precision=precision,
                per_device_batch_size=batch,
                seq_len=seq,
                training_args={"max_grad_norm": 0.5 + i / 1000},
            )
        )
    return out


def gate(specs: list) -> float:
    t = time.perf_counter()
    for s in specs:
        try:
            check(s, CPU)
        except InvalidPoint:
            pass
    return time.perf_counter() - t


def cold(specs: list) -> tuple[float, float, int]:
    preflight.reset()
    t = time.perf_counter()
    preflight.warm_up()
    refused = int(preflight.refusal(specs[0], CPU) is not None)
    first = time.perf_counter() - t
    refused += sum(preflight.refusal(s, CPU) is not None for s in specs[1:])
    return time.perf_counter() - t, first, refused


def warm(specs: list) -> float:
    preflight.reset()
    preflight.refusal(make_spec(model=TINY, seed=123456), CPU)
    t = time.perf_counter()
    for s in specs:
        preflight.refusal(s, CPU)
    return time.perf_counter() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.points} points per grid, {args.repeats} repeats")
    for name, build in (("seeds", seeds), ("mixed", mixed)):
        specs = build(args.points)
        rows = [(gate(specs), *cold(specs), warm(specs)) for _ in range(args.repeats)]
        med = [statistics.median(col) for col in zip(*rows, strict=True)]
        g, c, first, refused, w = med
        print(
            f"{name:6} gate {g:6.2f} s ({1e3 * g / len(specs):5.2f} ms/point) | pre-flight cold {c:6.2f} s "
            f"(first answer {first:5.2f} s, {int(refused)} refused) | warm {w:6.2f} s "
            f"({1e3 * w / len(specs):6.2f} ms/point) | pre-flight / gate, warm: {w / g:5.1f}x"
        )
        for i, (g, c, first, _, w) in enumerate(rows):
            print(f"       repeat {i}: gate {g:.2f} s, cold {c:.2f} s (first {first:.2f} s), warm {w:.2f} s")
    preflight.reset()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
