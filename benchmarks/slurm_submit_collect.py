"""How fast sweeper submits a large grid to SLURM, and collects a large sweep into its report.

Needs the development cluster (``eval "$(bash slurm/dev-cluster.sh start | tail -n 1)"``). Three measurements:

1. **submission**: ``python -m sweeper -m seed=range(0,N) launcher=slurm cluster=dev launcher.wait=false``, the
   real path (Hydra composes N points, each validated, its spec written, the payload pickle-checked, then one
   ``sbatch --array``): wall clock of the whole command (``time.perf_counter`` around it), and the ``sbatch``
   call alone as sweeper prints it. The array is submitted held (``+cluster.sbatch_extra.hold=true``: no task
   competes with the command for the node's 2 cores) and cancelled right after.
2. **time to all results** for N trivial points: the same submitit executor settings as ``launcher=slurm``
   (one array, one task per point) running a function that only writes an ``ok`` record, then sweeper's
   collection loop (:func:`sweeper.launchers.slurm.accounting.reconcile`, one ``sacct`` call per pass, 1 s
   apart) until every point is final. Measures scheduler throughput plus sweeper's polling, not training.
3. **collection**: M synthetic result files (hand-made ``ok``/``oom``/``error`` records, after ``sweep.json`` as a
   sweep writes it) -> ``build_report`` (CSV, Parquet, Markdown, HTML, PNG) in this process, ``python -m
   sweeper.status``, and ``python -m sweeper.report --wandb off`` (a fresh process, imports included).

Goals (issue 22): a 1,000-point submission under 5 s, 10,000 records collected into the report under 2 s, on this
machine (2 cores, shared).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import submitit

from sweeper.launchers.slurm.accounting import reconcile
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir


def trivial_point(payload: dict) -> str:
    """A point that does no training: writes an ok record and returns."""
    SweepDir(Path(payload["sweep_dir"])).write_record(
        Record(sweep_id="bench", point_id=payload["point_id"], status="ok", spec={"seed": payload["seed"]}),
    )
    return "ok"


def bench_submission(n: int, workdir: Path, wandb: str | None = None) -> tuple[float, float | None]:
    """One submission of ``seed=range(0,n)`` (``wandb=<mode>`` when given, else the default); the array is cancelled
    after. Returns the command's wall time and the sbatch call's (s)."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}  # the product's own default decides
    workdir = Path(tempfile.mkdtemp(dir=workdir))
    t0 = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            f"seed=range(0,{n})",
            "launcher=slurm",
            "cluster=dev",
            "launcher.wait=false",
            # held (sbatch --hold): no task starts on the 2-core node while the command still writes its report
            "+cluster.sbatch_extra.hold=true",
            *([f"wandb={wandb}"] if wandb else []),
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    arrays = re.findall(r"sbatch: array (\d+) with (\d+) task\(s\) in ([\d.]+) s", done.stdout)
    cancel([array for array, _, _ in arrays])
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    out = done.stdout
    assert sum(int(k) for _, k, _ in arrays) == n, out[-2000:]
    return wall, sum(float(t) for _, _, t in arrays) if arrays else None


def cancel(arrays: list[str], timeout_s: float = 60.0) -> None:
    """``scancel`` the arrays, then wait until ``squeue`` lists none of their tasks: slurmctld cancelling 1,000 held
    tasks is busy for seconds, and the next submission measured would pay for it (its ``sbatch`` took 0.5, 0.9 and
    1.2 s in three back-to-back runs without this wait)."""
    if not arrays:
        return
    subprocess.run(["scancel", *arrays], check=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = subprocess.run(
            ["squeue", "--noheader", "--format=%i", "--jobs", ",".join(arrays)], capture_output=True, text=True
        )
        if listed.returncode != 0 or not listed.stdout.strip():
            return
        time.sleep(0.5)


def bench_results(n: int, workdir: Path) -> float:
    sweep_dir = workdir / "trivial"
    executor = submitit.SlurmExecutor(folder=sweep_dir / "slurm" / "%j", max_num_timeout=0)
    executor.update_parameters(
        partition="debug",
        ntasks_per_node=1,
        cpus_per_task=1,
        time=10,
        mem="200M",
        array_parallelism=n,
        signal_delay_s=20,
    )
    t0 = time.perf_counter()
    payloads = [{"sweep_dir": str(sweep_dir), "point_id": f"p{i:05d}", "seed": i} for i in range(n)]
    jobs = executor.map_array(trivial_point, payloads)
    sweep = SweepDir(sweep_dir, "bench")
    sweep.add_submitted({p["point_id"]: {"job_id": j.job_id, "spec": {}} for p, j in zip(payloads, jobs, strict=True)})
    while "pending" in reconcile(sweep).values():
        time.sleep(1)
    return time.perf_counter() - t0


def bench_collection(m: int, workdir: Path) -> tuple[float, float, float]:
    from sweeper.report import build_report
    from sweeper.results.opening import open_sweep

    sweep_dir = workdir / "big"
    t0 = time.perf_counter()
    # a sweep directory as the sweep leaves it: sweep.json first (its id), then one record per point
    sweep_id = open_sweep(sweep_dir, "multirun", m, [f"seed=range(0,{m})"])["sweep_id"]
    for i in range(m):
        spec = {
            "model": "tiny",
            "fsdp": ["none", "full_shard"][i % 2],
            "gc": bool(i % 3),
            "precision": "fp32",
            "zero": 0,
            "per_device_batch_size": 1 + i % 64,
            "seq_len": 128,
            "grad_accum": 1,
            "ranks_per_node": 2,
            "nodes": 1,
            "seed": i,
        }
        status = "ok" if i % 10 else ("oom" if i % 20 else "error")
        metrics = (
            {
                "step_time_s_median": 0.05 + (i % 97) / 1000,
                "tokens_per_s_per_device": 5000 + (i * 7919) % 4000,
                "peak_mem_bytes": (1 + (i * 104729) % 5000) * 2**20,
            }
            if status == "ok"
            else {}
        )
        SweepDir(sweep_dir).write_record(
            Record(
                sweep_id=sweep_id,
                point_id=f"{i:012x}",
                status=status,
                spec=spec,
                metrics=metrics,
                reason=None if status == "ok" else "synthetic failure",
                error_kind="runtime" if status == "error" else None,
            ),
        )
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_report(sweep_dir)
    report_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweeper.status", str(sweep_dir)], capture_output=True, check=True)
    status_s = time.perf_counter() - t0
    t0 = time.perf_counter()  # the user's command: a fresh process, its imports included
    cli = [sys.executable, "-m", "sweeper.report", str(sweep_dir), "--wandb", "off"]
    subprocess.run(cli, capture_output=True, check=True)
    print(f"python -m sweeper.report of {m} records: {time.perf_counter() - t0:.2f} s")
    return write_s, report_s, status_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument(
        "--submission-only",
        action="store_true",
        help="only the submission, with the default wandb=auto and with wandb=off, alternating (--repeats pairs)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--collection-only", action="store_true", help="only the collection of --records synthetic records"
    )
    args = parser.parse_args()
    if args.collection_only:  # needs no cluster
        with tempfile.TemporaryDirectory() as tmp:
            write_s, report_s, status_s = bench_collection(args.records, Path(tmp))
            print(
                f"{args.records} result files: written in {write_s:.1f} s; report built in {report_s:.1f} s "
                f"(goal < 2 s); sweeper.status in {status_s:.1f} s"
            )
        return 0
    if not os.environ.get("SLURM_CONF"):
        print('needs SLURM_CONF: eval "$(bash slurm/dev-cluster.sh start | tail -n 1)"', file=sys.stderr)
        return 2
    if args.submission_only:
        with tempfile.TemporaryDirectory() as tmp:
            walls: dict[str, list[float]] = {"auto": [], "off": []}
            for _ in range(args.repeats):
                for mode in ("auto", "off"):  # side by side, alternating
                    walls[mode].append(bench_submission(args.points, Path(tmp), None if mode == "auto" else mode)[0])
            for mode, w in walls.items():
                print(f"submission of {args.points} points, wandb={mode}: " + ", ".join(f"{x:.1f} s" for x in w))
            auto, off = sorted(walls["auto"])[len(walls["auto"]) // 2], sorted(walls["off"])[len(walls["off"]) // 2]
            print(f"median auto / off: {auto / off:.2f} (goal: both < 5 s)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wall, sbatch_s = bench_submission(args.points, work)
        print(
            f"submission of a {args.points}-point grid: {wall:.1f} s wall (command), sbatch call {sbatch_s} s "
            f"(goal < 10 s)"
        )
        results_s = bench_results(args.points, work)
        print(f"{args.points} trivial points, submit to all results collected: {results_s:.1f} s")
        write_s, report_s, status_s = bench_collection(args.records, work)
        print(
            f"{args.records} result files: written in {write_s:.1f} s; report built in {report_s:.1f} s "
            f"(goal < 10 s); sweeper.status in {status_s:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
