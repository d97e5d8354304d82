"""The time model against measured throughput on the CPU grid of issue 18: calibrated on the DDP points alone, how
close is it on ZeRO-2 and FSDP, and does it rank all the points in the measured order?

Grid (24 points per repeat, 2 real gloo ranks, the tiny model): {DDP, ZeRO-2, FSDP full_shard} x gc {off, on} x
precision {fp32, bf16} x per_device_batch_size {2, 8}, run through the product (``python -m sweeper -m ...``; the
ZeRO-2 x FSDP combinations the gate refuses are listed as invalid and not run). Each repeat uses a fresh
``SWEEPER_CACHE_DIR``, so the matmul peaks and gloo's cost (:mod:`sweeper.job.gloo_probe`) are measured under that
repeat's load by its first point. Then, per repeat:

* the time model is calibrated on the DDP points only (:func:`sweeper.capacity.calibrate.fit_calibration`,
  ``select`` = DDP); every point is predicted with it (:func:`sweeper.capacity.predict.predict`, the point's measured
  peak; ZeRO-2 and FSDP borrow DDP's group of the same gc and precision and add their own collectives);
* printed: for every ZeRO-2 and FSDP point predicted vs measured tokens/s per device and the relative error; Kendall's
  tau-b between predicted and measured throughput over all points; the load average.

Targets (issue 18, "Done when"): every ZeRO-2/FSDP point within 25 %, tau >= 0.8.

    python benchmarks/plan_time.py                        # 2 repeats (about 10 min each on 2 idle cores)
    python benchmarks/plan_time.py --repeats 3
    python benchmarks/plan_time.py --reuse DIR [DIR ...]  # existing sweep directories (one per repeat)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

GRID = [
    "zero=0,2",
    "fsdp=none,full_shard",
    "gc=false,true",
    "precision=fp32,bf16",
    "per_device_batch_size=2,8",
]
STEPS = ["warmup_steps=2", "timed_steps=8", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off"]


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two equally long sequences (ties counted as in scipy.stats.kendalltau)."""
    n = len(xs)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    return (concordant - discordant) / denom if denom else float("nan")


def _sweep(out: Path, cache: Path) -> Path:
    env = {**os.environ, "SWEEPER_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *GRID, *STEPS]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return out


def _engine(spec) -> str:
    return "ZeRO-2" if spec.zero else ("FSDP" if spec.fsdp != "none" else "DDP")


def evaluate(sweep_dir: Path, cache: Path | None) -> tuple[list[tuple], float]:
    """Rows ``(engine, gc, precision, batch, measured, predicted, error, source)`` of one sweep and its tau."""
    if cache is not None:
        os.environ["SWEEPER_CACHE_DIR"] = str(cache)  # the gloo cost that repeat measured
    from sweeper.capacity.calibrate import family, fit_calibration
    from sweeper.capacity.predict import predict
    from sweeper.config.spec import PointSpec
    from sweeper.config.target import Target
    from sweeper.results.collect import collect_records

    records = [r for r in collect_records(sweep_dir) if r.status == "ok"]
    cal = fit_calibration(records, select=lambda s: family(s) == "ddp", where=str(sweep_dir))
    if cal is None:
        raise SystemExit(f"{sweep_dir}: no ok DDP point to calibrate on")
    rows = []
    for r in records:
        spec = PointSpec.from_dict(r.spec)
        m = r.metrics
        pred = predict(
            spec,
            Target("local", "cpu"),
            measured_peak_flops=m["mfu_peak_flops"],
            peak_source=m.get("mfu_peak_source"),
            with_max_batch=False,
            calibration=cal,
        )
        measured, predicted = m["tokens_per_s_per_device"], pred.tokens_per_s_per_device
        err = (predicted - measured) / measured
        rows.append((_engine(spec), spec.gc, spec.precision, spec.micro_batch, measured, predicted, err, pred))
    rows.sort(key=lambda x: (x[0], x[1], x[2], x[3]))
    tau = kendall_tau([x[5] for x in rows], [x[4] for x in rows])
    return rows, tau


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--reuse", nargs="*", type=Path, help="existing sweep directories, one per repeat")
    args = parser.parse_args()
    runs: list[tuple[Path, Path | None, str]] = []
    if args.reuse:
        runs = [(d, d / "cache" if (d / "cache").is_dir() else None, "") for d in args.reuse]
    else:
        tmp = Path(tempfile.mkdtemp(prefix="plan_time_"))
        for i in range(args.repeats):
            cache = tmp / f"cache{i}"
            before = os.getloadavg()[0]
            d = _sweep(tmp / f"repeat{i}", cache)
            runs.append((d, cache, f"load average {before:.1f} before, {os.getloadavg()[0]:.1f} after"))
    worst_all, taus = 0.0, []
    for n, (d, cache, load) in enumerate(runs):
        rows, tau = evaluate(d, cache)
        taus.append(tau)
        print(f"\n## repeat {n + 1}: {d} ({load})")
        first = rows[0][7]
        print(f"calibration: {first.efficiency_source}")
        header = f"{'engine':7} {'gc':5} {'prec':5} {'b':>2} | {'measured':>9} {'predicted':>9} {'error':>7} | comm ms"
        print(header)
        print("-" * len(header))
        within = total = 0
        for eng, gc, prec, b, meas, pred_tps, err, pred in rows:
            mark = ""
            if eng != "DDP":
                total += 1
                within += abs(err) <= 0.25
                worst_all = max(worst_all, abs(err))
                mark = "" if abs(err) <= 0.25 else "  > 25 %"
            comm = f"{pred.comm_s * 1e3:7.1f}" if pred.comm_s is not None else "      -"
            print(f"{eng:7} {gc!s:5} {prec:5} {b:>2} | {meas:9,.0f} {pred_tps:9,.0f} {err:+7.1%} | {comm}{mark}")
        print(f"ZeRO-2/FSDP within 25 %: {within}/{total}; Kendall tau (all {len(rows)} points): {tau:.3f}")
    print(f"\nall repeats: worst ZeRO-2/FSDP |error| {worst_all:.1%}; tau {', '.join(f'{t:.3f}' for t in taus)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
