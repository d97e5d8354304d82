"""Sweeper's memory model side by side with its peers, each against the measurement of the same configuration.

Measured: the real product on 2 gloo CPU ranks (``python -m sweeper -m ...``), per-rank parameter, gradient and
optimizer-state bytes (``sweeper.job.memory.model_state_bytes``) and the peak (MemTracker's tensor bytes). Grid:
{tiny (Llama-style, 210k params), a GPT-2-shaped model (n_embd=128, n_layer=2, n_head=4, vocab 4000)} x {DDP,
ZeRO-1, ZeRO-2, ZeRO-3, FSDP full_shard} x {fp32, bf16 autocast}, batch 4 x 128 tokens.

Predicted, for each point, by:

* **sweeper**: ``sweeper.capacity.memory.estimate_memory(spec, arch, "cpu")`` (its states and its CPU peak);
* **DeepSpeed**: ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs`` (the rows
  ``..._all_cold`` prints; ``cpu_offload`` / ``cpu_offload_params`` as the point offloads), fed by the counts of
  DeepSpeed's ``model_to_params`` (total, largest layer) taken on the model built on the meta device. ZeRO-2/3 only;
  one model-state total (no breakdown, no activations), for 16-bit weights;
* **accelerate**: what ``accelerate estimate-memory`` computes (``create_empty_model``: ``AutoModel`` under
  ``init_empty_weights``, reproduced offline; ``calculate_maximum_sizes``; ``estimate_training_usage``). Unsharded
  only; weights, gradients, Adam and the "Training using Adam" number it prints (``max`` of its four entries); no
  activations;
* **llm-analysis** 0.2.2 (pip ``llm-analysis``, installed only for this benchmark into a throwaway venv under the
  temp dir, ``benchmarks/requirements-peers.txt``): ``LLMAnalysis.training`` with the model config it reads from the
  HF ``config.json`` (written locally, read offline), DeepSpeed stage = the point's ``zero`` (0 for DDP), dp = 2,
  ``flash_attn=True`` (the ranks run SDPA), gated MLP for Llama. No FSDP; no 32-bit weights.

Each cell: the peer's number in KiB (binary) and its relative error ``(predicted - measured) / measured``; ``n/a [k]``
with footnote ``k`` saying why a peer has no number. Then a summary per peer, and the Llama-2-7B / 8 x H100 /
seq 4096 case the issue names: llm-analysis's CLI with plain DDP, with and without a batch size, and sweeper's
answer for the same.

Then issue 18's cases (``benchmarks/plan_peers_sections.py``; the sweeps are in ``plan_peers_cases.SWEEPS``):
optimizers (U14), offload (U15: Llama-2-7B on one A100 predicted, and a CPU ZeRO-2 offload point measured), gradient
accumulation (U16), off-grid shapes (U24, U25), throughput on every measured point with Kendall's tau (U18), and
Llama-2-7B / 8 x H100 tokens/s per engine.

    python benchmarks/plan_peers.py                            # measures what multirun/peers/ lacks, then prints
    python benchmarks/plan_peers.py --runs DIR                 # keeps the sweeps in DIR/<name> instead
    python benchmarks/plan_peers.py --remeasure accum accum-fsdp   # measures those sweeps again (after a fix)
    python benchmarks/plan_peers.py --no-measure               # prints from what is there, measures nothing
    python benchmarks/plan_peers.py --reuse DIR [DIR ...]      # the first table from these sweep dirs instead
    python benchmarks/plan_peers.py --llm-analysis-python PY   # a Python that already has llm-analysis
    python benchmarks/plan_peers.py --no-install               # never create the llm-analysis venv
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import plan_peers_sections as sections
from plan_peers_cases import SWEEPS, Point, print_summary, print_table
from plan_peers_estimators import WHY, _strategy, find_llm_analysis

HERE = Path(__file__).resolve().parent
DEFAULT_RUNS = HERE.parent / "multirun" / "peers"
PEERS = sections.PEERS
QUANTITIES = ("param", "grad", "optim", "states", "peak")


def measure(runs: Path, remeasure: set[str], allowed: bool) -> None:
    """Run each sweep of :data:`SWEEPS` that ``runs/<name>`` lacks (or that ``remeasure`` names), one after the
    other; a sweep that fails is kept as far as it got (its records say why)."""
    for name, (overrides, steps) in SWEEPS.items():
        out = runs / name
        if (out / "results.csv").exists() and name not in remeasure:
            continue
        if not allowed:
            print(f"not measured: {out} (--no-measure)", file=sys.stderr)
            continue
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", "wandb=off", *overrides, *steps]
        print("running:", " ".join(cmd[3:]), file=sys.stderr)
        with open(runs / f"{name}.log", "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)


def load(d: Path) -> list[tuple[Any, Any, Any]]:
    """(spec, arch, record) of every point of a sweep directory (any status); none when it is absent."""
    from sweeper.capacity.arch import Arch
    from sweeper.config.spec import PointSpec
    from sweeper.results.collect import collect_records

    if not d.exists():
        return []
    out = []
    for r in collect_records(d):
        spec = PointSpec.from_dict(r.spec)
        out.append((spec, Arch.from_config(spec.model_type, spec.model_config), r))
    return out


def grid_table(measured: list, python: str | None, why_missing: str, work: Path) -> None:
    """The original table: the grid's ok points, every quantity, every peer."""
    measured = sorted(
        (t for t in measured if t[2].status == "ok"),
        key=lambda t: (t[0].model, t[0].precision, t[0].fsdp != "none", t[0].zero),
    )
    label = lambda s: (s.model, _strategy(s), s.precision)  # noqa: E731
    points: list[Point] = sections.measured_points(measured, python, why_missing, work, label)
    print_table(points, PEERS, QUANTITIES, WHY)
    print(
        "Notes: 'states' = param + grad + optim per rank (under DeepSpeed the measurement cannot see its gradient "
        "partitions: grad is not measured, and DeepSpeed's own estimate includes them). DeepSpeed's and accelerate's "
        "'peak' is their model-state number (they model no activations), as a user reads it for 'memory needed'; "
        "accelerate's is the number its CLI prints ('Training using Adam': the max of its four entries), for the "
        "base model its CLI builds (AutoModel: no LM head, so an untied model's V x h output projection is "
        "missing). DeepSpeed's estimators assume 16-bit weights and gradients: the fp32 rows apply them as a user "
        "would. llm-analysis assumes 16-bit weights + fp32 master copy + fp32 gradients (18 bytes/param "
        "unsharded), counts the embedding once (shared_embedding=True) and an MLP of 2 x h x 4h. KiB = 1024 bytes."
    )
    print_summary(points, PEERS, ("states", "peak"))


# ---- Llama-2-7B on 8 x H100 ----------------------------------------------------------------------------------


def seven_b(python: str | None, why_missing: str) -> None:
    """llm-analysis's CLI on Llama-2-7B / 8 x H100 SXM 80GB / seq 4096 / plain DDP, and sweeper's answer."""
    print("\n== Llama-2-7B, 8 x H100 80GB, seq_len 4096, bf16, plain DDP (the issue's case) ==")
    base = [
        "-m",
        "llm_analysis.analysis",
        "train",
        "--model_name",
        "NousResearch_Llama-2-7b-hf",
        "--gpu_name",
        "h100-sxm-80gb",
        "--dtype_name",
        "w16a16e16",
        "--seq_len",
        "4096",
        "--total_num_gpus",
        "8",
        "--ds_zero",
        "0",
        "--total_num_tokens",
        "1e12",
    ]
    if python is None:
        print(f"llm-analysis: n/a ({why_missing})")
    else:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        for extra in ([], ["--batch_size_per_gpu", "1"]):
            cmd = ["python", *base, *extra]
            proc = subprocess.run([python, *base, *extra], capture_output=True, text=True, env=env)
            print(f"$ {' '.join(cmd)}\n  exit status {proc.returncode}")
            if proc.returncode == 0:
                s = json.loads(proc.stdout[proc.stdout.index("{") :])
                gib = 1024**3
                print(
                    f"  no error. batch_size_per_gpu={s['batch_size_per_gpu']}, "
                    f"max_batch_size_per_gpu={s['max_batch_size_per_gpu']}, "
                    f"global_batch_size={s['global_batch_size']}; (weight+op_state+grad) "
                    f"{s['(weight+op_state+grad)_memory_per_gpu'] / gib:.2f} GiB, activations "
                    f"{s['activation_memory_per_gpu'] / gib:.2f} GiB, total "
                    f"{s['(weight+op_state+grad+act)_memory_per_gpu'] / gib:.2f} GiB per GPU "
                    f"(it prints these binary GiB as 'GB'); latency_per_iter {s['latency_per_iter']:.3f} s; "
                    f"total_training_latency {s['total_training_latency'] / 86400:.2f} days, "
                    f"gpu_hours {s['gpu_hours']:.0f}"
                )
            else:
                print("  " + "\n  ".join(proc.stderr.strip().splitlines()[-1:]))
    import yaml
    from omegaconf import OmegaConf

    from sweeper.capacity.arch import Arch
    from sweeper.capacity.memory import estimate_memory
    from sweeper.config.schema import schema_node
    from sweeper.config.spec import from_config
    from sweeper.paths import conf_dir
    from sweeper.units import GIB

    model = yaml.safe_load((conf_dir() / "model" / "llama-2-7b.yaml").read_text())
    cluster = yaml.safe_load((conf_dir() / "cluster" / "h100-80gb.yaml").read_text())
    capacity = cluster["gpu_mem_gib"]
    arch = Arch.from_config(model["model_type"], model["config"])
    print(f"sweeper (estimate_memory, device cuda, capacity {capacity} GiB = torch's total_memory of an H100 80GB):")
    for fsdp, zero in (("none", 0), ("none", 1), ("none", 2), ("none", 3), ("full_shard", 0)):
        for gc in (False, True):
            base_cfg = OmegaConf.merge(schema_node(), {"model": model})
            spec = from_config(
                OmegaConf.merge(
                    base_cfg,
                    {
                        "fsdp": fsdp,
                        "zero": zero,
                        "gc": gc,
                        "precision": "bf16",
                        "seq_len": 4096,
                        "per_device_batch_size": 1,
                        "ranks_per_node": 8,
                        "device": "cuda",
                    },
                )
            )
            est = estimate_memory(spec, arch, "cuda")
            fits = "fits" if est.device_bytes <= capacity * GIB else "does not fit"
            print(
                f"  {_strategy(spec):9} gc={str(gc).lower():5} batch 1: {est.device_bytes / GIB:7.2f} GiB "
                f"({est.peak_phase} peak {est.peak_bytes / GIB:.2f} GiB + CUDA context, NCCL, fragmentation): {fits}"
            )
    print(
        "  (largest batch and days for 1T tokens: "
        "python -m sweeper.plan model=llama-2-7b cluster=h100-80gb seq_len=4096)"
    )


# ---- main -----------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="where the sweeps are kept (DIR/<name>)")
    parser.add_argument("--remeasure", nargs="*", default=[], choices=sorted(SWEEPS), help="sweeps to run again")
    parser.add_argument("--no-measure", action="store_true", help="measure nothing: print from what is there")
    parser.add_argument("--reuse", nargs="*", type=Path, help="sweep directories for the first table instead")
    parser.add_argument("--llm-analysis-python", help="a Python interpreter that has llm-analysis installed")
    parser.add_argument("--no-install", action="store_true", help="do not create the throwaway llm-analysis venv")
    args = parser.parse_args()

    import accelerate
    import deepspeed
    import transformers

    measure(args.runs, set(args.remeasure), not args.no_measure)
    runs = {name: load(args.runs / name) for name in SWEEPS}
    grid_dirs = list(args.reuse or [args.runs / "tiny", args.runs / "gpt2"])
    grid = [t for d in grid_dirs for t in load(d)]
    python, why_missing = find_llm_analysis(args)
    work = Path(tempfile.mkdtemp(prefix="plan_peers_"))

    la_version = "not installed"
    if python:
        proc = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('llm-analysis'))"],
            capture_output=True,
            text=True,
        )
        la_version = proc.stdout.strip() or la_version
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    n_ok = sum(t[2].status == "ok" for t in grid)
    print(
        f"Checkout (benchmark and model) at commit {commit.stdout.strip() or '?'}. Measured: {n_ok} ok grid points "
        "from "
        f"{', '.join(map(str, grid_dirs))}, 2 gloo CPU ranks, batch 4 x 128 tokens. DeepSpeed {deepspeed.__version__}, "
        f"accelerate {accelerate.__version__}, transformers {transformers.__version__}, llm-analysis {la_version}.\n"
    )
    grid_table(grid, python, why_missing, work)
    seven_b(python, why_missing)

    def fp32_grid(engine: str) -> list:  # the grid's tiny fp32 point of an engine (grad_accum=1, AdamW)
        return [
            t for t in runs["tiny"] if t[2].status == "ok" and t[0].precision == "fp32" and _strategy(t[0]) == engine
        ]

    sections.optimizers([*fp32_grid("DDP"), *runs["optim"], *runs["optim-momentum"]], python, why_missing, work)
    sections.offload(runs["offload-cpu"], python, why_missing, work)
    accum = [*fp32_grid("DDP"), *fp32_grid("ZeRO-2"), *fp32_grid("FSDP-full"), *runs["accum"], *runs["accum-fsdp"]]
    sections.accumulation(accum, python, why_missing, work)
    sections.off_grid([*runs["u24"], *runs["u25"]], python, why_missing, work)
    everything = [t for name in SWEEPS for t in runs[name]]
    sections.throughput(everything, python, why_missing, work)
    sections.seven_b_throughput(python, why_missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
