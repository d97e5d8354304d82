"""Merge the ranks' raw measurements (``rank<r>.json``) into one point's status, setup and metrics.

Driver side, no torch. Conventions (each reported number says how it was measured):

* step time: for each timed step, the slowest rank's wall time; then median, p10, p90 over the timed steps.
* tokens/s (global) = per_device_batch_size x seq_len x grad_accum x world_size / median step time;
  tokens/s per device = that / world_size; samples/s = per_device_batch_size x grad_accum x world_size / median.
* TFLOP/s per device = tokens/s per device x FLOPs per token (PaLM, :func:`sweeper.results.mfu.flops_per_token`) / 1e12;
  MFU = that x 1e12 / the device peak (datasheet on GPU, measured on CPU, stated in ``mfu_peak_source``).
* peak memory: max over ranks of the CUDA allocator's ``max_memory_allocated`` (``peak_mem_kind =
  cuda_max_allocated``), or on CPU of MemTracker's tensor-byte peak over the memory window
  (``cpu_tensor_bytes_memtracker``). Reserved (GPU) and RSS (CPU) are reported beside it.
* model-state bytes per rank (parameters, gradients, optimizer state): max over ranks.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from sweeper import failures
from sweeper.grid.spec import PointSpec
from sweeper.results.mfu import Peak, flops_per_token, mfu


def summarize_step_times(times_s: list[float]) -> dict[str, float]:
    """Median, p10 and p90 of step times in seconds (deciles by linear interpolation between order statistics,
    ``statistics.quantiles(method="inclusive")``, numpy's default)."""
    if len(times_s) == 1:
        return dict.fromkeys(("step_time_s_median", "step_time_s_p10", "step_time_s_p90"), times_s[0])
    deciles = statistics.quantiles(times_s, n=10, method="inclusive")
    return {
        "step_time_s_median": statistics.median(times_s),
        "step_time_s_p10": deciles[0],
        "step_time_s_p90": deciles[8],
    }


def _max(values: list[Any]) -> Any:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def step_statistics(per_rank_times_s: list[list[float]]) -> dict[str, float] | None:
    """Median/p10/p90 (seconds) of per-step max over ranks; None when no rank timed a step."""
    lists = [t for t in per_rank_times_s if t]
    if not lists:
        return None
    n = min(len(t) for t in lists)
    slowest = [max(t[i] for t in lists) for i in range(n)]
    return {**summarize_step_times(slowest), "timed_steps": n}


def metrics_from_ranks(spec: PointSpec, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The point's metrics (see the module docstring for each definition and unit)."""
    world = spec.world_size
    m: dict[str, Any] = {"warmup_steps_dropped": spec.warmup_steps}
    stats = step_statistics([r.get("step_times_s") or [] for r in ranks])
    if stats:
        m.update(stats)
        med = stats["step_time_s_median"]
        tokens_per_step = spec.per_device_batch_size * spec.seq_len * spec.grad_accum * world
        m["tokens_per_step"] = tokens_per_step
        m["tokens_per_s"] = tokens_per_step / med
        m["tokens_per_s_per_device"] = m["tokens_per_s"] / world
        m["samples_per_s"] = spec.per_device_batch_size * spec.grad_accum * world / med
    r0 = next((r for r in ranks if r.get("rank") == 0), ranks[0] if ranks else {})
    model = r0.get("model")
    if model:
        m["param_count"] = model["param_count"]
        fpt = flops_per_token(
            model["non_embedding_params"],
            model["num_layers"],
            model["num_heads"],
            model["head_dim"],
            spec.seq_len,
        )
        m["flops_per_token"] = fpt
        if "tokens_per_s_per_device" in m:
            m["tflops_per_device"] = m["tokens_per_s_per_device"] * fpt / 1e12
            peak = r0.get("peak")
            if peak:
                p = Peak(peak["flops"], peak["source"])
                m["mfu"] = mfu(m["tokens_per_s_per_device"], fpt, p)
                m["mfu_peak_flops"] = p.flops
                m["mfu_peak_source"] = p.source
                if m["mfu"] is None:
                    m["mfu_note"] = p.source
    mems = [r.get("memory") or {} for r in ranks]
    cuda_peaks = [x.get("cuda_peak_allocated_bytes") for x in mems]
    if any(v is not None for v in cuda_peaks):
        m["peak_mem_bytes"] = _max(cuda_peaks)
        m["peak_mem_kind"] = "cuda_max_allocated"
        m["peak_reserved_bytes"] = _max([x.get("cuda_peak_reserved_bytes") for x in mems])
    else:
        m["peak_mem_bytes"] = _max([x.get("tensor_peak_bytes") for x in mems])
        m["peak_mem_kind"] = "cpu_tensor_bytes_memtracker" if m["peak_mem_bytes"] is not None else None
        breakdowns = [x.get("tensor_peak_breakdown_bytes") for x in mems if x.get("tensor_peak_breakdown_bytes")]
        if breakdowns:
            m["peak_mem_breakdown_bytes"] = max(breakdowns, key=lambda b: sum(b.values()))
    m["rss_peak_bytes"] = _max([x.get("rss_peak_bytes") for x in mems])
    for key in ("param_bytes", "grad_bytes", "optimizer_state_bytes"):
        m[f"{key}_per_rank"] = _max([x.get(key) for x in mems])
    losses = r0.get("losses") or []
    if losses:
        m["loss_first"], m["loss_last"] = losses[0], losses[-1]
    if r0.get("eval"):
        m["eval"] = r0["eval"]
    return m


_KIND_RANK = {"checkpoint-recompute": 0, "incompatible": 0, "config": 1, "import": 1, "runtime": 2}


def _root_failure(ranks: list[dict[str, Any]], spec: PointSpec, versions: dict[str, str]):
    """The failure that explains the point: an OOM or a label mismatch first, then a specific error, and a
    collective error (usually a symptom of another rank dying) last."""
    best = None
    for r in ranks:
        f = r.get("failure")
        if not f:
            continue
        c = failures.classify(
            f["exception_type"],
            f["message"],
            f["traceback"],
            phase=f["phase"] if f["phase"] in failures.PHASES else None,
            spec=spec.to_dict(),
            versions=versions,
        )
        if f["exception_type"] == "LabelMismatch":
            prio = -1
        elif c.status == "oom":
            prio = 0
        elif c.error_kind == "collective":
            prio = 9
        else:
            prio = 1 + _KIND_RANK.get(c.error_kind or "", 3)
        if best is None or prio < best[0]:
            best = (prio, r, f, c)
    return best


def _signal_from_log(log_tail: str) -> str | None:
    """The signal that killed a rank, from torchrun's error summary (``Signal 9 (SIGKILL) received by PID``).

    torchrun stops the surviving ranks with SIGTERM once one fails, and its "Root Cause" section names whichever
    failure it observed first (sometimes a survivor's collective error), so any other signal in the summary is the
    cause; SIGTERM only when it is the only one (e.g. the scheduler stopping the job).
    """
    names = re.findall(r"Signal \d+ \((SIG[A-Z0-9]+)\)", log_tail)
    if not names:
        m = re.search(r"exitcode\s*:\s*-(\d+)", log_tail)
        return f"Signal {m.group(1)}" if m else None
    return next((n for n in names if n != "SIGTERM"), names[0])


def summarize_ranks(
    spec: PointSpec, ranks: list[dict[str, Any]], *, returncode: int, timed_out: bool, log_tail: str
) -> dict[str, Any]:
    """Status, reason, error kind, setup, metrics, failure and artifacts of a point from its rank files.

    Args:
        ranks: the parsed ``rank<r>.json`` files (possibly fewer than the world size if a rank died hard).
        returncode: the rank launcher's exit code. timed_out: the point ran past ``spec.timeout_s``.
        log_tail: the end of the ranks' combined log, kept for failures no rank could report.

    Returns:
        Keyword arguments for :class:`sweeper.results.record.Record` (``status, reason, error_kind, setup, metrics,
        failure, artifacts``).
    """
    from sweeper.envinfo import library_versions

    setup = next((r["setup"] for r in ranks if r.get("setup")), {})
    metrics = metrics_from_ranks(spec, ranks)
    artifacts: dict[str, str] = {}
    for r in ranks:
        artifacts.update(r.get("artifacts") or {})
    out: dict[str, Any] = dict(setup=setup, metrics=metrics, artifacts=artifacts, failure=None, error_kind=None)
    all_ok = len(ranks) == spec.world_size and all(r.get("status") == "ok" for r in ranks)
    if timed_out:
        out.update(
            status="timeout",
            reason=f"the point ran past timeout_s={spec.timeout_s:g} s and its ranks were stopped "
            "(a hung collective or a slow configuration; raise timeout_s if it was only slow)",
            failure={"log_tail": log_tail[-3000:]},
        )
        return out
    if all_ok and returncode == 0:
        out.update(status="ok", reason=None)
        return out
    root = _root_failure(ranks, spec, library_versions())
    sig = _signal_from_log(log_tail) or (f"Signal {-returncode}" if returncode < 0 else None)
    died = len(ranks) < spec.world_size and sig is not None
    # a rank that died without a word (signal) explains the others' collective errors, not the other way round
    if root is None or (died and root[3].error_kind == "collective"):
        c = failures.classify(
            sig or "RankExit",
            f"rank launcher exited with code {returncode} and no rank reported an exception",
            log_tail,
        )
        out.update(
            status=c.status,
            error_kind=c.error_kind or "crash",
            reason=c.reason,
            failure={**c.details, "exit_code": returncode, "log_tail": log_tail[-3000:]},
        )
        return out
    _, rank, f, c = root
    failure = {
        **c.details,
        **(c.details.get("oom") or {}),  # parsed OOM numbers (bytes) at the top level, beside rank/phase/step
        "exception_type": f["exception_type"],
        "rank": rank.get("rank"),
        "phase": c.phase,
        "step": f.get("step"),
    }
    if f["exception_type"] == "LabelMismatch":
        out.update(
            status="unsupported",
            reason=f"label not truthful on this hardware: {f['message']}",
            failure=failure,
        )
    else:
        out.update(status=c.status, error_kind=c.error_kind, reason=c.reason, failure=failure)
    if c.phase == "eval":
        out["reason"] += " (training finished; its measurements are valid)"
    return out
