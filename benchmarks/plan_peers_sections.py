"""The new cases of ``benchmarks/plan_peers.py`` (issue 18): optimizers, offload, gradient accumulation, off-grid
shapes, throughput on the measured points, and Llama-2-7B's tokens/s per engine. Each section prints one table.

Sweeper is read through its stable interfaces only: ``sweeper.capacity.memory.estimate_memory`` (per-rank states
and CPU peak), ``sweeper.point.lifecycle.predicted_for`` / ``sweeper.capacity.predict.predict`` (a record's
prediction: ``tokens_per_s_per_device``, ``device_bytes``, ...), and fields a newer model adds are read with
``getattr`` / ``.get`` (``host_bytes_per_node``, ``host_fits``), so the same code runs before and after they exist.
"""

from __future__ import annotations

import importlib
import statistics
from pathlib import Path
from typing import Any

from plan_peers_cases import GIB, Point, kendall_tau, optim_label, print_table, rel
from plan_peers_estimators import (
    WHY,
    _strategy,
    accelerate_answer,
    deepspeed_answer,
    deepspeed_estimate,
    la_job,
    la_memory,
    llm_analysis_answers,
    run_llm_analysis,
    sweeper_answer,
)

PEERS = ("sweeper", "DeepSpeed", "accelerate", "llm-analysis")
#: Optimizer-state bytes per parameter a user would pass llm-analysis as ``other_op_bytes`` (beside its 4-byte
#: master copy): what each optimizer keeps per parameter in fp32 (torch.optim). Adafactor's factored state has none.
OTHER_OP_BYTES = {"sgd": 0, "sgd momentum=0.9": 4, "adagrad": 4, "adamw_torch": 8, "adamw_torch_fused": 8}
#: Guesses for llm-analysis's GPUConfig of a gloo CPU rank on this host (stated in the output): DRAM bandwidth per
#: rank, gloo's bandwidth and latency between two local ranks (loopback TCP).
CPU_HBM_GB_S, GLOO_GB_S, GLOO_LATENCY_S = 10.0, 2.0, 50e-6

WHY.update(
    {
        "ds-offload-na": "DeepSpeed's estimators model ZeRO-2/3 offload only, not FSDP's cpu_offload",
        "acc-offload": "accelerate's estimate has no offload and no sharding",
        "la-offload": "llm-analysis has no CPU offload input (weights, gradients and optimizer state on the GPU)",
        "la-adafactor": "llm-analysis takes the optimizer as bytes per parameter (other_op_bytes): Adafactor's "
        "factored state (rows + columns per matrix) is not a per-parameter constant",
        "not-run": "the point did not measure (its status is under the row)",
    }
)


LA16 = (
    "llm-analysis is given every point as 16-bit (w16a16e16): it refuses 32-bit weights, so an fp32 point gets the "
    "number a user can get from it (16-bit weights, fp32 master copy, fp32 gradients)."
)


FSDP_AS_ZERO = (
    "FSDP points: DeepSpeed and llm-analysis, which know no FSDP, are asked for the ZeRO stage that shards the same "
    "states (full_shard as ZeRO-3, shard_grad_op as ZeRO-2), as a user of theirs would; accelerate has no sharding."
)


def as_zero(spec: Any) -> Any:
    """An FSDP point as the ZeRO stage that shards the same states (full_shard: ZeRO-3, shard_grad_op: ZeRO-2), for
    the peers that know no FSDP; any other point as it is."""
    from dataclasses import replace

    stage = {"full_shard": 3, "hybrid_shard": 3, "shard_grad_op": 2}.get(spec.fsdp)
    return replace(spec, fsdp="none", zero=stage) if stage else spec


def measured_points(
    records: list, python: str | None, why_missing: str, work: Path, label, fsdp_as_zero: bool = False, **la_extra: Any
) -> list[Point]:
    """A :class:`Point` per record (``ok`` or not), every peer asked; ``label(spec)`` gives its label columns;
    ``fsdp_as_zero``: DeepSpeed and llm-analysis get an FSDP point as its ZeRO stage (:func:`as_zero`);
    ``la_extra``: inputs given to llm-analysis for every point (``bits=16``)."""
    specs = [as_zero(r[0]) if fsdp_as_zero else r[0] for r in records]
    la = llm_analysis_answers(specs, python, why_missing, work, **la_extra)
    out = []
    for (spec, arch, r), la_answer in zip(records, la, strict=True):
        m = r.metrics or {}
        ok = r.status == "ok"
        states = None
        if ok and m.get("param_bytes_per_rank") is not None:
            states = m["param_bytes_per_rank"] + (m.get("grad_bytes_per_rank") or 0)
            states += m.get("optimizer_state_bytes_per_rank") or 0
        pt = Point(
            label=label(spec),
            measured={
                "param": m.get("param_bytes_per_rank"),
                "grad": m.get("grad_bytes_per_rank"),
                "optim": m.get("optimizer_state_bytes_per_rank"),
                "states": states,
                "peak": m.get("peak_mem_bytes"),
            }
            if ok
            else {},
            status="ok" if ok else f"{r.status}/{r.error_kind}: {(r.reason or '').splitlines()[0][:160]}",
        )
        peer_spec = as_zero(spec) if fsdp_as_zero else spec
        pt.predicted["sweeper"], pt.why["sweeper"] = sweeper_answer(spec, arch)
        pt.predicted["DeepSpeed"], pt.why["DeepSpeed"] = deepspeed_answer(peer_spec, arch)
        pt.predicted["accelerate"], pt.why["accelerate"] = accelerate_answer(spec, arch)
        pt.predicted["llm-analysis"], pt.why["llm-analysis"] = la_answer
        out.append(pt)
    return out


# ---- 1. optimizers (U14) --------------------------------------------------------------------------------------


def optimizers(records: list, python: str | None, why_missing: str, work: Path) -> None:
    print("\n== Optimizers (U14): tiny model, DDP, fp32, 2 gloo CPU ranks, batch 4 x 128 ==")
    label = lambda s: (optim_label(s.training_args), _strategy(s))  # noqa: E731
    points = measured_points(records, python, why_missing, work, label, bits=16)
    peers = [*PEERS, "llm-a. op"]
    jobs = []
    for i, (spec, _arch, _r) in enumerate(records):
        name = optim_label(spec.training_args)
        if name in OTHER_OP_BYTES and spec.fsdp == "none":
            jobs.append(la_job(spec, work, str(i), bits=16, other_op_bytes=OTHER_OP_BYTES[name]))
    results, why = run_llm_analysis(python, jobs)
    for i, pt in enumerate(points):
        r = results.get(str(i))
        if r and "error" not in r:
            pt.predicted["llm-a. op"], pt.why["llm-a. op"] = la_memory(r), {}
            continue
        if r:
            key = f"la-error: {r['error']}"
            WHY[key] = f"llm-analysis stops with {r['error']}"
        elif python is None or why:
            key = "la-missing"
            WHY.setdefault(key, why or why_missing)
        else:
            key = "la-adafactor"
        pt.predicted["llm-a. op"], pt.why["llm-a. op"] = {}, dict.fromkeys(("optim", "peak"), key)
    print_table(points, peers, ("optim", "peak"), WHY, head=(("optimizer", 22), ("engine", 6)))
    print(
        "DeepSpeed's, accelerate's and llm-analysis's own numbers assume Adam whatever training_args.optim says "
        "(accelerate: 'Training using Adam'; DeepSpeed: 4+4 B/param of momentum and variance; llm-analysis: "
        "other_op_bytes=None is Adam): their error is that of taking the point for AdamW. 'llm-a. op' is llm-analysis "
        "given the optimizer's bytes per parameter by hand (other_op_bytes: sgd 0, momentum 4, adagrad 4, adam 8): "
        "llm-analysis refuses 32-bit weights, so both its columns are its w16a16 answer (a user's only choice): its "
        "optimizer state then counts a 4 B/param fp32 master copy, which these fp32 runs do not keep."
    )
    prune_check(records)


def prune_check(records: list) -> None:
    """U14's second half: with a device exactly as large as the measured peak needs (capacity = measured peak /
    (1 - plan.memory_margin), in ``cluster.gpu_mem_gib``), does sweeper's ``fits`` say yes? A no would prune a point
    that fits (``prune=true``)."""
    from sweeper.capacity.predict import predict
    from sweeper.point.lifecycle import target_for

    cells = []
    for spec, _arch, r in records:
        peak = (r.metrics or {}).get("peak_mem_bytes")
        if r.status != "ok" or not peak:
            continue
        capacity = peak / (1.0 - spec.plan.memory_margin)
        target = target_for(spec, "local", {**_local_cluster(), "gpu_mem_gib": capacity / GIB})
        fits = predict(spec, target, with_max_batch=False).fits
        cells.append(f"{optim_label(spec.training_args)}: {_yes(fits)}")
    print(
        "prune check (a device just large enough for the measured peak; 'no' = prune=true would prune a point that "
        "fits): " + "; ".join(cells) + ". The peers have no pruning (and no fit below their model-state total)."
    )


# ---- 2. offload (U15) -----------------------------------------------------------------------------------------


def compose(overrides: list[str]) -> tuple[Any, Any]:
    """(spec, target) of the point ``overrides`` name, composed as ``python -m sweeper.plan`` composes it (its config
    ``conf/plan.yaml``: bf16, batch 1, a rank per GPU; Hydra's override grammar, the typed schema), on its cluster as a
    SLURM target."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode
    from omegaconf import open_dict

    from sweeper.config.compose import plain_node
    from sweeper.config.schema import register_configs
    from sweeper.config.spec import from_config
    from sweeper.paths import conf_dir
    from sweeper.point.lifecycle import target_for
    from sweeper.results.sweepdir import register_resolver

    register_configs()
    register_resolver()
    importlib.import_module("sweeper.plan.__main__")  # stores hydra/sweeper=sweeper_plan, which conf/plan.yaml selects
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir())))
    cfg = loader.load_configuration("plan", overrides=list(overrides), run_mode=RunMode.RUN)
    with open_dict(cfg):
        del cfg["hydra"]
    spec = from_config(cfg)
    return spec, target_for(spec, "slurm", plain_node(cfg.cluster))


def _gib(x: float | None) -> str:
    return f"{x / GIB:9.2f}" if x is not None else f"{'-':>9}"


def _yes(x: bool | None) -> str:
    return {True: "yes", False: "no", None: "-"}[x]


#: U15's command (``python -m sweeper.plan`` defaults: bf16 autocast, batch 1)
OFFLOAD_7B = "model=llama-2-7b cluster=a100-80gb seq_len=2048 ranks_per_node=1 gc=true".split()
OPT, PAR = (
    "+deepspeed_config.zero_optimization.offload_optimizer.device=cpu",
    ("+deepspeed_config.zero_optimization.offload_param.device=cpu"),
)
OFFLOAD_CASES = [
    ("ZeRO-3, no offload", ["zero=3"], dict(cpu_offload=False)),
    ("ZeRO-3, optimizer offload", ["zero=3", OPT], dict(cpu_offload=True)),
    ("ZeRO-3, optim + param offload", ["zero=3", OPT, PAR], dict(cpu_offload=True, cpu_offload_params=True)),
    ("ZeRO-2, no offload", ["zero=2"], dict(cpu_offload=False)),
    ("ZeRO-2, optimizer offload", ["zero=2", OPT], dict(cpu_offload=True)),
    ("FSDP full_shard", ["fsdp=full_shard"], None),
    ("FSDP full_shard, cpu_offload", ["fsdp=full_shard", "+fsdp_config.cpu_offload=true"], None),
]


def offload(measured: list, python: str | None, why_missing: str, work: Path) -> None:
    from sweeper.capacity.predict import predict

    print(
        "\n== Offload (U15): Llama-2-7B on one A100-80GB (cluster=a100-80gb ranks_per_node=1), seq 2048, batch 1, "
        "gc, bf16 ==\npredicted only (no GPU here). sweeper: predict() device and host bytes; DeepSpeed: the row "
        "estimate_zero{2,3}_model_states_mem_needs_all_cold prints for the same offload options (zero_init=1; "
        "zero_init=0 in brackets), GPU per device and CPU per node; accelerate and llm-analysis: no offload model."
    )
    head = (
        f"{'case':31} | {'sw device GiB':>13} {'fits':>4} {'sw host GiB/node':>16} {'host fits':>9} | "
        f"{'DS GPU GiB':>10} {'DS CPU GiB/node':>22} | accelerate | llm-analysis"
    )
    print(head)
    print("-" * len(head))
    any_host = False
    for name, extra, ds in OFFLOAD_CASES:
        spec, target = compose([*OFFLOAD_7B, *extra])
        p = predict(spec, target)
        host = getattr(p, "host_bytes_per_node", None)
        any_host = any_host or host is not None
        host_fits = getattr(p, "host_fits", None)
        if ds is None:
            ds_gpu, ds_cpu = f"{'n/a [a]':>10}", f"{'n/a [a]':>22}"
        else:
            cpu, gpu = deepspeed_estimate(spec, **ds)
            cpu0, _ = deepspeed_estimate(spec, **ds, zero_init=False) if spec.zero == 3 else (None, None)
            ds_gpu = f"{gpu / GIB:10.2f}"
            ds_cpu = f"{cpu / GIB:9.2f}" + (f" [{cpu0 / GIB:9.2f}]" if cpu0 is not None else " " * 12)
        print(
            f"{name:31} | {_gib(p.device_bytes):>13} {_yes(p.fits):>4} {_gib(host):>16} {_yes(host_fits):>9} | "
            f"{ds_gpu} {ds_cpu} | {'n/a [b]':>10} | {'n/a [c]':>12}"
        )
    print(
        f"  [a] {WHY['ds-offload-na']}\n  [b] {WHY['acc-offload']}\n  [c] {WHY['la-offload']}\n"
        + (
            "  sw host GiB/node '-': the model has no host-memory term (Prediction.host_bytes_per_node absent). "
            if not any_host
            else "  sw host GiB/node: Prediction.host_bytes_per_node (host_fits against cluster.host_mem_gib). "
        )
        + "DeepSpeed counts model states only (no activations, no CUDA context); sweeper's device bytes are its "
        "whole predicted device need (peak x (1 + fragmentation) + CUDA context + NCCL)."
    )
    if measured:
        print("\nZeRO-2 with offload_optimizer.device=cpu on the tiny model, 2 gloo CPU ranks (measured):")
        label = lambda s: (s.model, _strategy(s) + "+off", s.precision)  # noqa: E731
        points = measured_points(measured, python, why_missing, work, label, bits=16)
        print_table(points, PEERS, ("states", "peak"), WHY)
        for spec, _arch, _r in measured:
            cpu, gpu = deepspeed_estimate(spec, cpu_offload=True)
            print(
                f"DeepSpeed's CPU side for this point: {cpu / 1024:,.0f} KiB per node (its GPU side {gpu / 1024:,.0f} "
                "KiB, above). On a CPU rank device and host are one memory and MemTracker counts tensors wherever "
                "DeepSpeed puts them: offload moves nothing between counters here (compare the grid's ZeRO-2 fp32 "
                "point in the accumulation table), so this point checks only that the offload setting runs."
            )


# ---- 3. gradient accumulation (U16) ---------------------------------------------------------------------------


def accumulation(records: list, python: str | None, why_missing: str, work: Path) -> None:
    print(
        "\n== Gradient accumulation (U16): tiny model, fp32, 2 gloo CPU ranks, batch 4 x 128; grad_accum=2 beside "
        "the same points at grad_accum=1 (from the grid) =="
    )
    label = lambda s: (_strategy(s), f"ga={s.grad_accum}")  # noqa: E731
    records = sorted(records, key=lambda t: (_strategy(t[0]), t[0].grad_accum))
    points = measured_points(records, python, why_missing, work, label, fsdp_as_zero=True, bits=16)
    print_table(points, PEERS, ("states", "peak"), WHY, head=(("engine", 9), ("accum", 5)))
    print(FSDP_AS_ZERO)
    print(
        "llm-analysis takes gradient_accumulation_steps (passed here): it changes its latency per iteration, not its "
        "memory. DeepSpeed's and accelerate's estimators have no accumulation input. A grad_accum=2 point that is not "
        "ok here is the harness's own counter failing (MemTracker, 'multiple iterative calls'): rerun after the fix."
    )
    print(LA16)


# ---- 4. off-grid shapes (U24, U25) ----------------------------------------------------------------------------


def off_grid(records: list, python: str | None, why_missing: str, work: Path) -> None:
    print(
        "\n== Off-grid shapes (U24: 16-layer llama h=256 seq 512 batch 16 gc bf16 FSDP; U25: GPT-2 124M FSDP gc "
        "batch 1 seq 128), 2 gloo CPU ranks =="
    )

    def label(s):
        return (
            s.model + ("-16L" if s.model_config.get("num_hidden_layers") == 16 else ""),
            _strategy(s),
            s.precision,
        )

    points = measured_points(records, python, why_missing, work, label, fsdp_as_zero=True, bits=16)
    print_table(points, PEERS, ("states", "peak"), WHY)
    print(FSDP_AS_ZERO)
    print("Goal (issue 18): sweeper's peak within 10 % of the measured, never more than 5 % under it.")
    print(LA16)


# ---- 5. throughput (U18) --------------------------------------------------------------------------------------


def _engine(spec: Any) -> str:
    """The engine, with ``+off`` when the point offloads (ZeRO-Offload of either kind, FSDP ``cpu_offload``)."""
    zo = (spec.deepspeed_config or {}).get("zero_optimization") or {}
    off = any(((zo.get(k) or {}).get("device") or "none") != "none" for k in ("offload_optimizer", "offload_param"))
    off = off or bool((spec.fsdp_config or {}).get("cpu_offload"))
    return _strategy(spec) + ("+off" if off else "")


def _tokens_per_step(spec: Any) -> int:
    return spec.micro_batch * spec.seq_len * spec.grad_accum


def _local_cluster() -> dict:
    import yaml

    from sweeper.paths import conf_dir

    return yaml.safe_load((conf_dir() / "cluster" / "local.yaml").read_text()) or {"name": "local"}


def _cpu_gpu_config(peak_flops: float) -> dict:
    return dict(
        name="this-host-cpu-rank",
        mem_per_GPU_in_GB=1024,
        hbm_bandwidth_in_GB_per_sec=CPU_HBM_GB_S,
        intra_node_bandwidth_in_GB_per_sec=GLOO_GB_S,
        intra_node_min_message_latency=GLOO_LATENCY_S,
        peak_fp16_TFLOPS=peak_flops / 1e12,
    )


def _tau_text(pairs: list[tuple[float, float]]) -> str:
    xs, ys = [p for p, _ in pairs], [m for _, m in pairs]
    tau = kendall_tau(xs, ys) if len(pairs) > 1 else None
    if tau is not None:
        return f"{tau:+.3f}"
    if len(pairs) > 1 and len(set(xs)) == 1:
        return "undefined (every prediction is the same number: no order at all)"
    return "n/a"


def throughput(records: list, python: str | None, why_missing: str, work: Path) -> None:
    """Measured tokens/s per device vs sweeper's prediction (the record's prediction made again now with the point's
    measured matmul peak, ``predicted_for``; and calibrated on the DDP points alone) and llm-analysis's latency per
    iteration on a GPUConfig of this host (and scaled by the median measured/predicted of the DDP points)."""
    from dataclasses import replace

    from sweeper.capacity.calibrate import calibrated_efficiency
    from sweeper.point.lifecycle import predicted_for, target_for

    ok = [t for t in records if t[2].status == "ok" and (t[2].metrics or {}).get("tokens_per_s_per_device")]
    ok.sort(key=lambda t: (t[0].model, t[0].precision, t[0].fsdp, t[0].zero, t[0].gc, optim_label(t[0].training_args)))
    ddp = [t for t in ok if _strategy(t[0]) == "DDP"]
    cal = calibrated_efficiency([r for _s, _a, r in ddp])
    print(
        f"\n== Throughput (U18): {len(ok)} measured ok points, tokens/s per device ==\n"
        "sweeper: predicted_tokens_per_s_per_device, as recorded at the run ('@run') and made again by this model "
        "(predicted_for with the record's measured matmul peak); 'cal': at the efficiency calibrated on the "
        f"{len(ddp)} DDP points alone ({'none' if cal is None else f'{cal.efficiency:.3f}'}, "
        "sweeper.capacity.calibrate). llm-analysis: batch x seq x grad_accum / latency_per_iter on a GPUConfig of "
        f"this host: peak_fp16_TFLOPS = the record's mfu_peak_flops, HBM {CPU_HBM_GB_S:g} GB/s, intra-node "
        f"{GLOO_GB_S:g} GB/s, latency {GLOO_LATENCY_S * 1e6:g} us (stated guesses for DRAM and gloo), "
        "flops_efficiency = sweeper's, w16a16 (it refuses 32 bits), FSDP as ds_zero=3 (it has no FSDP); 'cal': "
        "scaled by the median measured/predicted of the DDP points."
    )
    target = None
    jobs, sw, sw_cal = [], [], []
    for i, (spec, _arch, r) in enumerate(ok):
        m = r.metrics
        target = target_for(spec, "local", _local_cluster())
        pred = predicted_for(spec, target, m)
        sw.append(pred.get("tokens_per_s_per_device"))
        try:  # plan.efficiency replaced by the DDP calibration (a model with other knobs: n/a, not a crash)
            spec_cal = replace(spec, plan=replace(spec.plan, efficiency=cal.efficiency))
            sw_cal.append(predicted_for(spec_cal, target, m).get("tokens_per_s_per_device"))
        except (AttributeError, TypeError, ValueError):
            sw_cal.append(None)
        if m.get("mfu_peak_flops"):
            eff = min(max(pred.get("efficiency") or 0.4, 1e-3), 1.0)
            zero = 3 if spec.fsdp != "none" else spec.zero
            job = la_job(spec, work, str(i), gpu=_cpu_gpu_config(m["mfu_peak_flops"]), flops_efficiency=eff)
            jobs.append({**job, "bits": 16, "zero": zero})
    results, why = run_llm_analysis(python, jobs)
    la = []
    for i, (spec, _a, _r) in enumerate(ok):
        res = results.get(str(i)) or {}
        la.append(_tokens_per_step(spec) / res["latency_per_iter"] if res.get("latency_per_iter") else None)
    ddp_ratios = [t[2].metrics["tokens_per_s_per_device"] / p for t, p in zip(ok, la, strict=True) if p and t in ddp]
    scale = statistics.median(ddp_ratios) if ddp_ratios else None
    la_cal = [p * scale if p and scale else None for p in la]
    cols = {"sweeper": sw, "sweeper cal": sw_cal, "llm-analysis": la, "llm-a. cal": la_cal}

    def cell(p: float | None, meas: float) -> str:
        return f"{p:>9,.0f} {rel(p, meas):>+6.0%}" if p else f"{'n/a':>9} {'':>6}"

    head = f"{'model':12} {'engine':10} {'prec':4} {'gc':>2} {'b':>2} {'ga':>2} {'optim':16} | {'measured':>9} | "
    head += f"{'sw @run':>9} | " + " | ".join(f"{name:>16}" for name in cols)
    print(head)
    print("-" * len(head))
    for i, (spec, _a, r) in enumerate(ok):
        meas = r.metrics["tokens_per_s_per_device"]
        at_run = (r.predicted or {}).get("tokens_per_s_per_device")
        print(
            f"{spec.model[:12]:12} {_engine(spec):10} {spec.precision:4} {int(spec.gc):>2} {spec.micro_batch:>2} "
            f"{spec.grad_accum:>2} {optim_label(spec.training_args)[:16]:16} | {meas:>9,.0f} | "
            + (f"{at_run:>9,.0f}" if at_run else f"{'n/a':>9}")
            + " | "
            + " | ".join(cell(v[i], meas) for v in cols.values())
        )
    if why:
        print(f"llm-analysis: n/a ({why})")
    measured = [t[2].metrics["tokens_per_s_per_device"] for t in ok]
    print(
        "Measured on a shared machine: identical work differs between points run minutes apart (see the tiny DDP fp32 "
        "rows: adamw_torch vs the default adamw_torch_fused, the two ZeRO-2 fp32 rows); each point's "
        "runqueue_wait_frac and contended flag are in its record."
    )
    print(
        "\nper estimator: Kendall's tau-b between predicted and measured tokens/s per device (1 = the measured "
        "order), and |error| of the non-DDP points (issue 18: 'cal' within 25 % for every ZeRO-2 and FSDP point)"
    )
    for name, values in cols.items():
        pairs = [(p, m) for p, m in zip(values, measured, strict=True) if p]
        off = [
            abs(rel(p, t[2].metrics["tokens_per_s_per_device"]))
            for p, t in zip(values, ok, strict=True)
            if p and t not in ddp
        ]
        worst = f"median {statistics.median(off):.0%}, max {max(off):.0%} over {len(off)}" if off else "none"
        print(f"  {name:13} {len(pairs):>3} points  tau = {_tau_text(pairs)}; non-DDP |error|: {worst}")
    groups: dict[str, list[int]] = {}
    for i, (spec, _a, _r) in enumerate(ok):
        groups.setdefault(f"{spec.model} {spec.precision}", []).append(i)
    print("  within one model and precision (engines, gc, batch, optimizer ranked against each other):")
    for group, idx in sorted(groups.items()):
        cells = []
        for name in ("sweeper", "llm-analysis"):
            pairs = [(cols[name][i], measured[i]) for i in idx if cols[name][i]]
            cells.append(f"{name} {_tau_text(pairs)}")
        print(f"    {group:22} {len(idx):>2} points: " + "; ".join(cells))


# ---- 6. Llama-2-7B tokens/s per engine ------------------------------------------------------------------------


def seven_b_throughput(python: str | None, why_missing: str) -> None:
    from sweeper.capacity.predict import predict

    print(
        "\n== Llama-2-7B, 8 x H100 80GB (cluster=h100-80gb), seq 4096, batch 1, bf16, no gc: tokens/s per device ==\n"
        "sweeper: predict() at plan.efficiency; llm-analysis: 4096 / latency_per_iter (gpu h100-sxm-80gb, w16a16e16, "
        "its default flops_efficiency), ds_zero 0-3 (no FSDP). llm-analysis's latency is FLOPs over its TFLOPS "
        "(communication only for tensor parallelism, none for data parallelism or ZeRO): one number for every stage."
    )
    engines = [("DDP", "none", 0), ("ZeRO-1", "none", 1), ("ZeRO-2", "none", 2), ("ZeRO-3", "none", 3)]
    engines += [("FSDP-full", "full_shard", 0), ("FSDP-grad", "shard_grad_op", 0)]
    jobs = []
    for name, fsdp, zero in engines:
        if fsdp == "none":
            jobs.append(
                {
                    "id": name,
                    "model": "NousResearch_Llama-2-7b-hf",
                    "gpu": "h100-sxm-80gb",
                    "bits": 16,
                    "dp": 8,
                    "zero": zero,
                    "batch": 1,
                    "seq": 4096,
                    "gc": False,
                    "gated": True,
                }
            )
    results, why = run_llm_analysis(python, jobs)
    print(f"{'engine':10} | {'sweeper tok/s':>13} {'step s':>8} {'comm s':>8} | {'llm-analysis tok/s':>18}")
    for name, fsdp, zero in engines:
        overrides = "model=llama-2-7b cluster=h100-80gb seq_len=4096 per_device_batch_size=1 precision=bf16".split()
        spec, target = compose([*overrides, "gc=false", f"fsdp={fsdp}", f"zero={zero}"])
        p = predict(spec, target, with_max_batch=False)
        la = results.get(name) or {}
        if la.get("latency_per_iter"):
            la_cell = f"{4096 / la['latency_per_iter']:>18,.0f}"
        elif fsdp != "none":
            la_cell = f"{'n/a (no FSDP)':>18}"
        else:
            la_cell = f"{'n/a':>18} ({(la.get('error') or why or why_missing).split(', note')[0]})"
        tps = p.tokens_per_s_per_device
        comm = f"{p.comm_s:8.3f}" if p.comm_s is not None else f"{'-':>8}"
        print(
            f"{name:10} | "
            + (f"{tps:>13,.0f} {p.step_time_s:8.3f} {comm}" if tps else f"{'n/a':>13} {'':>8} {'':>8}")
            + f" | {la_cell}"
        )
