"""A point's metrics from its rank files (:class:`sweeper.results.rankfile.RankFile`): step-time statistics, CPU
contention, throughput, memory and the per-step series.

Driver side, no torch. Conventions (each reported number says how it was measured):

* step time: for each timed step whose optimizer update ran (fp16 loss scaling skips the update of a step whose
  gradients overflowed: such a step is left out and counted, ``skipped_steps``), the slowest rank's wall time;
  then median, p10, p90 over the timed steps, and the 95 % confidence interval of the median (order statistics,
  distribution-free: :func:`sweeper.results.stats.median_ci`; ``step_time_s_ci95_low``/``_high``, its real coverage
  ``step_time_ci95_coverage``, below 0.95 for fewer than 6 steps, and ``step_time_ci95_rel`` = half-width /
  median). ``timed_steps=auto`` times steps until that interval is within ``timing.ci_rel`` of the median
  (``timed_stop``: ``ci``, or ``cap`` at ``timing.max_timed_steps``).
* CPU contention (docs/measurement.md, "Contention"): ``runqueue_wait_frac`` = max over ranks of the rank's
  ``schedstat.runqueue_wait_s`` / ``schedstat.wall_s`` (:func:`runqueue_wait_frac`): the share of the timed window
  the rank's training thread spent runnable but not running (Linux schedstat, the kernel's
  ``Documentation/scheduler/sched-stats.rst``); ``steal_frac`` = max over ranks of the host's ``/proc/stat`` steal
  over the window / (wall x CPUs) (:func:`steal_frac`: a virtual machine's CPU time taken by the hypervisor, which
  schedstat cannot see); ``contended`` = either above ``timing.contention_warn_frac``
  (:func:`contention_warn_frac`; default: the schema's, :attr:`sweeper.config.schema.TimingConfig.contention_warn_frac`,
  not restated here). Each absent when no rank could read its source.
* tokens/s (global) = per_device_batch_size x seq_len x grad_accum x world_size / median step time;
  tokens/s per device = that / world_size; samples/s = per_device_batch_size x grad_accum x world_size / median.
* TFLOP/s per device = tokens/s per device x FLOPs per token (PaLM, :func:`sweeper.results.mfu.flops_per_token`) / 1e12;
  MFU = that x 1e12 / the device peak (datasheet on GPU, measured on CPU, stated in ``mfu_peak_source``).
* peak memory: max over ranks of the CUDA allocator's ``max_memory_allocated`` (``peak_mem_kind =
  cuda_max_allocated``), or on CPU of MemTracker's tensor-byte peak over the memory window
  (``cpu_tensor_bytes_memtracker``). Reserved (GPU) and RSS (CPU) are reported beside it.
* model-state bytes per rank (parameters, gradients, optimizer state): max over ranks.
* per-step series (:func:`series_from_ranks`, ``Record.series``): every optimizer step of every window, the
  slowest rank's wall time, the highest rank's memory high-water mark, rank 0's loss.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.results.mfu import Peak, flops_per_token, mfu
from sweeper.results.rankfile import RankFile
from sweeper.results.record import RecordMetrics
from sweeper.results.stats import median_ci


def summarize_step_times(times_s: list[float]) -> RecordMetrics:
    """Median, p10 and p90 of step times in seconds (deciles by linear interpolation between order statistics,
    ``statistics.quantiles(method="inclusive")``, numpy's default)."""
    if len(times_s) == 1:
        return {"step_time_s_median": times_s[0], "step_time_s_p10": times_s[0], "step_time_s_p90": times_s[0]}
    deciles = statistics.quantiles(times_s, n=10, method="inclusive")
    return {
        "step_time_s_median": statistics.median(times_s),
        "step_time_s_p10": deciles[0],
        "step_time_s_p90": deciles[8],
    }


def _max(values: list[Any]) -> Any:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def step_time_ci(times_s: list[float]) -> RecordMetrics:
    """The 95 % confidence interval of the median step time (:func:`sweeper.results.stats.median_ci`: order
    statistics, distribution-free; Conover, *Practical Nonparametric Statistics*, 3.2).

    Returns:
        ``step_time_s_ci95_low``, ``step_time_s_ci95_high`` (seconds), ``step_time_ci95_rel`` (half-width / median,
        a fraction) and ``step_time_ci95_coverage`` (the interval's real coverage: >= 0.95 from 6 steps; below, for
        fewer steps, the interval is [min, max] and this says how much less than 95 % it covers).
    """
    ci = median_ci(times_s)
    return {
        "step_time_s_ci95_low": ci.low,
        "step_time_s_ci95_high": ci.high,
        "step_time_ci95_rel": ci.half_width_rel,
        "step_time_ci95_coverage": ci.coverage,
    }


def step_statistics(per_rank_times_s: list[list[float]]) -> RecordMetrics | None:
    """Median/p10/p90 and the median's 95 % interval (seconds, :func:`step_time_ci`) of the per-step max over
    ranks, and ``timed_steps`` (the steps timed by every rank); None when no rank timed a step."""
    lists = [t for t in per_rank_times_s if t]
    if not lists:
        return None
    n = min(len(t) for t in lists)
    slowest = [max(t[i] for t in lists) for i in range(n)]
    return {**summarize_step_times(slowest), **step_time_ci(slowest), "timed_steps": n}


def measurement_note(ranks: list[RankFile]) -> str | None:
    """One sentence per contained fault of sweeper's own measurement code (``RankFile.harness_faults``): which
    site, on which rank, at which step, and the exception; the point's other numbers stand. None when there was
    none (and for older rank files)."""
    parts = []
    for r in sorted(ranks, key=_rank_order):
        for n in r.get("harness_faults") or []:
            at = f" at step {n['step']}" if n.get("step") is not None else ""
            parts.append(
                f"sweeper's own {n.get('site')} code failed on rank {r.get('rank')}{at} "
                f"({n.get('exception_type')}: {str(n.get('message', ''))[:200]}): not measured, a bug of sweeper's"
            )
    return "; ".join(parts) or None


def _number(v: Any) -> float | None:
    """``v`` as a finite float, or None (missing, a bool, not a number, NaN or infinite)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def runqueue_wait_frac(ranks: list[RankFile]) -> float | None:
    """The point's CPU contention: max over ranks of ``schedstat.runqueue_wait_s / schedstat.wall_s`` (a fraction).

    Per rank, the seconds the rank's training thread (the one that runs the Trainer's loop) waited on a CPU run
    queue during the timed window (runnable, but another task held the CPU; Linux schedstat, the kernel's
    ``Documentation/scheduler/sched-stats.rst``), over the window's wall seconds: the share of the window its steps
    were stretched by waiting for a CPU. The rank's other threads (gloo's communication threads) are recorded
    (``all_threads_*``) but not counted here: they wake at every collective and each waits briefly for a CPU, adding
    a few % per thread without slowing the step by as much (the figures: ``benchmarks/README.md``,
    ``frontier_stability.py``, "with the contention column"). The max over ranks: a step is as slow as its slowest rank.
    None when no rank has both numbers (older rank files, schedstat unreadable, the window never ended, or a zero
    wall time).
    """
    fracs = []
    for r in ranks:
        s = r.get("schedstat") or {}
        wait, wall = _number(s.get("runqueue_wait_s")), _number(s.get("wall_s"))
        if wait is not None and wall is not None and wall > 0 and wait >= 0:
            fracs.append(wait / wall)
    return max(fracs) if fracs else None


def steal_frac(ranks: list[RankFile]) -> float | None:
    """The hypervisor's share of the host's CPU time in the timed window: max over ranks of ``schedstat.steal_s /
    (schedstat.wall_s x schedstat.cpus)`` (a fraction; ``/proc/stat`` steal, ``proc(5)``: time a virtual CPU was
    ready while the hypervisor ran another guest). The training thread's schedstat cannot see it (stolen time is
    neither on-CPU time nor run-queue wait), yet it stretches every step. None when no rank has the three numbers
    (older rank files, not Linux, or the window never ended)."""
    fracs = []
    for r in ranks:
        s = r.get("schedstat") or {}
        steal, wall, cpus = _number(s.get("steal_s")), _number(s.get("wall_s")), _number(s.get("cpus"))
        if steal is not None and wall is not None and cpus is not None and wall > 0 and cpus > 0 and steal >= 0:
            fracs.append(steal / (wall * cpus))
    return max(fracs) if fracs else None


def contention_lost(metrics: Mapping[str, Any]) -> float | None:
    """The share of the timed window a point lost to CPU contention (fraction): the larger of ``runqueue_wait_frac``
    and ``steal_frac`` of its ``metrics``; None when neither was measured. ``contended`` is this above
    :func:`contention_warn_frac`."""
    fracs = [f for f in (metrics.get("runqueue_wait_frac"), metrics.get("steal_frac")) if isinstance(f, (int, float))]
    return max(fracs) if fracs else None


def contention_warn_frac(spec: PointSpec) -> float:
    """The threshold above which a point is ``contended``: ``timing.contention_warn_frac`` of the spec, else the
    schema's default (:attr:`sweeper.config.schema.TimingConfig.contention_warn_frac`), a fraction."""
    return float(spec.timing.contention_warn_frac)


def metrics_from_ranks(spec: PointSpec, ranks: list[RankFile]) -> RecordMetrics:
    """The point's metrics (see the module docstring for each definition and unit).

    Raises:
        ValueError: a spec whose ``per_device_batch_size`` is still ``auto`` when a rank timed steps
            (:attr:`~sweeper.config.spec.PointSpec.micro_batch`: measure at the batch found, ``spec.with_batch``).
    """
    world = spec.world_size
    m: RecordMetrics = {"warmup_steps_dropped": spec.warmup_steps}
    stats = step_statistics([r.get("step_times_s") or [] for r in ranks])
    stops = {s for s in (r.get("timed_stop") for r in ranks) if s}
    if stops:
        m["timed_stop"] = stops.pop() if len(stops) == 1 else "mixed"  # one rule on one list: never mixed
    skipped = [len(r["skipped_timed_steps"]) for r in ranks if isinstance(r.get("skipped_timed_steps"), list)]
    if skipped:  # fp16 loss-scale overflow: timed steps without an update, left out of the statistics
        m["skipped_steps"] = max(skipped)
    note = measurement_note(ranks)
    if note:
        m["measurement_note"] = note
    frac, steal = runqueue_wait_frac(ranks), steal_frac(ranks)
    if frac is not None:
        m["runqueue_wait_frac"] = frac
    if steal is not None:
        m["steal_frac"] = steal
    lost = contention_lost(m)
    if lost is not None:  # either stretches the steps: a run queue or the hypervisor
        m["contended"] = lost > contention_warn_frac(spec)
    if stats:
        m.update(stats)
        med = stats["step_time_s_median"]
        # each data-parallel batch once: the ranks of a TP or SP group train on one batch together
        dp = spec.dp
        tokens_per_step = spec.micro_batch * spec.seq_len * spec.grad_accum * dp
        m["tokens_per_step"] = tokens_per_step
        m["tokens_per_s"] = tokens_per_step / med
        m["tokens_per_s_per_device"] = m["tokens_per_s"] / world
        m["samples_per_s"] = spec.micro_batch * spec.grad_accum * dp / med
    r0 = next((r for r in ranks if r.get("rank") == 0), ranks[0] if ranks else RankFile())
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
        breakdowns = [b for b in (x.get("tensor_peak_breakdown_bytes") for x in mems) if b]
        if breakdowns:
            m["peak_mem_breakdown_bytes"] = max(breakdowns, key=lambda b: sum(b.values()))
    m["rss_peak_bytes"] = _max([x.get("rss_peak_bytes") for x in mems])
    m["param_bytes_per_rank"] = _max([x.get("param_bytes") for x in mems])
    m["grad_bytes_per_rank"] = _max([x.get("grad_bytes") for x in mems])
    m["optimizer_state_bytes_per_rank"] = _max([x.get("optimizer_state_bytes") for x in mems])
    losses = r0.get("losses") or []
    if losses:
        m["loss_first"], m["loss_last"] = losses[0], losses[-1]
        # a loss of exactly 0 at every step: nothing to learn from (a degenerate configuration), so the step time
        # measures no real training (docs/measurement.md, "A point that trains on nothing")
        m["zero_loss"] = all(isinstance(x, (int, float)) and x == 0 for x in losses)
    if r0.get("eval"):
        m["eval"] = r0["eval"]
    return m


#: The step windows in run order, as ``Record.series["window"]`` names them.
WINDOWS: tuple[str, ...] = ("warmup", "timed", "memory", "profile")


def step_window(spec: PointSpec, step: int, timed_stop: int | None = None) -> str | None:
    """The window (one of :data:`WINDOWS`) of the 1-based optimizer ``step``; None past the last window.

    ``timed_stop``: where the timed window really ended (the ``stop`` of a rank file's ``timed_window``, 0-based
    exclusive, i.e. the 1-based number of its last step), for ``timed_steps=auto``; None: the spec's counts
    (``timed_steps``, the cap under auto; a screen's ``search.screen_timed_steps``)."""
    # a spec past the gate holds an int (under auto: the cap); int() as in PointSpec.total_steps
    timed = spec.timed_window if timed_stop is None else timed_stop - spec.warmup_steps
    end = 0
    for name, count in zip(WINDOWS, (spec.warmup_steps, timed, spec.memory_steps, spec.profile_steps), strict=True):
        end += count
        if step <= end:
            return name
    return None


def _rank_order(rank: RankFile) -> int:
    """Sort key of a rank file: its rank, a file without one last."""
    r = rank.get("rank")
    return r if isinstance(r, int) else 1 << 30


def timed_window_stop(ranks: list[RankFile]) -> int | None:
    """Where the timed window ended (0-based exclusive step index, from the ranks' ``timed_window``: the same on
    every rank; the lowest reporting rank's), or None when no rank says (older rank files, or the window never
    ended)."""
    for r in sorted(ranks, key=_rank_order):
        w = r.get("timed_window")
        if isinstance(w, list) and len(w) == 2 and isinstance(w[1], int):
            return w[1]
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _losses_by_step(rank: RankFile, key: str | None = None) -> dict[int, Any]:
    """1-based step -> logged loss of one rank (``key`` None), or the value logged with it (``key``:
    ``learning_rate``, ``grad_norm`` of ``series``; a list of another length, as in older rank files, gives none);
    without ``series.loss_steps`` (older rank files) the i-th loss is step i + 1 (the Trainer logs every step)."""
    losses = _list(rank.get("losses"))
    steps = _list((rank.get("series") or {}).get("loss_steps"))
    if len(steps) != len(losses):
        steps = list(range(1, len(losses) + 1))
    values = losses if key is None else _list((rank.get("series") or {}).get(key))
    if len(values) != len(steps):
        return {}
    return {int(s): v for s, v in zip(steps, values, strict=True)}


def series_from_ranks(spec: PointSpec, ranks: list[RankFile]) -> dict[str, Any] | None:
    """The point's per-step history (``Record.series``): one entry per optimizer step, every window.

    Columns (lists of equal length, one entry per step, step order): ``step`` (int, 1-based global step),
    ``window`` (``"warmup"``/``"timed"``/``"memory"``/``"profile"``, from the spec's step counts and, for
    ``timed_steps=auto``, the ranks' ``timed_window``: :func:`step_window`), ``step_time_s``
    (float, seconds: the slowest rank's wall time of that step; for the timed steps the statistics use, the same
    number as their input, :func:`step_statistics`), ``loss`` (float or None: rank 0's logged training loss of
    that step; the lowest reporting rank's when rank 0 left no file), ``learning_rate`` and ``grad_norm`` (float or
    None: what the same rank's Trainer logged with that loss; the norm is the total before clipping),
    ``mem_high_water_bytes`` (int or None,
    bytes: max over ranks of the memory high-water mark after that step), ``optimizer_step_skipped`` (bool or
    None: some rank's optimizer skipped that step's update, fp16 loss scaling); and ``mem_kind`` (str or None:
    ``"cuda_max_allocated"`` or ``"rss_peak"``, :attr:`sweeper.results.rankfile.Series.mem_kind`).

    A rank that stopped early (or failed) gives fewer steps: each step takes the ranks that finished it, so a
    failed point keeps the history of the steps it did. Plain JSON data.

    Returns:
        The series, or None when no rank recorded a step (older rank files without ``series`` included).
    """
    per_rank = [r.get("series") or {} for r in ranks]
    walls = [_list(s.get("step_wall_s")) for s in per_rank]
    skips = [_list(s.get("optimizer_step_skipped")) for s in per_rank]
    mems = [_list(s.get("mem_high_water_bytes")) for s in per_rank]
    n = max((len(w) for w in walls), default=0)
    if n == 0:
        return None
    r0 = min(ranks, key=_rank_order)
    losses, rates, norms = (_losses_by_step(r0, key) for key in (None, "learning_rate", "grad_norm"))
    steps = list(range(1, n + 1))
    kinds = [s.get("mem_kind") for s in per_rank if s.get("mem_kind")]
    timed_stop = timed_window_stop(ranks)
    return {
        "step": steps,
        "window": [step_window(spec, i, timed_stop) for i in steps],
        "step_time_s": [_max([w[i] for w in walls if i < len(w)]) for i in range(n)],
        "loss": [losses.get(i) for i in steps],
        "learning_rate": [rates.get(i) for i in steps],
        "grad_norm": [norms.get(i) for i in steps],
        "mem_high_water_bytes": [_max([m[i] for m in mems if i < len(m)]) for i in range(n)],
        "mem_kind": kinds[0] if kinds else None,
        # True when any rank skipped that step's update (fp16 loss-scale overflow); None before rank files had it
        "optimizer_step_skipped": [
            any(bool(k[i]) for k in skips if i < len(k)) if any(i < len(k) for k in skips) else None for i in range(n)
        ],
    }
