"""Merge the ranks' raw measurements (``rank<r>.json``) into one point's status, setup and metrics.

Driver side, no torch. Conventions (each reported number says how it was measured):

* step time: for each timed step, the slowest rank's wall time; then median, p10, p90 over the timed steps, and the
  95 % confidence interval of the median (order statistics, distribution-free: :func:`sweeper.results.stats.median_ci`;
  ``step_time_s_ci95_low``/``_high``, its real coverage ``step_time_ci95_coverage``, below 0.95 for fewer than 6
  steps, and ``step_time_ci95_rel`` = half-width / median). ``timed_steps=auto`` times steps until that interval is
  within ``timing.ci_rel`` of the median (``timed_stop``: ``ci``, or ``cap`` at ``timing.max_timed_steps``).
* CPU contention (docs/measurement.md, "Contention"): ``runqueue_wait_frac`` = max over ranks of the rank's
  ``schedstat.runqueue_wait_s`` / ``schedstat.wall_s`` (:func:`runqueue_wait_frac`): the share of the timed window
  the rank's threads spent runnable but not running (Linux schedstat, the kernel's
  ``Documentation/scheduler/sched-stats.rst``); ``contended`` = that above ``timing.contention_warn_frac`` (default
  0.05). Both absent when no rank could read schedstat.
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

The rank files, in the point directory (written by :mod:`sweeper.job.harness`, one rank each):

``rank<r>.json`` -- written once, atomically, when the rank ends (normally or by an exception; a rank killed by a
signal leaves none). A JSON object:

* ``rank``, ``world_size``, ``pid`` (int); ``host`` (str).
* ``status``: ``"ok"`` (``train()`` returned, and evaluation when asked) or ``"failed"``.
* ``failure`` (only when failed): ``exception_type`` (str, ``type(e).__name__``), ``message`` (str, first 4000
  characters), ``traceback`` (str, last 12000 characters), ``phase`` (``setup``/``train``/``eval``), ``step`` (int
  or null: optimizer steps finished when the failing step began, i.e. the 0-based index of that step).
* ``steps_completed`` (int or null): optimizer steps this rank finished (the Trainer's ``state.global_step``);
  null when training never began. Fewer than it was to run (:func:`steps_planned`) on an ``ok`` rank means it left
  early.
* ``step_times_s`` (list of float, seconds): wall time of each step of the timed window.
* ``timed_window`` (``[start, stop]``, absent from older rank files): the timed window as 0-based step indices,
  ``[start, stop)`` (1-based steps ``start + 1`` .. ``stop``); ``stop`` is null when the window never ended
  (``timed_steps=auto`` and the rank left training before the stop rule decided). ``timed_stop`` (str or null): why
  it ended: ``"fixed"`` (a fixed ``timed_steps``), ``"ci"`` (the median's interval within ``timing.ci_rel``),
  ``"cap"`` (``timing.max_timed_steps`` reached). With ``timed_steps=auto`` every rank ends it at the same step (the
  ranks all-reduce each step time with MAX and apply the same rule), and the steps the rank was to run are
  ``stop + memory_steps + profile_steps``, not the spec's ``total_steps`` (which counts the cap).
* ``schedstat`` (dict, absent from older rank files): the timed window's CPU contention on this rank
  (:meth:`sweeper.job.measure.StepTimer.contention`): ``runqueue_wait_s`` (float, seconds the rank's training
  thread waited on a CPU run queue in the timed window), ``cpu_s`` (float, seconds it ran on a CPU),
  ``all_threads_runqueue_wait_s`` and ``all_threads_cpu_s`` (float, the same summed over the rank's threads),
  ``wall_s`` (float, seconds: the window's wall time, ``time.monotonic`` from just
  before the first timed step's clock started to just after the last one's stopped), ``threads`` (int, threads read
  at the window's end). Read from ``/proc/self/task/<tid>/schedstat`` outside every step's clock; threads that
  started in the window count whole, threads that exited in it are missing. Each value null when schedstat could
  not be read (not Linux, no such file, a parse error) or the window never ended.
* ``losses`` (list of float): training loss per logged step (the Trainer logs every step, ``logging_steps=1``).
* ``series`` (per-step history, every window, one entry per optimizer step this rank finished, in step order;
  absent from rank files of older versions): ``step_wall_s`` (list of float, seconds: ``time.perf_counter`` from
  ``on_step_begin`` to ``on_step_end``, on CUDA synchronised at both ends; a timed step's entry is the same number
  as in ``step_times_s``), ``mem_high_water_bytes`` (list of int, bytes: the memory high-water mark so far, read
  after each step's clock stopped), ``mem_kind`` (str: ``"cuda_max_allocated"``, ``torch.cuda.max_memory_allocated``;
  or ``"rss_peak"``, the process's peak RSS ``ru_maxrss`` x 1024, on CPU), ``loss_steps`` (list of int: for each
  entry of ``losses``, the 1-based optimizer step it was logged at). :func:`series_from_ranks` merges them.
* ``memory``: ``tensor_peak_bytes`` (int or null, CPU MemTracker peak), ``tensor_peak_breakdown_bytes`` (dict of
  category -> int), ``rss_peak_bytes`` (int, ``ru_maxrss`` x 1024), ``param_bytes``, ``grad_bytes`` (int or null),
  ``optimizer_state_bytes`` (int), and on CUDA ``cuda_peak_allocated_bytes``, ``cuda_peak_reserved_bytes`` (int).
  All bytes.
* ``model``: ``param_count``, ``non_embedding_params``, ``num_layers``, ``num_heads``, ``head_dim`` (int).
* ``setup`` (dict): what really ran, as verified (:mod:`sweeper.job.verify`).
* ``train_wall_s`` (float, seconds): from the rank's start to the end of training/evaluation.
* ``artifacts`` (dict of str -> str): file names in the point directory (traces, top-ops tables).
* ``device_name`` (str, CUDA only); ``peak`` (rank 0 when ok): ``flops`` (float, FLOP/s), ``source`` (str);
  ``eval`` (dict, when evaluation ran).

``rank<r>.step`` -- the rank's progress while it runs: the number of optimizer steps it has finished (the
Trainer's ``state.global_step``) as ASCII decimal digits, nothing else (``"4"``). Written at train begin (``0``)
and after every optimizer step, outside the timed window, by replacing the file (``os.replace``), so a reader
never sees a partial number. Removed by the rank when it starts. It survives a rank killed by a signal, so the
merge can say which rank died at which step; :func:`read_rank_steps` reads them all.
"""

from __future__ import annotations

import math
import os
import re
import signal
import statistics
from pathlib import Path
from typing import Any

from sweeper import failures
from sweeper.failures import reasons
from sweeper.failures.text import first_line
from sweeper.grid.spec import PointSpec
from sweeper.results.mfu import Peak, flops_per_token, mfu
from sweeper.results.stats import median_ci

#: A rank's result file in the point directory (``.format(rank=r)``).
RANK_FILE = "rank{rank}.json"
#: A rank's progress file in the point directory (``.format(rank=r)``): optimizer steps finished, ASCII digits.
STEP_FILE = "rank{rank}.step"
_STEP_NAME = re.compile(r"^rank(\d+)\.step$")


def write_rank_step(pdir: Path, rank: int, step: int) -> None:
    """Replace ``<pdir>/rank<rank>.step`` with ``step`` (optimizer steps finished) as ASCII digits.

    Atomic for readers on the same filesystem (write a temporary file beside it, then ``os.replace``); not
    fsynced: it is a progress marker read while the rank runs. It costs about 4 ms (median; p99 10 ms) on the
    loaded 2-core development machine, which is why the harness writes it outside the timed window.

    Raises:
        OSError: the point directory cannot be written.
    """
    path = Path(pdir) / STEP_FILE.format(rank=rank)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(str(int(step)), encoding="ascii")
    os.replace(tmp, path)


def read_rank_steps(pdir: Path) -> dict[int, int]:
    """Rank -> optimizer steps that rank has finished, from the ``rank<r>.step`` files in ``pdir``.

    A rank without a file (it has not begun training, or it removed the file of an earlier attempt at start) is
    absent; a file that cannot be read or does not hold an integer (it vanished meanwhile) is skipped. Never raises
    for a missing directory (returns ``{}``).
    """
    steps: dict[int, int] = {}
    try:
        entries = list(os.scandir(pdir))
    except OSError:
        return steps
    for entry in entries:
        m = _STEP_NAME.match(entry.name)
        if not m:
            continue
        try:
            steps[int(m.group(1))] = int(Path(entry.path).read_text(encoding="ascii").strip())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
    return steps


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


def step_time_ci(times_s: list[float]) -> dict[str, float]:
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


def step_statistics(per_rank_times_s: list[list[float]]) -> dict[str, float] | None:
    """Median/p10/p90 and the median's 95 % interval (seconds, :func:`step_time_ci`) of the per-step max over
    ranks, and ``timed_steps`` (the steps timed by every rank); None when no rank timed a step."""
    lists = [t for t in per_rank_times_s if t]
    if not lists:
        return None
    n = min(len(t) for t in lists)
    slowest = [max(t[i] for t in lists) for i in range(n)]
    return {**summarize_step_times(slowest), **step_time_ci(slowest), "timed_steps": n}


def _number(v: Any) -> float | None:
    """``v`` as a finite float, or None (missing, a bool, not a number, NaN or infinite)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def runqueue_wait_frac(ranks: list[dict[str, Any]]) -> float | None:
    """The point's CPU contention: max over ranks of ``schedstat.runqueue_wait_s / schedstat.wall_s`` (a fraction).

    Per rank, the seconds the rank's training thread (the one that runs the Trainer's loop) waited on a CPU run
    queue during the timed window (runnable, but another task held the CPU; Linux schedstat, the kernel's
    ``Documentation/scheduler/sched-stats.rst``), over the window's wall seconds: the share of the window its steps
    were stretched by waiting for a CPU. The rank's other threads (gloo's communication threads) are recorded
    (``all_threads_*``) but not counted here: they wake at every collective and each waits briefly for a CPU, adding
    ~4 % per thread on an idle 2-core machine without slowing the step by as much (measured 2026-12-01: training
    thread 4 %, sum over a rank's 4 threads 18-24 %). The max over ranks: a step is as slow as its slowest rank.
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


def contention_warn_frac(spec: PointSpec) -> float:
    """The threshold above which a point is ``contended``: ``timing.contention_warn_frac`` of the spec, else the
    schema's default (:class:`sweeper.grid.schema.TimingConfig`)."""
    return float(spec.timing.contention_warn_frac)


def metrics_from_ranks(spec: PointSpec, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The point's metrics (see the module docstring for each definition and unit)."""
    world = spec.world_size
    m: dict[str, Any] = {"warmup_steps_dropped": spec.warmup_steps}
    stats = step_statistics([r.get("step_times_s") or [] for r in ranks])
    stops = {r.get("timed_stop") for r in ranks if r.get("timed_stop")}
    if stops:
        m["timed_stop"] = stops.pop() if len(stops) == 1 else "mixed"  # one rule on one list: never mixed
    frac = runqueue_wait_frac(ranks)
    if frac is not None:
        m["runqueue_wait_frac"] = frac
        m["contended"] = frac > contention_warn_frac(spec)
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


#: The step windows in run order, as ``Record.series["window"]`` names them.
WINDOWS: tuple[str, ...] = ("warmup", "timed", "memory", "profile")


def step_window(spec: PointSpec, step: int, timed_stop: int | None = None) -> str | None:
    """The window (one of :data:`WINDOWS`) of the 1-based optimizer ``step``; None past the last window.

    ``timed_stop``: where the timed window really ended (the ``stop`` of a rank file's ``timed_window``, 0-based
    exclusive, i.e. the 1-based number of its last step), for ``timed_steps=auto``; None: the spec's counts
    (``timed_steps``, the cap under auto)."""
    timed = spec.timed_steps if timed_stop is None else timed_stop - spec.warmup_steps
    end = 0
    for name, count in zip(WINDOWS, (spec.warmup_steps, timed, spec.memory_steps, spec.profile_steps), strict=True):
        end += count
        if step <= end:
            return name
    return None


def timed_window_stop(ranks: list[dict[str, Any]]) -> int | None:
    """Where the timed window ended (0-based exclusive step index, from the ranks' ``timed_window``: the same on
    every rank; the lowest reporting rank's), or None when no rank says (older rank files, or the window never
    ended)."""
    for r in sorted(ranks, key=lambda r: r.get("rank") if isinstance(r.get("rank"), int) else 1 << 30):
        w = r.get("timed_window")
        if isinstance(w, list) and len(w) == 2 and isinstance(w[1], int):
            return w[1]
    return None


def steps_planned(spec: PointSpec, rank: dict[str, Any]) -> int:
    """Optimizer steps ``rank`` was to run: ``stop + memory_steps + profile_steps`` once its timed window ended
    (``timed_window``; under ``timed_steps=auto`` earlier than the cap), else ``spec.total_steps``."""
    w = rank.get("timed_window")
    if isinstance(w, list) and len(w) == 2 and isinstance(w[1], int):
        return w[1] + spec.memory_steps + spec.profile_steps
    return spec.total_steps


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _losses_by_step(rank: dict[str, Any]) -> dict[int, float]:
    """1-based step -> logged loss of one rank; without ``series.loss_steps`` (older rank files) the i-th loss is
    step i + 1 (the Trainer logs every step)."""
    losses = _list(rank.get("losses"))
    steps = _list((rank.get("series") or {}).get("loss_steps"))
    if len(steps) != len(losses):
        steps = list(range(1, len(losses) + 1))
    return {int(s): loss for s, loss in zip(steps, losses, strict=True)}


def series_from_ranks(spec: PointSpec, ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The point's per-step history (``Record.series``): one entry per optimizer step, every window.

    Columns (lists of equal length, one entry per step, step order): ``step`` (int, 1-based global step),
    ``window`` (``"warmup"``/``"timed"``/``"memory"``/``"profile"``, from the spec's step counts and, for
    ``timed_steps=auto``, the ranks' ``timed_window``: :func:`step_window`), ``step_time_s``
    (float, seconds: the slowest rank's wall time of that step; for the timed steps the statistics use, the same
    number as their input, :func:`step_statistics`), ``loss`` (float or None: rank 0's logged training loss of
    that step; the lowest reporting rank's when rank 0 left no file), ``mem_high_water_bytes`` (int or None,
    bytes: max over ranks of the memory high-water mark after that step); and ``mem_kind`` (str or None:
    ``"cuda_max_allocated"`` or ``"rss_peak"``, see the module docstring).

    A rank that stopped early (or failed) gives fewer steps: each step takes the ranks that finished it, so a
    failed point keeps the history of the steps it did. Plain JSON data.

    Returns:
        The series, or None when no rank recorded a step (older rank files without ``series`` included).
    """
    per_rank = [r.get("series") or {} for r in ranks]
    walls = [_list(s.get("step_wall_s")) for s in per_rank]
    mems = [_list(s.get("mem_high_water_bytes")) for s in per_rank]
    n = max((len(w) for w in walls), default=0)
    if n == 0:
        return None
    r0 = min(ranks, key=lambda r: r.get("rank") if isinstance(r.get("rank"), int) else 1 << 30)
    losses = _losses_by_step(r0)
    steps = list(range(1, n + 1))
    kinds = [s.get("mem_kind") for s in per_rank if s.get("mem_kind")]
    timed_stop = timed_window_stop(ranks)
    return {
        "step": steps,
        "window": [step_window(spec, i, timed_stop) for i in steps],
        "step_time_s": [_max([w[i] for w in walls if i < len(w)]) for i in range(n)],
        "loss": [losses.get(i) for i in steps],
        "mem_high_water_bytes": [_max([m[i] for m in mems if i < len(m)]) for i in range(n)],
        "mem_kind": kinds[0] if kinds else None,
    }


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


def rank_exit_codes(log_tail: str) -> dict[int, int]:
    """Global rank -> exit code of each failed rank in torchrun's error summary (``rank : 1 (local_rank: 1)`` then
    ``exitcode : -9 (pid: ...)``; a negative code is the signal that ended it). Ranks not in the summary are absent."""
    pairs = re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", log_tail)
    return {int(rank): int(code) for rank, code in pairs}


def _killed_first(missing: list[int], log_tail: str) -> list[int]:
    """Of the ranks that wrote no rank file, those that explain the point: the ones a signal other than SIGTERM ended
    (torchrun stops the survivors with SIGTERM once one rank fails, and a survivor stopped before it could write its
    file is a consequence); all of ``missing`` when the summary does not tell them apart."""
    codes = rank_exit_codes(log_tail)
    cause = [r for r in missing if codes.get(r, 0) < 0 and codes[r] != -signal.SIGTERM]
    return cause or missing


def _steps_completed(rank: dict[str, Any], steps: dict[int, int]) -> int | None:
    """Optimizer steps a rank finished: its rank file's ``steps_completed``, else its progress file."""
    done = rank.get("steps_completed")
    return done if isinstance(done, int) else steps.get(rank.get("rank"))


def _early_ranks(spec: PointSpec, ranks: list[dict[str, Any]], steps: dict[int, int]) -> dict[int, int]:
    """Ranks that ended ``ok`` with fewer optimizer steps than they were to run (:func:`steps_planned`: they left
    training early)."""
    early = {}
    for r in ranks:
        done = _steps_completed(r, steps)
        if r.get("status") == "ok" and done is not None and done < steps_planned(spec, r):
            early[r.get("rank")] = done
    return early


def summarize_ranks(
    spec: PointSpec,
    ranks: list[dict[str, Any]],
    *,
    returncode: int,
    timed_out: bool,
    log_tail: str,
    steps: dict[int, int] | None = None,
) -> dict[str, Any]:
    """Status, reason, error kind, setup, metrics, failure and artifacts of a point from its rank files.

    Args:
        ranks: the parsed ``rank<r>.json`` files (possibly fewer than the world size if a rank died hard).
        returncode: the rank launcher's exit code. timed_out: the point ran past ``spec.timeout_s``.
        log_tail: the end of the ranks' combined log, kept for failures no rank could report.
        steps: rank -> optimizer steps finished, from the ``rank<r>.step`` files (:func:`read_rank_steps`): says
            at which step a rank killed by a signal died.

    Returns:
        Keyword arguments for :class:`sweeper.results.record.Record` (``status, reason, error_kind, setup, metrics,
        failure, artifacts``). The cause is told apart from its consequences: a rank that died (signal, no rank
        file) or left training early (``ok`` with fewer steps than asked, case T07) explains the other ranks'
        collective errors or their wait until the timeout, not the other way round.
    """
    from sweeper.envinfo import library_versions

    steps = dict(steps or {})
    setup = next((r["setup"] for r in ranks if r.get("setup")), {})
    metrics = metrics_from_ranks(spec, ranks)
    artifacts: dict[str, str] = {}
    for r in ranks:
        artifacts.update(r.get("artifacts") or {})
    out: dict[str, Any] = dict(setup=setup, metrics=metrics, artifacts=artifacts, failure=None, error_kind=None)
    all_ok = len(ranks) == spec.world_size and all(r.get("status") == "ok" for r in ranks)
    early = _early_ranks(spec, ranks, steps)
    if timed_out and early:
        out.update(_early_exit(spec, early, None, waited_s=spec.timeout_s, log_tail=log_tail))
        return out
    if timed_out:
        out.update(
            status="timeout",
            reason=f"the point ran past timeout_s={spec.timeout_s:g} s and its ranks were stopped "
            "(a hung collective or a slow configuration; raise timeout_s if it was only slow)",
            failure={"log_tail": log_tail[-3000:], "rank_steps": {str(k): v for k, v in sorted(steps.items())}},
        )
        return out
    if all_ok and returncode == 0 and early:  # every rank stopped before the steps asked: not the point asked for
        out.update(_early_exit(spec, early, None, waited_s=None, log_tail=log_tail))
        return out
    if all_ok and returncode == 0:
        out.update(status="ok", reason=None)
        return out
    root = _root_failure(ranks, spec, library_versions())
    sig = _signal_from_log(log_tail) or (f"Signal {-returncode}" if returncode < 0 else None)
    reported = {r.get("rank") for r in ranks}
    missing = [r for r in range(spec.world_size) if r not in reported]
    died = bool(missing) and sig is not None
    # a rank that died without a word (signal) explains the others' collective errors, not the other way round
    if root is None or (died and root[3].error_kind == "collective"):
        if early and not died:
            out.update(_early_exit(spec, early, root, waited_s=None, log_tail=log_tail))
            return out
        c = failures.classify(
            sig or "RankExit",
            f"rank launcher exited with code {returncode} and no rank reported an exception",
            log_tail,
        )
        failure = {**c.details, "exit_code": returncode, "log_tail": log_tail[-3000:]}
        reason = c.reason
        if missing:
            cause = _killed_first(missing, log_tail)
            at = {r: steps.get(r) for r in cause}
            first = at[cause[0]]
            failure.update(
                rank=cause[0], ranks_missing=missing, step=first, phase="setup" if first is None else "train"
            )
            reason = reasons.dead_rank_reason(at, spec.total_steps, c.reason)
        elif c.rank is not None:
            failure["rank"] = c.rank
        out.update(status=c.status, error_kind=c.error_kind or "crash", reason=reason, failure=failure)
        return out
    if early and root[3].error_kind == "collective":
        out.update(_early_exit(spec, early, root, waited_s=None, log_tail=log_tail))
        return out
    _, rank, f, c = root
    failure = {
        **c.details,
        **(c.details.get("oom") or {}),  # parsed OOM numbers (bytes) at the top level, beside rank/phase/step
        "exception_type": f["exception_type"],
        "rank": c.rank if c.rank is not None else rank.get("rank"),
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


def _early_exit(
    spec: PointSpec, early: dict[int, int], root: Any, *, waited_s: float | None, log_tail: str
) -> dict[str, Any]:
    """The outcome of a point where ``early`` ranks left training before the others (case T07): status
    ``error``, kind ``early-exit``; the others' failure (``root``: their collective error) kept as a consequence."""
    consequence = None
    failure: dict[str, Any] = {
        "rank": min(early),
        "phase": "train",
        "step": early[min(early)],
        "steps_asked": spec.total_steps,
        "ranks_stopped_early": {str(r): s for r, s in sorted(early.items())},
    }
    if root is not None:
        _, rank, f, c = root
        consequence = f"rank {rank.get('rank')}: {f['exception_type']}: {first_line(f['message'], 100)}"
        failure["consequence"] = {
            **c.details,
            "rank": rank.get("rank"),
            "exception_type": f["exception_type"],
            "phase": c.phase,
            "step": f.get("step"),
            "error_kind": c.error_kind,
        }
    else:
        failure["log_tail"] = log_tail[-3000:]
    reason = reasons.early_exit_reason(early, spec.total_steps, consequence, waited_s, spec.world_size)
    return dict(status="error", error_kind="early-exit", reason=reason, failure=failure)
