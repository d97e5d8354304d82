"""What sweeper's harness adds to one grid point: sweeper (A) against a bare HF Trainer script (B).

A = ``python -m sweeper <overrides>``: one point, in a fresh temporary working directory, as a user runs it.
    With ``--grid K``: ONE multirun ``python -m sweeper -m seed=range(0,K) <overrides>`` (one driver, one
    report at the end) against K bare runs, one per point (its seed); per-point overhead = (A - sum B) / K.
B = ``BARE`` below under ``torch.distributed.run --standalone`` with A's rank count: same model (``AutoConfig.
    for_model`` with the point's numbers), synthetic tokens, batch size, seq_len, seed, number of optimizer
    steps (warm-up + timed + memory + profile) and TrainingArguments essentials, and nothing else. B reads its
    spec from A's result record, so ``--overrides`` reach both.

What is timed:
* wall: the whole command, ``time.perf_counter()`` around ``subprocess.run``: process start, imports,
  torchrun, rank start-up, training, teardown and, for A only, Hydra, the record and the report.
* step: one optimizer step, ``time.perf_counter()`` from ``on_step_begin`` to ``on_step_end``, slowest rank;
  median over the timed window (``timed_steps`` steps after ``warmup_steps``), as A's ``step_time_s_median``.
Runs alternate A, B, A, B, ... (the machine is shared and noisy); the summary row is each column's median.
With ``--grid``, repeats alternate the order: (A, B x K), (B x K, A), ... so that a drift in load hits both.
Breakdown: time.time() marks; for A, the modification times of sweep.json, spec.json, rank<r>.json and the
report files, the ranks' ``train_wall_s``, the first event of the profiler trace and the record's
``wall_time_s``; B's ranks write their own. Each phase runs from the previous mark to its own, so the phases
add up to the command's wall time.

    python benchmarks/harness_overhead.py --repeats 3 [--timed-steps 8] [--overrides seq_len=256 ...]
    python benchmarks/harness_overhead.py --grid 4 --repeats 2
    python benchmarks/harness_overhead.py --repeats 5 --exec-too   # A' = SWEEPER_RANK_START=exec beside A and B

A bare run that fails (it aborts at exit now and then) is run again, up to RETRIES times, and counted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = r"""
import json, os, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

spec, out = json.load(open(sys.argv[1])), sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timed = range(spec["warmup_steps"], spec["warmup_steps"] + spec["timed_steps"])
steps = timed.stop + spec["memory_steps"] + spec["profile_steps"]

class Tokens(torch.utils.data.Dataset):  # as sweeper.job.trainer_setup.SyntheticTokens
    def __init__(self, n, seq_len, vocab, seed):
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(seed))
    def __len__(self): return len(self.ids)
    def __getitem__(self, i): return {"input_ids": self.ids[i], "labels": self.ids[i]}

class StepTimer(TrainerCallback):
    times, begins, losses = [], [], []  # timed steps (s), time.time() at each step's begin, losses
    def on_step_begin(self, args, state, control, **kw):
        self.begins.append(time.time())
        self.t0 = time.perf_counter()
    def on_step_end(self, args, state, control, **kw):
        if state.global_step - 1 in timed: self.times.append(time.perf_counter() - self.t0)
    def on_log(self, args, state, control, logs=None, **kw): self.losses.append(logs.get("loss"))

t_train0 = time.time()
torch.manual_seed(spec["seed"])
config = AutoConfig.for_model(spec["model_type"], **spec["model_config"])
config.use_cache = False
model = AutoModelForCausalLM.from_config(config)
bs, accum, seed = spec["per_device_batch_size"], spec["grad_accum"], spec["seed"]
args = TrainingArguments(
    output_dir=os.path.join(out, "trainer"), max_steps=steps, per_device_train_batch_size=bs,
    gradient_accumulation_steps=accum, learning_rate=1e-4, lr_scheduler_type="constant", seed=seed,
    data_seed=seed, bf16=spec["precision"] == "bf16", use_cpu=True, report_to=[], save_strategy="no",
    logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, ddp_find_unused_parameters=False)
t = StepTimer()
data = Tokens(bs * accum * world * steps, spec["seq_len"], config.vocab_size, seed)
Trainer(model=model, args=args, train_dataset=data, callbacks=[t]).train()
rec = dict(t_train0=t_train0, t_train1=time.time(), begins=t.begins, step_times_s=t.times, losses=t.losses)
json.dump(rec, open(os.path.join(out, f"rank{rank}.json"), "w"))
"""
# sweeper keys with no counterpart in BARE (plain DDP): a point must have these values to be compared
PLAIN = dict(fsdp="none", zero=0, gc=False, eval=False, training_args={}, callbacks=[], model_dtype="float32")
# phase name, keyed by the time.time() mark that ends it; it starts at the previous mark (a missing mark: 0 s)
PHASES = {
    "sweep": "driver start: python, hydra, compose, pre-flight",
    "spec": "driver: sweeper imports, environment, validate",
    "train0": "ranks start: launch, (B: python, imports)",
    "profile0": "train: model, Trainer, warm-up, timed, memory",
    "train1": "train: profile window, top-ops table, trace",
    "written": "MFU peak (rank 0, after training)",
    "ranks_end": "ranks exit: teardown, torchrun",
    "report": "record + report (csv, parquet, png, html)",
    "end": "driver exit",
}
HEAD = ("repeat", "wall A s", "wall B s", "A/B", "step A ms", "step B ms", "A/B")


def phases(marks: dict[str, float]) -> dict[str, float]:
    out, prev = {}, marks["start"]
    for mark, name in PHASES.items():
        out[name], prev = marks.get(mark, prev) - prev, marks.get(mark, prev)
    return out


#: Times a command that failed is run again before the benchmark stops (the bare script aborts at exit now and
#: then, "terminate called without an active exception", after its ranks wrote their results).
RETRIES = 3
#: Each failed run that was retried: (command's script or module, exit code, the log's last line).
failed_runs: list[tuple[str, int, str]] = []


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Run ``cmd`` in ``cwd``; returns (wall s by perf_counter, start and end by time.time()). A run that fails is
    recorded in :data:`failed_runs` and run again (its files removed), up to :data:`RETRIES` times."""
    for _attempt in range(RETRIES + 1):
        keep = {p.name for p in cwd.iterdir()}
        with open(cwd / "out.log", "wb") as log:
            t0, w0 = time.perf_counter(), time.time()
            rc = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            wall, w1 = time.perf_counter() - t0, time.time()
        if not rc:
            return wall, w0, w1
        text = (cwd / "out.log").read_text(errors="replace")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and set(ln.strip()) != {"="}]
        said = [ln for ln in lines if any(w in ln for w in ("terminate called", "exitcode", "Error"))]
        last = (said or lines or [""])[-1]
        failed_runs.append((next((a for a in cmd[1:] if not a.startswith("-")), cmd[0]), rc, last[:120]))
        print(f"  run failed ({rc}), run again: {last[:120]}", flush=True)
        for p in cwd.iterdir():
            if p.name not in keep and p.name != "out.log":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    sys.exit(f"{' '.join(cmd)} failed {RETRIES + 1} times ({rc}):\n{text[-3000:]}")


def trace_start(path: Path) -> float | None:
    """time.time() of the first event in a torch.profiler chrome trace; None without a trace."""
    if not path.exists():
        return None
    trace = json.loads(path.read_text())
    first_us = min(float(e["ts"]) for e in trace["traceEvents"] if e.get("ph") == "X")
    return trace["baseTimeNanoseconds"] / 1e9 + first_us / 1e6


def run_a(overrides: list[str], rank_start: str | None = None) -> dict:
    """One sweeper point: wall time, median step, spec, first loss, phases (s). ``rank_start``: the point's
    ``SWEEPER_RANK_START`` (None: sweeper's default, ranks forked from the pre-flight worker on CPU)."""
    env = None if rank_start is None else {**os.environ, "SWEEPER_RANK_START": rank_start}
    with tempfile.TemporaryDirectory(prefix="overhead_a_") as tmp:
        wall, w0, w1 = run([sys.executable, "-m", "sweeper", *overrides], Path(tmp), env)
        result = next(Path(tmp).glob("multirun/*/points/*/result.json"))
        rec, pdir, sdir = json.loads(result.read_text()), result.parent, result.parents[2]
        if rec["status"] != "ok":
            sys.exit(f"sweeper point {rec['status']}: {rec.get('reason')}")
        t = {p.name: p.stat().st_mtime for p in [*sdir.iterdir(), *pdir.iterdir()] if p.is_file()}
        ranks = [json.loads(p.read_text()) | {"t_end": t[p.name]} for p in pdir.glob("rank*.json")]
        # ranks train in lock-step, then rank 0 alone measures the MFU peak: take training from another rank
        r = max(ranks, key=lambda r: r["rank"])
        marks = dict(start=w0, sweep=t["sweep.json"], spec=t["spec.json"], end=w1)
        marks.update(train0=r["t_end"] - r["train_wall_s"], train1=r["t_end"])
        marks["written"] = max(x["t_end"] for x in ranks)
        marks["profile0"] = trace_start(pdir / f"trace_rank{r['rank']}.json") or r["t_end"]
        marks["ranks_end"] = t["spec.json"] + rec["wall_time_s"]
        marks["report"] = max(v for k, v in t.items() if k.startswith(("report", "results", "frontier")))
    m = rec["metrics"]
    return dict(wall=wall, step=m["step_time_s_median"], loss=m["loss_first"], spec=rec["spec"], marks=marks)


def run_grid_a(overrides: list[str], k: int) -> dict:
    """One multirun over seeds 0..k-1: wall time, once-per-sweep time (s), and per point (by seed) step, loss,
    spec. Once per sweep: driver start to sweep.json, and the last point's record to the end (report, exit)."""
    with tempfile.TemporaryDirectory(prefix="overhead_a_") as tmp:
        cmd = [sys.executable, "-m", "sweeper", "-m", f"seed=range(0,{k})", *overrides]
        wall, w0, w1 = run(cmd, Path(tmp))
        results = list(Path(tmp).glob("multirun/*/points/*/result.json"))
        recs = sorted((json.loads(p.read_text()) for p in results), key=lambda r: r["spec"]["seed"])
        if bad := [f"{r['point_id']}: {r['status']} {r.get('reason')}" for r in recs if r["status"] != "ok"]:
            sys.exit("sweeper points not ok:\n" + "\n".join(bad))
        if len(recs) != k:
            sys.exit(f"expected {k} point records, found {len(recs)}")
        t_sweep = (results[0].parents[2] / "sweep.json").stat().st_mtime
        once = (t_sweep - w0) + (w1 - max(p.stat().st_mtime for p in results))
    points = [
        dict(step=r["metrics"]["step_time_s_median"], loss=r["metrics"]["loss_first"], spec=r["spec"]) for r in recs
    ]
    return dict(wall=wall, once=once, points=points)


def run_b(script: Path, spec: dict) -> dict:
    """The bare script on A's ranks: wall time, median step (slowest rank), first loss, phases (s)."""
    with tempfile.TemporaryDirectory(prefix="overhead_b_") as tmp:
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--max-restarts=0"]
        cmd = [*launch, f"--nproc-per-node={spec['ranks_per_node']}", str(script), "spec.json", tmp]
        wall, w0, w1 = run(cmd, Path(tmp))
        ranks = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank*.json"))]
    r = ranks[-1]  # as for A, phases from the last rank
    step = statistics.median(map(max, zip(*(x["step_times_s"] for x in ranks), strict=True)))
    profile0 = spec["warmup_steps"] + spec["timed_steps"] + spec["memory_steps"]
    t_profile0 = r["begins"][profile0] if profile0 < len(r["begins"]) else r["t_train1"]
    marks = dict(start=w0, train0=r["t_train0"], profile0=t_profile0, train1=r["t_train1"], ranks_end=w1)
    return dict(wall=wall, step=step, loss=r["losses"][0], marks=marks)


def check_plain(spec: dict) -> None:
    if differ := {k: spec[k] for k, v in PLAIN.items() if spec[k] != v}:
        sys.exit(f"the bare script is plain DDP; no counterpart for {differ}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="A/B pairs, run interleaved (default 3)")
    ap.add_argument("--overrides", nargs="*", default=[], help="extra sweeper overrides, e.g. seq_len=256")
    ap.add_argument("--timed-steps", type=int, help="sweeper's timed_steps (default: sweeper's config)")
    ap.add_argument("--grid", type=int, metavar="K", help="A = one multirun over seed=range(0,K), B = K bare runs")
    ap.add_argument(
        "--exec-too",
        action="store_true",
        help="also run each point with SWEEPER_RANK_START=exec (fresh ranks under torchrun: A') beside A and B",
    )
    opt = ap.parse_args()
    overrides = opt.overrides + ([f"timed_steps={opt.timed_steps}"] if opt.timed_steps else [])
    if opt.grid and any(o.lstrip("+~").startswith("seed=") for o in overrides):
        sys.exit("--grid sweeps the seed; leave seed out of --overrides")
    a, b, a_exec = [], [], []
    if opt.exec_too and opt.grid:
        sys.exit("--exec-too compares one point at a time; leave out --grid")
    with tempfile.TemporaryDirectory(prefix="overhead_") as tmp:
        (script := Path(tmp) / "bare_trainer.py").write_text(BARE)
        for i in range(opt.repeats):
            if not opt.grid:
                a.append(run_a(overrides))
                check_plain(a[-1]["spec"])
                b.append(run_b(script, a[-1]["spec"]))
                if opt.exec_too:
                    a_exec.append(run_a(overrides, "exec"))
                told = f", A' {a_exec[i]['wall']:.1f} s" if opt.exec_too else ""
                print(f"repeat {i + 1}/{opt.repeats}: A {a[i]['wall']:.1f} s, B {b[i]['wall']:.1f} s{told}", flush=True)
                continue
            for side in ("A", "B") if i % 2 == 0 else ("B", "A"):  # B's specs: the first grid's records
                if side == "A":
                    a.append(run_grid_a(overrides, opt.grid))
                    for p in a[-1]["points"]:
                        check_plain(p["spec"])
                else:
                    b.append([run_b(script, p["spec"]) for p in a[0]["points"]])
            sum_b = sum(x["wall"] for x in b[i])
            print(f"repeat {i + 1}/{opt.repeats}: A {a[i]['wall']:.1f} s, B x {opt.grid} {sum_b:.1f} s", flush=True)
    (grid_report if opt.grid else report)(a, b, overrides)
    if a_exec:
        exec_report(a, b, a_exec)
    print(f"\nfailed runs, retried: {len(failed_runs)}", end="")
    print("".join(f"\n  {what}: exit {rc}: {last}" for what, rc, last in failed_runs) if failed_runs else " (none)")


def report(a: list[dict], b: list[dict], overrides: list[str]) -> None:
    s = a[0]["spec"]
    print(f"\npoint: {' '.join(overrides) or '(defaults)'}, {s['ranks_per_node']} ranks; steps:", end=" ")
    print(f"{s['warmup_steps']} warm-up + {s['timed_steps']} timed + {s['memory_steps']} memory", end=" ")
    print(f"+ {s['profile_steps']} profile; first loss A {a[0]['loss']:.6f}, B {b[0]['loss']:.6f}")
    print("wall = whole command (perf_counter, incl. process start and imports); step = one optimizer step,")
    print("perf_counter on_step_begin -> on_step_end, slowest rank, median over the timed window\n")
    print("".join(f"{h:>10}" for h in HEAD))
    rows = [
        (x["wall"], y["wall"], x["wall"] / y["wall"], x["step"] * 1e3, y["step"] * 1e3, x["step"] / y["step"])
        for x, y in zip(a, b, strict=True)
    ]
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    for name, row in [*((str(i + 1), r) for i, r in enumerate(rows)), ("median", med)]:
        print(f"{name:>10}" + "".join(f"{v:10.{3 if j in (2, 5) else 2}f}" for j, v in enumerate(row)))
    print(f"\nharness adds {(med[2] - 1) * 100:.0f} % to a point's wall time (median A/B; goal < 10 %)")
    print(f"timed steps: ratio A/B {med[5]:.3f} (~1.00 expected)\n")
    print(f"{'where the wall time goes (median s over repeats)':<50}{'A':>7}{'B':>7}{'A-B':>7}")
    own = 0.0
    for name in PHASES.values():
        ta, tb = (statistics.median(phases(x["marks"])[name] for x in runs) for runs in (a, b))
        own += ta - tb
        print(f"{name:<50}{ta:7.2f}{tb:7.2f}{ta - tb:+7.2f}")
    print(f"\nthe harness's net cost: {own:+.2f} s = {own / med[1] * 100:+.0f} % of B's median wall (A-B, all phases)")
    print("(A's ranks are forked from the pre-flight worker, which imported torch and transformers in the driver's")
    print("start: A pays those imports once there, B's ranks each pay them in 'ranks start'; A's ranks skip")
    print("interpreter teardown with os._exit, B's plain script does not)")


def exec_report(a: list[dict], b: list[dict], a_exec: list[dict]) -> None:
    """A (forked ranks, the default) against A' (``SWEEPER_RANK_START=exec``: fresh ranks under torchrun), each
    repeat's three runs side by side: wall, median step and the first loss (the same model, data and seed)."""
    print("\nA = ranks forked from the pre-flight worker (default), A' = fresh ranks under torchrun (exec)")
    print("".join(f"{h:>11}" for h in ("repeat", "wall A s", "wall A' s", "A/A'", "A'/B", "step A/A'", "loss A-A'")))
    rows = [
        (
            x["wall"],
            z["wall"],
            x["wall"] / z["wall"],
            z["wall"] / y["wall"],
            x["step"] / z["step"],
            x["loss"] - z["loss"],
        )
        for x, y, z in zip(a, b, a_exec, strict=True)
    ]
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    for name, row in [*((str(i + 1), r) for i, r in enumerate(rows)), ("median", med)]:
        print(f"{name:>11}" + "".join(f"{v:11.{3 if j >= 2 else 2}f}" for j, v in enumerate(row)))


def grid_report(a: list[dict], b: list[list[dict]], overrides: list[str]) -> None:
    k, s = len(a[0]["points"]), a[0]["points"][0]["spec"]
    pairs = list(zip(a, b, strict=True))  # per repeat: (one grid run, its K bare runs)
    print(f"\ngrid: seed=range(0,{k}) {' '.join(overrides) or '(defaults)'}, {s['ranks_per_node']} ranks;", end=" ")
    print(
        f"steps per point: {s['warmup_steps']} + {s['timed_steps']} timed + {s['memory_steps']} + {s['profile_steps']}"
    )
    dloss = max(abs(p["loss"] - q["loss"]) for x, y in pairs for p, q in zip(x["points"], y, strict=True))
    print(f"first losses, A vs B, all points: max |difference| {dloss:.2g}")
    print(f"A = one multirun of {k} points (one driver, one report); B = {k} bare runs, one per point;")
    print(f"overhead per point = (wall A - sum B) / {k}; % = of the mean bare wall; step A/B: median over points\n")
    print("".join(f"{h:>11}" for h in ("repeat", "wall A s", "sum B s", "ovh/pt s", "ovh/pt %", "step A/B")))
    rows, ratios, rest = [], [], []
    for x, y in pairs:
        sum_b = sum(q["wall"] for q in y)
        r = [p["step"] / q["step"] for p, q in zip(x["points"], y, strict=True)]
        rows.append(
            (x["wall"], sum_b, (x["wall"] - sum_b) / k, (x["wall"] - sum_b) / sum_b * 100, statistics.median(r))
        )
        ratios += r
        rest.append((x["wall"] - x["once"] - sum_b) / k)
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    for name, row in [*((str(i + 1), r) for i, r in enumerate(rows)), ("median", med)]:
        print(f"{name:>11}" + "".join(f"{v:11.{3 if j == 4 else 2}f}" for j, v in enumerate(row)))
    print(f"\nharness adds {med[2]:.2f} s = {med[3]:.0f} % per point in a {k}-point sweep (median; goal < 10 %)")
    print(f"timed steps: ratio A/B {statistics.median(ratios):.3f}, median over all {len(ratios)} points", end=" ")
    print(f"(range {min(ratios):.2f} to {max(ratios):.2f}; ~1.00 expected)")
    once = statistics.median(x["once"] for x in a)
    print(f"once per sweep (driver start to sweep.json, last record to exit: report, exit): {once:.2f} s;")
    print(f"the rest, per point: {statistics.median(rest):.2f} s (median over repeats)")


if __name__ == "__main__":
    main()
