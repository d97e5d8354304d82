"""Sweeper's memory model side by side with its peers, each against the measurement of the same configuration.

Measured: the real product on 2 gloo CPU ranks (``python -m sweeper -m ...``), per-rank parameter, gradient and
optimizer-state bytes (``sweeper.job.memory.model_state_bytes``) and the peak (MemTracker's tensor bytes). Grid:
{tiny (Llama-style, 210k params), a GPT-2-shaped model (n_embd=128, n_layer=2, n_head=4, vocab 4000)} x {DDP,
ZeRO-1, ZeRO-2, ZeRO-3, FSDP full_shard} x {fp32, bf16 autocast}, batch 4 x 128 tokens.

Predicted, for each point, by:

* **sweeper**: ``sweeper.capacity.memory.estimate_memory(spec, arch, "cpu")`` (its states and its CPU peak);
* **DeepSpeed** 0.19: ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs``
  (``cpu_offload=False``), fed by DeepSpeed's own ``model_to_params`` on the instantiated CPU model. ZeRO-2/3 only;
  one model-state total (no breakdown, no activations), for 16-bit weights;
* **accelerate** 1.15: what ``accelerate estimate-memory`` computes (``create_empty_model``: ``AutoModel`` under
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

    python benchmarks/plan_peers.py                            # runs the two sweeps (20 points, ~4-7 min on 2 cores)
    python benchmarks/plan_peers.py --reuse DIR [DIR ...]      # reads existing sweep directories instead
    python benchmarks/plan_peers.py --llm-analysis-python PY   # a Python that already has llm-analysis
    python benchmarks/plan_peers.py --no-install               # never create the llm-analysis venv
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from plan_accuracy import GPT2_SHAPED, STEPS  # the same sweep settings and GPT-2-shaped model (benchmarks/)

HERE = Path(__file__).resolve().parent
GRID = ["fsdp=none,full_shard", "zero=0,1,2,3", "precision=fp32,bf16"]
PEERS = ("sweeper", "DeepSpeed", "accelerate", "llm-analysis")
QUANTITIES = ("param", "grad", "optim", "states", "peak")
DEFAULT_VENV = Path(tempfile.gettempdir()) / "sweeper-peers-venv"
KIB = 1024

#: Why a peer has no number (footnotes of the table).
WHY: dict[str, str] = {
    "ds-strategy": "DeepSpeed has model-state estimators for ZeRO-2 and ZeRO-3 only (none for DDP, ZeRO-1 or FSDP)",
    "ds-total": "DeepSpeed's estimators give one model-state total: no split into parameters, gradients, optimizer",
    "acc-shard": "accelerate's estimate has no sharding: unsharded training (DDP / one rank) only",
    "la-fsdp": "llm-analysis models no FSDP (ds_zero 0-3, tensor/pipeline/expert parallelism only)",
}

#: llm-analysis, run inside its own venv: reads jobs (JSON list) on stdin, prints {id: summary or error} as JSON.
LLM_ANALYSIS_RUNNER = r"""
import json, logging, sys, traceback
from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
from llm_analysis.config import DtypeConfig, GPUConfig, ParallelismConfig, get_model_config_by_name
from llm_analysis.logger import logger
logger.setLevel(logging.ERROR)
# a CPU rank has no device memory of its own: a large capacity, so that only the bytes are compared
cpu = GPUConfig(name="cpu-rank", mem_per_GPU_in_GB=1024, hbm_bandwidth_in_GB_per_sec=100,
                intra_node_bandwidth_in_GB_per_sec=10, intra_node_min_message_latency=1e-5, peak_fp16_TFLOPS=1)
out = {}
for job in json.load(sys.stdin):
    try:
        bits = job["bits"]
        analysis = LLMAnalysis(
            get_model_config_by_name(job["hf_dir"]), cpu,
            DtypeConfig(name=f"w{bits}a{bits}e{bits}", weight_bits=bits, activation_bits=bits, embedding_bits=bits),
            ParallelismConfig(dp_size=job["dp"]))
        s = analysis.training(
            batch_size_per_gpu=job["batch"], seq_len=job["seq"], ds_zero=DSZeRO(job["zero"]),
            activation_recomputation=ActivationRecomputation(2 if job["gc"] else 0), flash_attn=True,
            mlp_gated_linear_units=job["gated"])
        out[job["id"]] = {k: s[k] for k in ("weight_memory_per_gpu", "gradient_memory_per_gpu",
                                            "optimizer_state_memory_per_gpu", "activation_memory_per_gpu",
                                            "(weight+op_state+grad+act)_memory_per_gpu", "num_params_total")}
    except Exception as e:  # its own assertions: reported, not fatal
        tb = traceback.extract_tb(e.__traceback__)[-1]
        out[job["id"]] = {"error": f"{type(e).__name__}: {e} ({tb.name}, analysis.py:{tb.lineno})"}
print(json.dumps(out))
"""


@dataclass
class Point:
    """One measured point and every peer's numbers for it (bytes; None with a footnote key when absent)."""

    label: tuple[str, str, str]
    measured: dict[str, int | None]
    predicted: dict[str, dict[str, float | None]] = field(default_factory=dict)
    why: dict[str, dict[str, str]] = field(default_factory=dict)


def _sweep(args: list[str], out: Path) -> Path:
    cmd = [sys.executable, "-m", "sweeper", "-m", f"hydra.sweep.dir={out}", *args, *STEPS]
    print("running:", " ".join(cmd[2:]), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def _strategy(spec: Any) -> str:
    if spec.zero:
        return f"ZeRO-{spec.zero}"
    return {"none": "DDP", "full_shard": "FSDP-full", "shard_grad_op": "FSDP-grad"}.get(spec.fsdp, spec.fsdp)


def _hf_config(spec: Any) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(spec.model_type, **spec.model_config)


# ---- peers ----------------------------------------------------------------------------------------------------


def sweeper_answer(spec: Any, arch: Any) -> dict[str, float | None]:
    """Sweeper's states (as the harness counts them) and its CPU peak."""
    from sweeper.capacity.memory import estimate_memory

    est = estimate_memory(spec, arch, "cpu")
    st = est.states
    return {
        "param": st.param_bytes,
        "grad": st.grad_bytes,
        "optim": st.optimizer_state_bytes,
        "states": st.param_bytes + (st.grad_bytes or 0) + st.optimizer_state_bytes,
        "peak": est.peak_bytes,
    }


@cache
def _deepspeed_params(spec_json: str) -> tuple[int, int]:
    """(total params, largest layer params) by DeepSpeed's ``stage3.model_to_params`` on the real CPU model (real
    data pointers: on the meta device its de-duplication by ``data_ptr()`` would collapse every tensor into one)."""
    from deepspeed.runtime.zero.stage3 import model_to_params
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = json.loads(spec_json)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(spec["model_type"], **spec["model_config"]))
    return model_to_params(model)


def deepspeed_answer(spec: Any) -> tuple[dict[str, float | None], dict[str, str]]:
    """DeepSpeed's ZeRO-2/3 estimator (GPU side, no offload): one total, given as the states and the peak."""
    if spec.zero not in (2, 3):
        return {}, dict.fromkeys(QUANTITIES, "ds-strategy")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    key = json.dumps({"model_type": spec.model_type, "model_config": spec.model_config}, sort_keys=True)
    total, largest = _deepspeed_params(key)
    kw = dict(num_gpus_per_node=spec.ranks_per_node, num_nodes=spec.nodes, cpu_offload=False)
    if spec.zero == 2:
        gpu = estimate_zero2_model_states_mem_needs(total, **kw)[1]
    else:
        gpu = estimate_zero3_model_states_mem_needs(total, largest, **kw)[1]
    return {"states": gpu, "peak": gpu}, dict.fromkeys(("param", "grad", "optim"), "ds-total")


@cache
def _accelerate_total(spec_json: str) -> int:
    """Bytes ``accelerate estimate-memory`` sizes the fp32 model at: ``create_empty_model`` builds
    ``AutoModel.from_config`` (the base model, no LM head) under ``init_empty_weights``; ``calculate_maximum_sizes``
    adds parameters and buffers."""
    import torch
    from accelerate import init_empty_weights
    from accelerate.utils import calculate_maximum_sizes
    from transformers import AutoConfig, AutoModel

    spec = json.loads(spec_json)
    with init_empty_weights():
        model = AutoModel.from_config(
            AutoConfig.for_model(spec["model_type"], **spec["model_config"]), dtype=torch.float32
        )
    return calculate_maximum_sizes(model)[0]


def accelerate_answer(spec: Any) -> tuple[dict[str, float | None], dict[str, str]]:
    """accelerate's ``estimate_training_usage`` for the point's precision (unsharded only)."""
    if spec.zero or spec.fsdp != "none":
        return {}, dict.fromkeys(QUANTITIES, "acc-shard")
    from accelerate.commands.estimate import estimate_training_usage

    key = json.dumps({"model_type": spec.model_type, "model_config": spec.model_config}, sort_keys=True)
    usage = estimate_training_usage(_accelerate_total(key), "float32" if spec.precision == "fp32" else "bfloat16")
    return {
        "param": usage["model"],
        "grad": usage["gradients"],
        "optim": usage["optimizer"],
        "states": usage["model"] + usage["gradients"] + usage["optimizer"],
        "peak": max(usage.values()),  # the "Training using Adam" column the CLI prints
    }, {}


def llm_analysis_answers(points: list[tuple[Any, Any]], python: str | None, why_missing: str, work: Path) -> list:
    """llm-analysis for every point, in one run of its own interpreter. Returns per point (answer, why)."""
    if python is None:
        WHY["la-missing"] = why_missing
        return [({}, dict.fromkeys(QUANTITIES, "la-missing")) for _ in points]
    jobs, dirs = [], {}
    for i, (spec, _arch) in enumerate(points):
        if spec.fsdp != "none":
            continue
        key = (spec.model_type, json.dumps(spec.model_config, sort_keys=True))
        if key not in dirs:
            dirs[key] = work / f"hf-config-{len(dirs)}"
            _hf_config(spec).save_pretrained(dirs[key])
        jobs.append(
            {
                "id": str(i),
                "hf_dir": str(dirs[key]),
                "bits": 32 if spec.precision == "fp32" else 16,
                "dp": spec.ranks_per_node * spec.nodes,
                "zero": spec.zero,
                "batch": spec.per_device_batch_size,
                "seq": spec.seq_len,
                "gc": spec.gc,
                "gated": spec.model_type != "gpt2",
            }
        )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [python, "-c", LLM_ANALYSIS_RUNNER], input=json.dumps(jobs), capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        WHY["la-missing"] = f"llm-analysis did not run: {proc.stderr.strip().splitlines()[-1:]}"
        return [({}, dict.fromkeys(QUANTITIES, "la-missing")) for _ in points]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    out = []
    for i, (spec, _arch) in enumerate(points):
        if spec.fsdp != "none":
            out.append(({}, dict.fromkeys(QUANTITIES, "la-fsdp")))
            continue
        r = results[str(i)]
        if "error" in r:
            key = f"la-error: {r['error']}"
            WHY[key] = f"llm-analysis stops with {r['error']}"
            out.append(({}, dict.fromkeys(QUANTITIES, key)))
            continue
        w, g, o = r["weight_memory_per_gpu"], r["gradient_memory_per_gpu"], r["optimizer_state_memory_per_gpu"]
        out.append(
            (
                {
                    "param": w,
                    "grad": g,
                    "optim": o,
                    "states": w + g + o,
                    "peak": r["(weight+op_state+grad+act)_memory_per_gpu"],
                },
                {},
            )
        )
    return out


def find_llm_analysis(args: argparse.Namespace) -> tuple[str | None, str]:
    """A Python with llm-analysis: the one given, the throwaway venv, or a new throwaway venv (pip, PyPI).
    Returns (python or None, why not)."""
    if args.llm_analysis_python:
        return args.llm_analysis_python, ""
    py = DEFAULT_VENV / "bin" / "python"
    check = [str(py), "-c", "import llm_analysis.analysis"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(py), ""
    if args.no_install:
        return None, f"llm-analysis not installed ({DEFAULT_VENV} has none; --no-install given)"
    print(f"installing llm-analysis into {DEFAULT_VENV} (throwaway venv, not the project's)", file=sys.stderr)
    steps = [
        [sys.executable, "-m", "venv", str(DEFAULT_VENV)],
        [str(py), "-m", "pip", "install", "-q", "-r", str(HERE / "requirements-peers.txt")],
    ]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            return None, f"llm-analysis could not be installed: `{' '.join(step[2:])}` failed: {tail}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return None, "llm-analysis installed but does not import"
    return str(py), ""


# ---- the table ------------------------------------------------------------------------------------------------


def _rel(p: float | None, m: float | None) -> float | None:
    return None if p is None or not m else (p - m) / m


def _cell(value: float | None, measured: float | None, why: str | None, keys: list[str]) -> str:
    if value is None:
        if why is None:
            return f"{'-':>18}"
        if why not in keys:
            keys.append(why)
        return f"{'n/a [' + str(keys.index(why) + 1) + ']':>18}"
    err = _rel(value, measured)
    return f"{value / KIB:>10,.0f} {err:>+7.1%}" if err is not None else f"{value / KIB:>10,.0f} {'':>7}"


def print_table(points: list[Point]) -> None:
    keys: list[str] = []
    head = f"{'model':11} {'strategy':9} {'prec':4} {'what':6} | {'measured KiB':>12} | " + " | ".join(
        f"{p + ' KiB, err':>18}" for p in PEERS
    )
    print(head)
    print("-" * len(head))
    for pt in points:
        for q in QUANTITIES:
            m = pt.measured.get(q)
            if m is None:
                continue  # DeepSpeed's gradients: not observable, not measured
            cells = [_cell(pt.predicted[p].get(q), m, pt.why[p].get(q), keys) for p in PEERS]
            print(f"{pt.label[0]:11} {pt.label[1]:9} {pt.label[2]:4} {q:6} | {m / KIB:>12,.0f} | " + " | ".join(cells))
        print()
    print("n/a:")
    for i, k in enumerate(keys, 1):
        print(f"  [{i}] {WHY[k]}")
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


def print_summary(points: list[Point]) -> None:
    print("\nSummary (|relative error| over the cells each peer answers):")
    print(f"{'peer':13} {'what':6} {'cells':>5} {'median':>8} {'max':>8}")
    for p in PEERS:
        for q in ("states", "peak"):
            errs = [abs(e) for pt in points if (e := _rel(pt.predicted[p].get(q), pt.measured.get(q))) is not None]
            if errs:
                print(f"{p:13} {q:6} {len(errs):>5} {statistics.median(errs):>8.1%} {max(errs):>8.1%}")
            else:
                print(f"{p:13} {q:6} {0:>5} {'n/a':>8} {'n/a':>8}")
    wins = total = 0
    for pt in points:
        for q in QUANTITIES:
            errs = {p: abs(e) for p in PEERS if (e := _rel(pt.predicted[p].get(q), pt.measured.get(q))) is not None}
            if len(errs) > 1:
                total += 1
                wins += errs["sweeper"] <= min(errs.values())
    print(f"sweeper has the smallest |error| in {wins} of {total} cells where another peer also answers")


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
    parser.add_argument("--reuse", nargs="*", type=Path, help="existing sweep directories to read")
    parser.add_argument("--llm-analysis-python", help="a Python interpreter that has llm-analysis installed")
    parser.add_argument("--no-install", action="store_true", help="do not create the throwaway llm-analysis venv")
    args = parser.parse_args()

    import accelerate
    import deepspeed
    import transformers

    from sweeper.capacity.arch import Arch
    from sweeper.config.spec import PointSpec
    from sweeper.results.collect import collect_records

    work = Path(tempfile.mkdtemp(prefix="plan_peers_"))
    dirs = list(args.reuse or [])
    if not dirs:
        dirs = [_sweep(GRID, work / "tiny"), _sweep([*GPT2_SHAPED, *GRID], work / "gpt2")]
    python, why_missing = find_llm_analysis(args)

    measured: list[tuple[Any, Any, Any]] = []
    for d in dirs:
        for r in collect_records(d):
            if r.status != "ok":
                continue
            spec = PointSpec.from_dict(r.spec)
            measured.append((spec, Arch.from_config(spec.model_type, spec.model_config), r))
    measured.sort(key=lambda t: (t[0].model, t[0].precision, t[0].fsdp != "none", t[0].zero))

    la = llm_analysis_answers([(s, a) for s, a, _ in measured], python, why_missing, work)
    answers: dict[str, Callable[[Any, Any], tuple[dict, dict]]] = {
        "sweeper": lambda s, a: (sweeper_answer(s, a), {}),
        "DeepSpeed": lambda s, a: deepspeed_answer(s),
        "accelerate": lambda s, a: accelerate_answer(s),
    }
    points = []
    for (spec, arch, r), la_answer in zip(measured, la, strict=True):
        m = r.metrics
        states = m["param_bytes_per_rank"] + (m["grad_bytes_per_rank"] or 0) + m["optimizer_state_bytes_per_rank"]
        pt = Point(
            label=(spec.model, _strategy(spec), spec.precision),
            measured={
                "param": m["param_bytes_per_rank"],
                "grad": m["grad_bytes_per_rank"],
                "optim": m["optimizer_state_bytes_per_rank"],
                "states": states,
                "peak": m["peak_mem_bytes"],
            },
        )
        for peer, fn in answers.items():
            pt.predicted[peer], pt.why[peer] = fn(spec, arch)
        pt.predicted["llm-analysis"], pt.why["llm-analysis"] = la_answer
        points.append(pt)

    la_version = "not installed"
    if python:
        proc = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('llm-analysis'))"],
            capture_output=True,
            text=True,
        )
        la_version = proc.stdout.strip() or la_version
    print(
        f"Measured: {len(points)} ok points from {', '.join(map(str, dirs))}, 2 gloo CPU ranks, batch 4 x 128 tokens. "
        f"DeepSpeed {deepspeed.__version__}, accelerate {accelerate.__version__}, transformers "
        f"{transformers.__version__}, llm-analysis {la_version}.\n"
    )
    print_table(points)
    print_summary(points)
    seven_b(python, why_missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
