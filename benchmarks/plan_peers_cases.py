"""The measured sweeps of ``benchmarks/plan_peers.py`` (issue 18, item 5) and the pure helpers its tables use.

Each sweep is a name and the overrides of one ``python -m sweeper -m`` run on this machine's gloo CPU ranks (2 ranks,
the few steps of ``plan_accuracy.STEPS``). ``plan_peers.py --runs DIR`` keeps each in ``DIR/<name>`` and measures
only the ones missing there (``--remeasure NAME ...`` measures those again); nothing here imports torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from plan_accuracy import GPT2_SHAPED, STEPS

KIB = 1024
GIB = 2**30

#: The original grid: {tiny, GPT-2-shaped} x {DDP, ZeRO-1/2/3, FSDP full_shard} x {fp32, bf16} (20 ok points).
GRID = ["fsdp=none,full_shard", "zero=0,1,2,3", "precision=fp32,bf16"]

#: The new cases' sweeps (tiny model, DDP, fp32, batch 4 x 128 unless named).
OPTIM = ["+training_args.optim=sgd,adafactor,adagrad,adamw_torch"]
#: SGD with momentum: transformers' ``_get_sgd`` reads ``momentum`` from ``optim_args`` ("k=v,k=v").
OPTIM_MOMENTUM = ["+training_args.optim=sgd", "+training_args.optim_args='momentum=0.9'"]
#: ZeRO-Offload of the optimizer on CPU ranks: does DeepSpeed run it on gloo here?
OFFLOAD_CPU = ["zero=2", "+deepspeed_config.zero_optimization.offload_optimizer.device=cpu"]
ACCUM = ["zero=0,2", "grad_accum=2"]
ACCUM_FSDP = ["fsdp=full_shard", "grad_accum=2"]
#: U24: a deeper bf16 llama shape under FSDP with checkpointing (off the grid the model was fitted on).
U24 = [
    "model=tiny",
    "model.config.hidden_size=256",
    "model.config.intermediate_size=688",
    "model.config.num_hidden_layers=16",
    "model.config.vocab_size=256",
    "seq_len=512",
    "per_device_batch_size=16",
    "gc=true",
    "precision=bf16",
    "fsdp=full_shard",
]
#: U25: GPT-2 (124M, tied head) under FSDP with checkpointing (the fewest steps the gate takes: 3 timed).
U25 = ["model=gpt2", "fsdp=full_shard", "gc=true", "per_device_batch_size=1", "seq_len=128"]

#: name -> (overrides, the step settings). In the order they run.
SWEEPS: dict[str, tuple[list[str], list[str]]] = {
    "tiny": (GRID, STEPS),
    "gpt2": ([*GPT2_SHAPED, *GRID], STEPS),
    "optim": (OPTIM, STEPS),
    "optim-momentum": (OPTIM_MOMENTUM, STEPS),
    "offload-cpu": (OFFLOAD_CPU, STEPS),
    "accum": (ACCUM, STEPS),
    "accum-fsdp": (ACCUM_FSDP, STEPS),
    "u24": (U24, STEPS),
    "u25": (U25, STEPS),
}


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Kendall's tau-b of two equally long sequences (ties counted as neither concordant nor discordant, and
    corrected for as tau-b does); None with fewer than 2 pairs or when one side is constant."""
    if len(xs) != len(ys):
        raise ValueError("kendall_tau: sequences of different lengths")
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
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return None if denom == 0 else (concordant - discordant) / denom


def rel(p: float | None, m: float | None) -> float | None:
    """``(p - m) / m``, or None when either is missing or ``m`` is 0."""
    return None if p is None or not m else (p - m) / m


def optim_label(training_args: dict) -> str:
    """The optimizer a point runs, as a row label: ``adamw_torch_fused`` (the Trainer's default with torch >= 2.8
    when ``optim`` is not given), ``sgd``, ``sgd momentum=0.9``."""
    name = str(training_args.get("optim") or "adamw_torch_fused")
    args = training_args.get("optim_args")
    return f"{name} {args}" if args else name


@dataclass
class Point:
    """One measured point and every peer's numbers for it (bytes; None with a footnote key when absent).

    ``label``: the row's label columns; ``measured``: quantity -> bytes (None: not measured, e.g. a failed point);
    ``status``: the record's status and reason when not ``ok``."""

    label: tuple[str, ...]
    measured: dict[str, int | None]
    predicted: dict[str, dict[str, float | None]] = field(default_factory=dict)
    why: dict[str, dict[str, str]] = field(default_factory=dict)
    status: str = "ok"


def cell(value: float | None, measured: float | None, why: str | None, keys: list[str], unit: int = KIB) -> str:
    """A peer's cell: its number in ``unit`` and its relative error against ``measured``; ``n/a [k]`` (``k`` the
    footnote of ``why``, appended to ``keys``); ``-`` when there is neither."""
    if value is None:
        if why is None:
            return f"{'-':>18}"
        if why not in keys:
            keys.append(why)
        return f"{'n/a [' + str(keys.index(why) + 1) + ']':>18}"
    err = rel(value, measured)
    return f"{value / unit:>10,.0f} {err:>+7.1%}" if err is not None else f"{value / unit:>10,.0f} {'':>7}"


def print_table(
    points: list[Point],
    peers: Sequence[str],
    quantities: Sequence[str],
    why_text: dict[str, str],
    head: Sequence[tuple[str, int]] = (("model", 11), ("strategy", 9), ("prec", 4)),
) -> list[str]:
    """The per-point table: label columns (``head``: name, width), the quantity, the measured KiB, and per peer
    its KiB and relative error. A quantity not measured on an ``ok`` point is left out (DeepSpeed's gradients); a
    point that did not measure shows ``-`` and its status under the rows. Prints the footnotes; returns their keys."""
    keys: list[str] = []
    label_head = " ".join(f"{name:{w}}" for name, w in head)
    line = f"{label_head} {'what':6} | {'measured KiB':>12} | " + " | ".join(f"{p + ' KiB, err':>18}" for p in peers)
    print(line)
    print("-" * len(line))
    for pt in points:
        label = " ".join(f"{v!s:{w}}" for v, (_, w) in zip(pt.label, head, strict=True))
        for q in quantities:
            m = pt.measured.get(q)
            if m is None and pt.status == "ok":
                continue
            cells = [cell(pt.predicted[p].get(q), m, pt.why[p].get(q), keys) for p in peers]
            shown = f"{m / KIB:>12,.0f}" if m is not None else f"{'-':>12}"
            print(f"{label} {q:6} | {shown} | " + " | ".join(cells))
        if pt.status != "ok":
            print(f"  not measured: {pt.status}")
        print()
    print("n/a:")
    for i, k in enumerate(keys, 1):
        print(f"  [{i}] {why_text[k]}")
    return keys


def print_summary(points: list[Point], peers: Sequence[str], quantities: Sequence[str]) -> None:
    """|relative error| per peer and quantity over the cells it answers, and how often sweeper's is the smallest."""
    print("\nSummary (|relative error| over the cells each peer answers):")
    print(f"{'peer':13} {'what':6} {'cells':>5} {'median':>8} {'max':>8}")
    for p in peers:
        for q in quantities:
            errs = [abs(e) for pt in points if (e := rel(pt.predicted[p].get(q), pt.measured.get(q))) is not None]
            if errs:
                print(f"{p:13} {q:6} {len(errs):>5} {statistics.median(errs):>8.1%} {max(errs):>8.1%}")
            else:
                print(f"{p:13} {q:6} {0:>5} {'n/a':>8} {'n/a':>8}")
    wins = total = 0
    for pt in points:
        for q in quantities:
            errs = {p: abs(e) for p in peers if (e := rel(pt.predicted[p].get(q), pt.measured.get(q))) is not None}
            if "sweeper" in errs and len(errs) > 1:
                total += 1
                wins += errs["sweeper"] <= min(errs.values())
    print(f"sweeper has the smallest |error| in {wins} of {total} cells where another peer also answers")
