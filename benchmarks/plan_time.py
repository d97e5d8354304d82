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
import dataclasses
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
STEPS = ["warmup_steps=3", "timed_steps=8", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off"]


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b (:func:`plan_peers_cases.kendall_tau`, the benchmarks' one copy), NaN where it is undefined."""
    from plan_peers_cases import kendall_tau as tau_b

    tau = tau_b(xs, ys)
    return float("nan") if tau is None else tau


def _sweep(out: Path, cache: Path) -> Path:
    env = {**os.environ, "SWEEPER_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *GRID, *STEPS]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return out


def _engine(spec) -> str:
    return "ZeRO-2" if spec.zero else ("FSDP" if spec.fsdp != "none" else "DDP")


def _uncontended(records: list) -> list:
    """The records with each step time scaled by ``1 - runqueue_wait_frac`` (the share of the timed window a rank's
    training thread waited for a CPU, docs/measurement.md "Contention"): an estimate of the step on idle cores."""
    out = []
    for r in records:
        m = dict(r.metrics)
        keep = 1.0 - float(m.get("runqueue_wait_frac") or 0.0)
        m["step_time_s_median"] = m["step_time_s_median"] * keep
        m["tokens_per_s_per_device"] = m["tokens_per_s_per_device"] / keep
        out.append(dataclasses.replace(r, metrics=m))
    return out


def evaluate(sweep_dir: Path, cache: Path | None, uncontended: bool = False) -> tuple[list[tuple], float]:
    """Rows ``(engine, gc, precision, batch, measured, predicted, error, prediction, wait, contended)`` of one sweep
    (``contended``: the record's own flag, docs/measurement.md "Contention") and its tau; ``uncontended``: measured
    steps scaled by ``1 - runqueue_wait_frac`` first (:func:`_uncontended`)."""
    if cache is not None:
        os.environ["SWEEPER_CACHE_DIR"] = str(cache)  # the gloo cost that repeat measured
    from sweeper.capacity.calibrate import family, fit_calibration
    from sweeper.capacity.predict import predict
    from sweeper.config.spec import PointSpec
    from sweeper.config.target import Target
    from sweeper.results.collect import collect_records

    records = [r for r in collect_records(sweep_dir) if r.status == "ok"]
    waits = {r.point_id: float(r.metrics.get("runqueue_wait_frac") or 0.0) for r in records}
    contended = {r.point_id: bool(r.metrics.get("contended")) for r in records}
    if uncontended:
        records = _uncontended(records)
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
        row = (_engine(spec), spec.gc, spec.precision, spec.micro_batch, measured, predicted, err, pred)
        rows.append((*row, waits[r.point_id], contended[r.point_id]))
    rows.sort(key=lambda x: (x[0], x[1], x[2], x[3]))
    tau = kendall_tau([x[5] for x in rows], [x[4] for x in rows])
    return rows, tau


def _print(runs: list[tuple[Path, Path | None, str]], uncontended: bool) -> None:
    worst_all, taus = 0.0, []
    what = "measured steps scaled by 1 - runqueue_wait_frac" if uncontended else "measured as recorded"
    for n, (d, cache, load) in enumerate(runs):
        rows, tau = evaluate(d, cache, uncontended)
        taus.append(tau)
        print(f"\n## repeat {n + 1} ({what}): {d} ({load})")
        header = f"{'engine':7} {'gc':5} {'prec':5} {'b':>2} | {'measured':>9} {'predicted':>9} {'error':>7} | comm ms"
        header += " | wait"
        print(header)
        print("-" * len(header))
        within = total = within_quiet = quiet = 0
        for eng, gc, prec, b, meas, pred_tps, err, pred, wait, busy in rows:
            mark = ""
            if eng != "DDP":
                total += 1
                within += abs(err) <= 0.25
                quiet += not busy
                within_quiet += not busy and abs(err) <= 0.25
                worst_all = max(worst_all, abs(err))
                mark = "" if abs(err) <= 0.25 else "  > 25 %"
            comm = f"{pred.comm_s * 1e3:7.1f}" if pred.comm_s is not None else "      -"
            print(
                f"{eng:7} {gc!s:5} {prec:5} {b:>2} | {meas:9,.0f} {pred_tps:9,.0f} {err:+7.1%} | {comm} | "
                f"{wait:4.0%}{' contended' if busy else ''}{mark}"
            )
        other = [x for x in rows if x[0] != "DDP"]
        tau_other = kendall_tau([x[5] for x in other], [x[4] for x in other])
        print(
            f"ZeRO-2/FSDP within 25 %: {within}/{total} ({within_quiet}/{quiet} of those the product did not flag "
            f"contended); Kendall tau (all {len(rows)} points): {tau:.3f}; over the {len(other)} ZeRO-2/FSDP points "
            f"alone (none calibrated on): {tau_other:.3f}"
        )
    taus_s = ", ".join(f"{t:.3f}" for t in taus)
    print(f"\n{what}, all repeats: worst ZeRO-2/FSDP |error| {worst_all:.1%}; tau {taus_s}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--reuse", nargs="*", type=Path, help="existing sweep directories, one per repeat")
    parser.add_argument(
        "--uncontended",
        action="store_true",
        help="also compare with each measured step scaled by 1 - runqueue_wait_frac (a shared machine's estimate)",
    )
    args = parser.parse_args()
    runs: list[tuple[Path, Path | None, str]] = []
    if args.reuse:
        # the cache a repeat measured sits beside it: <tmp>/repeat<i> and <tmp>/cache<i>
        caches = [d.parent / d.name.replace("repeat", "cache") for d in args.reuse]
        runs = [(d, c if c.is_dir() else None, "") for d, c in zip(args.reuse, caches, strict=True)]
    else:
        tmp = Path(tempfile.mkdtemp(prefix="plan_time_"))
        for i in range(args.repeats):
            cache = tmp / f"cache{i}"
            before = os.getloadavg()[0]
            d = _sweep(tmp / f"repeat{i}", cache)
            runs.append((d, cache, f"load average {before:.1f} before, {os.getloadavg()[0]:.1f} after"))
    for uncontended in (False, True) if args.uncontended else (False,):
        _print(runs, uncontended)
    return 0


if __name__ == "__main__":
    sys.exit(main())
