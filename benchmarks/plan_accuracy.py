"""The memory model's error on the issue's full CPU grid: predicted vs MemTracker's measured peak, every point.

Grid (32 points, real ranks): {tiny, a GPT-2-shaped model} x gc {off, on} x per_device_batch_size {2, 8} x
precision {fp32, bf16} x ranks_per_node {1, 2}, plus (``--strategies``) FSDP full_shard / shard_grad_op and ZeRO-1/2/3
on 2 ranks for the tiny model. Each point runs 1 warm-up, 3 timed and 1 memory step. Prints, per point: measured
peak (MiB), predicted peak (MiB), relative error, the predicted phase of the peak, and the model-state errors
(parameters, gradients, optimizer state per rank); then the largest |error|.

    python benchmarks/plan_accuracy.py                     # runs the sweeps (about 6 min on 2 cores)
    python benchmarks/plan_accuracy.py --reuse DIR [DIR..] # reads existing sweep directories instead
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]
GRID = ["per_device_batch_size=2,8", "gc=true,false", "precision=fp32,bf16", "ranks_per_node=1,2"]
GPT2_SHAPED = [
    "model=gpt2",
    "model.name=gpt2-shaped",
    "model.config.n_embd=128",
    "model.config.n_layer=2",
    "model.config.n_head=4",
    "model.config.vocab_size=4000",
    "model.config.n_positions=256",
]
STRATEGIES = ["fsdp=full_shard,shard_grad_op", "gc=true,false", "precision=fp32,bf16"]
ZERO = ["zero=1,2,3", "gc=true,false", "precision=fp32,bf16"]


def _sweep(args: list[str], out: Path) -> Path:
    cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *args, *STEPS]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reuse", nargs="*", type=Path, help="existing sweep directories to read")
    parser.add_argument("--strategies", action="store_true", help="also FSDP and ZeRO on 2 ranks (tiny model)")
    args = parser.parse_args()

    from sweeper.capacity.arch import Arch
    from sweeper.capacity.memory import estimate_memory
    from sweeper.config.spec import PointSpec
    from sweeper.results.collect import collect_records
    from sweeper.units import MIB

    dirs = list(args.reuse or [])
    if not dirs:
        tmp = Path(tempfile.mkdtemp(prefix="plan_accuracy_"))
        dirs = [_sweep(GRID, tmp / "tiny"), _sweep([*GPT2_SHAPED, *GRID], tmp / "gpt2")]
        if args.strategies:
            dirs += [_sweep(STRATEGIES, tmp / "fsdp"), _sweep(ZERO, tmp / "zero")]
    header = (
        f"{'model':12} {'strategy':14} {'gc':>3} {'b':>3} {'prec':>5} {'ranks':>5} | {'measured MiB':>12} "
        f"{'predicted MiB':>13} {'error':>7} {'phase':>17} | {'param':>6} {'grad':>6} {'optim':>6}"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    n = 0
    for d in dirs:
        for r in sorted(collect_records(d), key=lambda r: sorted(r.spec.items(), key=str)):
            if r.status != "ok":
                print(f"{r.spec.get('model')}: {r.status} {r.reason}")
                continue
            spec = PointSpec.from_dict(r.spec)
            est = estimate_memory(spec, Arch.from_config(spec.model_type, spec.model_config), "cpu")
            m = r.metrics
            err = (est.peak_bytes - m["peak_mem_bytes"]) / m["peak_mem_bytes"]
            worst = max(worst, abs(err))
            n += 1

            def rel(p: int | None, q: int | None) -> str:
                return "n/a" if p is None or q is None else f"{(p - q) / q:+.1%}"

            strategy = f"zero{spec.zero}" if spec.zero else spec.fsdp
            print(
                f"{spec.model:12} {strategy:14} {int(spec.gc):>3} {spec.per_device_batch_size:>3} "
                f"{spec.precision:>5} {spec.ranks_per_node:>5} | {m['peak_mem_bytes'] / MIB:>12.2f} "
                f"{est.peak_bytes / MIB:>13.2f} {err:>+7.1%} {est.peak_phase:>17} | "
                f"{rel(est.states.param_bytes, m.get('param_bytes_per_rank')):>6} "
                f"{rel(est.states.grad_bytes, m.get('grad_bytes_per_rank')):>6} "
                f"{rel(est.states.optimizer_state_bytes, m.get('optimizer_state_bytes_per_rank')):>6}"
            )
    print(f"\n{n} points; largest |error| of the predicted peak: {worst:.1%} (MiB = 2**20 bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
