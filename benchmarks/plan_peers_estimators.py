"""The peers of ``benchmarks/plan_peers.py``: how each estimator is asked, and sweeper's own answer beside them.

* **sweeper**: ``sweeper.capacity.memory.estimate_memory`` (states, CPU peak) and, for the time side and the new
  terms, ``sweeper.point.lifecycle.predicted_for`` / ``sweeper.capacity.predict.predict`` (a record's prediction);
* **DeepSpeed**: ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs`` (the
  functions ``..._all_cold`` / ``..._all_live`` print one row of per option set), fed by DeepSpeed's own counting
  (``model_to_params``);
* **accelerate**: what ``accelerate estimate-memory`` computes;
* **llm-analysis**: ``LLMAnalysis.training`` in its own throwaway venv (:data:`LLM_ANALYSIS_RUNNER`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
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
#: A job names its model (``hf_dir`` or a name llm-analysis knows), its GPU (``gpu``: a name, or GPUConfig's fields;
#: default: a CPU rank with a large capacity, so that only the bytes are compared) and the training inputs.
LLM_ANALYSIS_RUNNER = r"""
import json, logging, sys, traceback
from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
from llm_analysis.config import (DtypeConfig, GPUConfig, ParallelismConfig, get_gpu_config_by_name,
                                 get_model_config_by_name)
from llm_analysis.logger import logger
logger.setLevel(logging.ERROR)
cpu = dict(name="cpu-rank", mem_per_GPU_in_GB=1024, hbm_bandwidth_in_GB_per_sec=100,
           intra_node_bandwidth_in_GB_per_sec=10, intra_node_min_message_latency=1e-5, peak_fp16_TFLOPS=1)
KEYS = ("weight_memory_per_gpu", "gradient_memory_per_gpu", "optimizer_state_memory_per_gpu",
        "activation_memory_per_gpu", "(weight+op_state+grad+act)_memory_per_gpu", "num_params_total",
        "latency_per_iter", "batch_size_per_gpu", "gradient_accumulation_steps")
out = {}
for job in json.load(sys.stdin):
    try:
        bits = job.get("bits", 16)
        gpu = job.get("gpu") or cpu
        gpu = get_gpu_config_by_name(gpu) if isinstance(gpu, str) else GPUConfig(**gpu)
        analysis = LLMAnalysis(
            get_model_config_by_name(job["model"]), gpu,
            DtypeConfig(name=f"w{bits}a{bits}e{bits}", weight_bits=bits, activation_bits=bits, embedding_bits=bits),
            ParallelismConfig(dp_size=job["dp"]), flops_efficiency=job.get("flops_efficiency"))
        s = analysis.training(
            batch_size_per_gpu=job["batch"], gradient_accumulation_steps=job.get("grad_accum", 1),
            seq_len=job["seq"], ds_zero=DSZeRO(job["zero"]),
            activation_recomputation=ActivationRecomputation(2 if job["gc"] else 0), flash_attn=True,
            mlp_gated_linear_units=job["gated"], other_op_bytes=job.get("other_op_bytes"))
        out[job["id"]] = {k: s.get(k) for k in KEYS}
    except Exception as e:  # its own assertions: reported, not fatal
        tb = traceback.extract_tb(e.__traceback__)[-1]
        out[job["id"]] = {"error": f"{type(e).__name__}: {e} ({tb.name}, {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"}
print(json.dumps(out))
"""


def _strategy(spec: Any) -> str:
    if spec.zero:
        return f"ZeRO-{spec.zero}"
    return {"none": "DDP", "full_shard": "FSDP-full", "shard_grad_op": "FSDP-grad"}.get(spec.fsdp, spec.fsdp)


def _hf_config(spec: Any) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(spec.model_type, **spec.model_config)


# ---- peers ----------------------------------------------------------------------------------------------------


def sweeper_answer(spec: Any, arch: Any) -> tuple[dict[str, float | None], dict[str, str]]:
    """Sweeper's states (as the harness counts them) and its CPU peak; a model that says "unknown" (an optimizer it
    does not know) or fails is ``n/a`` with its words."""
    from sweeper.capacity.memory import estimate_memory

    try:
        est = estimate_memory(spec, arch, "cpu")
    except Exception as e:  # noqa: BLE001 - the model's refusal is its answer
        key = f"sw-error: {type(e).__name__}: {e}"
        WHY[key] = f"sweeper's model gives no number: {type(e).__name__}: {e}"
        return {}, dict.fromkeys(QUANTITIES, key)
    st = est.states
    states = None
    if st.param_bytes is not None and st.optimizer_state_bytes is not None:
        states = st.param_bytes + (st.grad_bytes or 0) + st.optimizer_state_bytes
    return {
        "param": st.param_bytes,
        "grad": st.grad_bytes,
        "optim": st.optimizer_state_bytes,
        "states": states,
        "peak": est.peak_bytes,
    }, {}


@cache
def deepspeed_params(model_type: str, config_json: str) -> tuple[int, int]:
    """(total params, largest layer params) as DeepSpeed's ``stage3.model_to_params`` counts them, on the model
    built on the meta device (``parameters()`` yields a tied weight once, as its ``data_ptr()`` de-duplication does
    on a real model; its largest layer is the module with the most parameters of its own)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **json.loads(config_json)))
    total = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


def _ds_params(spec: Any) -> tuple[int, int]:
    return deepspeed_params(spec.model_type, json.dumps(spec.model_config, sort_keys=True))


def deepspeed_estimate(
    spec: Any, *, cpu_offload: bool = False, cpu_offload_params: bool = False, zero_init: bool = True
) -> tuple[int, int] | None:
    """DeepSpeed's (per-CPU-node bytes, per-GPU bytes) for the point's ZeRO stage (2 or 3; None otherwise): the row
    ``estimate_zero{2,3}_model_states_mem_needs_all_cold`` prints for these options (``cpu_offload`` =
    ``offload_optimizer=cpu``; ``cpu_offload_params`` = ``offload_param=cpu``, ZeRO-3 only)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total, largest = _ds_params(spec)
    kw = dict(num_gpus_per_node=spec.ranks_per_node, num_nodes=spec.nodes, cpu_offload=cpu_offload)
    if spec.zero == 2:
        return estimate_zero2_model_states_mem_needs(total, **kw)
    if spec.zero == 3:
        cpu, gpu, _largest = estimate_zero3_model_states_mem_needs(
            total, largest, cpu_offload_params=cpu_offload_params, zero_init=zero_init, **kw
        )
        return cpu, gpu
    return None


def deepspeed_answer(spec: Any, arch: Any = None) -> tuple[dict[str, float | None], dict[str, str]]:
    """DeepSpeed's ZeRO-2/3 estimator (GPU side, the point's offload): one total, given as the states and the peak."""
    if spec.zero not in (2, 3):
        return {}, dict.fromkeys(QUANTITIES, "ds-strategy")
    zo = (spec.deepspeed_config or {}).get("zero_optimization") or {}
    off_opt = ((zo.get("offload_optimizer") or {}).get("device") or "none") == "cpu"
    off_par = ((zo.get("offload_param") or {}).get("device") or "none") == "cpu"
    gpu = deepspeed_estimate(spec, cpu_offload=off_opt, cpu_offload_params=off_par)[1]
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


def accelerate_answer(spec: Any, arch: Any = None) -> tuple[dict[str, float | None], dict[str, str]]:
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


def run_llm_analysis(python: str | None, jobs: list[dict]) -> tuple[dict[str, dict], str]:
    """Every job in one run of llm-analysis's interpreter. Returns ({id: summary or {"error": ...}}, why none)."""
    if python is None:
        return {}, "llm-analysis not installed"
    if not jobs:
        return {}, ""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [python, "-c", LLM_ANALYSIS_RUNNER], input=json.dumps(jobs), capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        return {}, f"llm-analysis did not run: {proc.stderr.strip().splitlines()[-1:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


def la_job(spec: Any, work: Path, job_id: str, **extra: Any) -> dict:
    """llm-analysis's inputs for one point: its HF config (written once per shape under ``work``), 16 or 32 bits,
    dp = world size, ``ds_zero`` = the point's ``zero``, the micro-batch, seq, recompute, gradient accumulation."""
    d = work / f"hf-config-{abs(hash((spec.model_type, json.dumps(spec.model_config, sort_keys=True))))}"
    if not d.exists():
        _hf_config(spec).save_pretrained(d)
    return {
        "id": job_id,
        "model": str(d),
        "bits": 32 if spec.precision == "fp32" else 16,
        "dp": spec.ranks_per_node * spec.nodes,
        "zero": spec.zero,
        "batch": spec.micro_batch,
        "seq": spec.seq_len,
        "gc": spec.gc,
        "gated": spec.model_type != "gpt2",
        "grad_accum": spec.grad_accum,
        **extra,
    }


def la_memory(r: dict) -> dict[str, float | None]:
    w, g, o = r["weight_memory_per_gpu"], r["gradient_memory_per_gpu"], r["optimizer_state_memory_per_gpu"]
    return {
        "param": w,
        "grad": g,
        "optim": o,
        "states": w + g + o,
        "peak": r["(weight+op_state+grad+act)_memory_per_gpu"],
    }


def llm_analysis_answers(specs: list[Any], python: str | None, why_missing: str, work: Path, **extra: Any) -> list:
    """llm-analysis for every point (memory), in one run of its interpreter. Returns per point (answer, why)."""
    if python is None:
        WHY["la-missing"] = why_missing
        return [({}, dict.fromkeys(QUANTITIES, "la-missing")) for _ in specs]
    jobs = [la_job(spec, work, str(i), **extra) for i, spec in enumerate(specs) if spec.fsdp == "none"]
    results, why = run_llm_analysis(python, jobs)
    if why:
        WHY["la-missing"] = why
        return [({}, dict.fromkeys(QUANTITIES, "la-missing")) for _ in specs]
    out = []
    for i, spec in enumerate(specs):
        if spec.fsdp != "none":
            out.append(({}, dict.fromkeys(QUANTITIES, "la-fsdp")))
            continue
        r = results[str(i)]
        if "error" in r:
            key = f"la-error: {r['error']}"
            WHY[key] = f"llm-analysis stops with {r['error']}"
            out.append(({}, dict.fromkeys(QUANTITIES, key)))
            continue
        out.append((la_memory(r), {}))
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
