"""The issue-7 GPU check, prepared for a session that has a GPU: predicted vs measured peak allocated memory and
tokens/s for a GPT-2 and a 1B shape over gc × precision × two batch sizes, one rank on the local GPU.

Runs one local sweep (``device=cuda``, ``ranks_per_node=1``) with the cluster config naming the GPU (its datasheet
peak and memory), then prints per point: measured ``torch.cuda.max_memory_allocated`` (GiB), predicted peak (GiB)
and error, measured and predicted tokens/s per device (at ``plan.efficiency``), MFU, and the efficiency calibrated
on the sweep. Not run in CI (no GPU there); ``--reuse DIR`` prints the table of an existing sweep.

    python benchmarks/plan_gpu.py --cluster h200-141gb            # ~16 points, a few minutes on an H100/H200
    python benchmarks/plan_gpu.py --reuse multirun/<dir>
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

GRID = [
    "model=gpt2,llama-3.2-1b",
    "gc=true,false",
    "precision=fp32,bf16",
    "per_device_batch_size=4,8",
    "seq_len=1024",
    "ranks_per_node=1",
    "device=cuda",
    "warmup_steps=3",
    "timed_steps=10",
    "memory_steps=1",
    "profile_steps=0",
    "profile_trace=false",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", default="h200-141gb", help="conf/cluster config naming this GPU")
    parser.add_argument("--reuse", type=Path, help="an existing sweep directory to read instead of running")
    args = parser.parse_args()

    from sweeper.capacity.calibrate import calibrated_efficiency
    from sweeper.results.collect import collect_records
    from sweeper.units import GIB

    sweep = args.reuse
    if sweep is None:
        sweep = Path(tempfile.mkdtemp(prefix="plan_gpu_")) / "sweep"
        cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={sweep}", f"cluster={args.cluster}", *GRID]
        subprocess.run(cmd, check=True)
    records = collect_records(sweep)
    print(
        f"{'model':14} {'gc':>3} {'prec':>5} {'b':>3} | {'meas GiB':>9} {'pred GiB':>9} {'err':>7} | "
        f"{'meas tok/s':>10} {'pred tok/s':>10} {'err':>7} {'MFU':>6} | status"
    )
    for r in sorted(records, key=lambda r: sorted(r.spec.items(), key=str)):
        s, m, p = r.spec, r.metrics or {}, r.predicted or {}
        head = f"{s['model']:14} {int(s['gc']):>3} {s['precision']:>5} {s['per_device_batch_size']:>3} | "
        if r.status != "ok":
            print(
                head + f"{'':>9} {(p.get('peak_bytes') or 0) / GIB:>9.2f} {'':>7} | {'':>10} {'':>10} {'':>7} "
                f"{'':>6} | {r.status}: {r.reason}"
            )
            continue
        meas, pred = m.get("peak_mem_bytes"), p.get("peak_bytes")
        tps, ptps = m.get("tokens_per_s_per_device"), p.get("tokens_per_s_per_device")
        err = f"{(pred - meas) / meas:+.1%}" if meas and pred else "n/a"
        terr = f"{(ptps - tps) / tps:+.1%}" if tps and ptps else "n/a"
        print(
            head + f"{meas / GIB:>9.2f} {pred / GIB:>9.2f} {err:>7} | {tps:>10,.0f} {ptps or 0:>10,.0f} {terr:>7} "
            f"{m.get('mfu') or 0:>6.1%} | ok ({m.get('peak_mem_kind')})"
        )
    cal = calibrated_efficiency(records)
    if cal:
        spread = f"p10-p90 {cal.p10:.3f}-{cal.p90:.3f}"
        print(f"\nplan.efficiency calibrated on {cal.n} ok points: {cal.efficiency:.3f} ({spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
