"""The memory and time models on tensor-parallel points (issue 34): measured on this machine, side by side in one run.

Grid (one multirun, 2 real gloo ranks, the tiny model): ``tp=1,2 sp=1,2 zero=0,1,2 gc=false,true
per_device_batch_size=2,8`` (48 points; the 12 with tp=2 and sp=2 are refused, rule T03: 36 measured) through the
product (``python -m sweeper -m ...``), a fresh ``SWEEPER_CACHE_DIR`` so that the matmul peak
and gloo's cost are measured under this run's load. Then:

* **memory**: for every tp=2 and sp=2 point, the predicted parameter, gradient and optimizer-state bytes per rank
  against the measured ones (target: exact) and the predicted CPU peak against MemTracker's (target: within 10 %);
* **time**, two ways per point: **left out**, calibrated on every other point of the sweep
  (:func:`sweeper.capacity.calibrate.fit_calibration`; the tp=2 points are a calibration family of their own,
  ``autotp``, as ``plan.calibrate`` fits them), the point itself never among them (target: within 25 %, and Kendall's
  tau-b of predicted vs measured close to 1: the order kept); and calibrated on the **tp=1 points only** (what the
  model's tensor-parallel terms, its all-reduces per layer and FLOPs / tp, give with no tensor-parallel measurement);
* the machine's load average before and after, and each point's contention flag (docs/measurement.md).

    python benchmarks/parallelism.py                 # about 5 min on 2 idle cores
    python benchmarks/parallelism.py --reuse DIR     # an existing sweep directory of this grid (its cache beside it)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from plan_time import kendall_tau

GRID = ["tp=1,2", "sp=1,2", "zero=0,1,2", "gc=false,true", "per_device_batch_size=2,8"]
STEPS = ["warmup_steps=3", "timed_steps=8", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off"]


def _sweep(out: Path, cache: Path) -> None:
    env = {**os.environ, "SWEEPER_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *GRID, *STEPS]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def _rel(p: float | None, q: float | None) -> float:
    if p is None or q is None:
        return 0.0 if p == q else float("inf")
    return abs(p - q) / q if q else float(p != q)


def report(sweep_dir: Path, cache: Path) -> int:
    """Print both tables; return 1 when a target is missed on a tp=2 point (states not exact, peak > 10 %, tokens/s
    left out > 25 %) or an sp=2 point."""
    os.environ["SWEEPER_CACHE_DIR"] = str(cache)
    from sweeper.capacity.arch import Arch
    from sweeper.capacity.calibrate import fit_calibration
    from sweeper.capacity.memory import estimate_memory
    from sweeper.capacity.predict import predict
    from sweeper.config.spec import PointSpec
    from sweeper.config.target import Target
    from sweeper.results.collect import collect_records

    def key(r):
        return (r.spec["tp"], r.spec["sp"], r.spec["zero"], r.spec["gc"], r.spec["per_device_batch_size"])

    records = sorted((r for r in collect_records(sweep_dir) if r.status == "ok"), key=key)

    def tokens_per_s(r, cal) -> float:
        m = r.metrics
        pred = predict(
            PointSpec.from_dict(r.spec),
            Target("local", "cpu"),
            measured_peak_flops=m["mfu_peak_flops"],
            peak_source=m.get("mfu_peak_source"),
            with_max_batch=False,
            calibration=cal,
        )
        return float(pred.tokens_per_s_per_device)

    data_parallel = fit_calibration(records, select=lambda s: s.tp == 1 and s.sp == 1, where=str(sweep_dir))
    if data_parallel is None:
        raise SystemExit(f"{sweep_dir}: no ok tp=1 sp=1 point to calibrate on")
    missed = 0
    print(
        f"{'tp':>2} {'sp':>2} {'zero':>4} {'gc':5} {'b':>2} | {'states':7} {'peak pred':>10} {'measured':>10} "
        f"{'err':>6} | "
        f"{'tok/s meas':>10} {'left out':>9} {'err':>7} | {'tp=1 cal':>9} {'err':>7} | contended"
    )
    left_out: list[tuple[float, float]] = []
    for r in records:
        spec, m = PointSpec.from_dict(r.spec), r.metrics
        est = estimate_memory(spec, Arch.from_config(spec.model_type, spec.model_config), "cpu")
        st = est.states
        exact = (st.param_bytes, st.grad_bytes, st.optimizer_state_bytes) == (
            m["param_bytes_per_rank"],
            m["grad_bytes_per_rank"],
            m["optimizer_state_bytes_per_rank"],
        )
        peak_err = _rel(est.peak_bytes, m["peak_mem_bytes"])
        others = fit_calibration([x for x in records if x is not r], where=str(sweep_dir))
        meas = m["tokens_per_s_per_device"]
        out, dp_only = tokens_per_s(r, others), tokens_per_s(r, data_parallel)
        err, dp_err = (out - meas) / meas, (dp_only - meas) / meas
        left_out.append((out, meas))
        if spec.tp > 1 or spec.sp > 1:
            missed += (not exact) + (peak_err > 0.10) + (abs(err) > 0.25)
        print(
            f"{spec.tp:>2} {spec.sp:>2} {spec.zero:>4} {spec.gc!s:5} {spec.micro_batch:>2} | "
            f"{'exact' if exact else 'DIFFER':7} "
            f"{est.peak_bytes:>10,} {m['peak_mem_bytes']:>10,} {peak_err:6.1%} | {meas:>10,.0f} {out:>9,.0f} "
            f"{err:+7.1%} | {dp_only:>9,.0f} {dp_err:+7.1%} | {'contended' if m.get('contended') else ''}"
        )
    tp_pairs = [p for p, r in zip(left_out, records, strict=True) if r.spec["tp"] > 1]
    sp_pairs = [p for p, r in zip(left_out, records, strict=True) if r.spec["sp"] > 1]
    tau_tp = kendall_tau([p for p, _ in tp_pairs], [q for _, q in tp_pairs])
    tau_sp = kendall_tau([p for p, _ in sp_pairs], [q for _, q in sp_pairs])
    tau_all = kendall_tau([p for p, _ in left_out], [q for _, q in left_out])
    print(
        "left out = calibrated on every other point of the sweep (its tp=2 and sp=2 groups included: families "
        "autotp, ulysses); tp=1 cal = calibrated on the tp=1 sp=1 points only (no model-parallel measurement: the "
        "model's transfer).\n"
        f"Kendall tau, left out vs measured tokens/s: tp=2 points {tau_tp:.3f}, sp=2 points {tau_sp:.3f}, all "
        f"{len(left_out)} {tau_all:.3f}; targets missed on tp=2 and sp=2 points: {missed}"
    )
    return 1 if missed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reuse", type=Path, help="an existing sweep directory of this grid (its cache beside it)")
    args = parser.parse_args()
    if args.reuse:
        return report(args.reuse, args.reuse.parent / "cache")
    tmp = Path(tempfile.mkdtemp(prefix="parallelism_"))
    before = os.getloadavg()[0]
    _sweep(tmp / "sweep", tmp / "cache")
    print(f"{tmp / 'sweep'}: load average {before:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    return report(tmp / "sweep", tmp / "cache")


if __name__ == "__main__":
    sys.exit(main())
