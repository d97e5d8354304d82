"""Measurements taken inside each rank, as HF ``TrainerCallback``s.

Steps run in windows, in this order (``warmup_steps``, ``timed_steps``, ``memory_steps``, ``profile_steps``):

* warm-up: dropped (first steps pay for lazy init, allocator growth, JIT).
* timed: ``time.perf_counter()`` from ``on_step_begin`` to ``on_step_end`` (one optimizer step, all
  gradient-accumulation micro-batches); on CUDA, synchronised at both ends. No tracker or profiler runs here.
  ``timed_steps=auto``: the window goes on until the 95 % interval of the median step time (slowest rank per step)
  is within ``timing.ci_rel`` of the median, or ``timing.max_timed_steps`` (:class:`StepTimer`,
  :class:`sweeper.results.stats.StopRule`); the windows after it follow its real end (:class:`Windows`).
* memory: on CPU, ``torch.distributed._tools.mem_tracker.MemTracker`` counts tensor bytes (the CPU analogue of
  the CUDA allocator's peak; it slows a step about 4x, hence its own window). On CUDA the allocator's peak
  (``max_memory_allocated``/``max_memory_reserved``) covers the whole run at no cost. Model-state bytes
  (parameters, gradients, optimizer state held by this rank) are counted in this window, just before the
  optimizer step, when gradients exist.
* profile: ``torch.profiler`` trace (chrome JSON) and a top-ops table.

Every step of every window is also timed the same way and followed (after the clock stops) by a reading of the
memory high-water mark, for the point's per-step history (:class:`StepTimer`, ``Record.series``).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from sweeper.results.mfu import Peak


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of a (possibly sharded) tensor that this rank holds: DTensor -> local shard; DeepSpeed ZeRO-3
    partitioned parameter -> its partition (the visible tensor is an empty placeholder)."""
    if hasattr(t, "ds_tensor"):
        t = t.ds_tensor
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(t: torch.Tensor | None) -> int:
    """Bytes this rank holds for ``t`` (DTensor: local shard; DeepSpeed ZeRO-3 param: its partition)."""
    if t is None:
        return 0
    t = local_tensor(t)
    return t.numel() * t.element_size()


def innermost_optimizer(opt: Any) -> Any:
    """Unwrap accelerate / DeepSpeed optimizer wrappers down to the torch optimizer that holds the state."""
    seen = set()
    while hasattr(opt, "optimizer") and id(opt) not in seen:
        seen.add(id(opt))
        opt = opt.optimizer
    return opt


def model_state_bytes(model: torch.nn.Module, optimizer: Any) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state that *this rank* holds.

    Gradients: ``param.grad`` (local shard); None under DeepSpeed (see below). Optimizer state: every tensor in
    the innermost torch optimizer's ``state`` (Adam: exp_avg, exp_avg_sq, step), plus DeepSpeed's fp32 master
    partitions (ZeRO keeps them apart from the model's parameters: 4 + 8 bytes/param / N, the ZeRO paper's 12x/N).

    Returns:
        ``{"param_bytes": int, "grad_bytes": int | None, "optimizer_state_bytes": int}``.
    """
    params = list(model.parameters())
    param_bytes = sum(tensor_bytes(p) for p in params)
    grad_bytes = sum(tensor_bytes(p.grad) for p in params)
    inner = innermost_optimizer(optimizer)
    state_bytes = 0
    for state in getattr(inner, "state", {}).values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                state_bytes += tensor_bytes(v)
    masters = _deepspeed_master_partitions(optimizer)
    if masters is not None:
        # DeepSpeed ZeRO steps fp32 master partitions that are copies of the model's parameters; its gradient
        # partitions are consumed inside its own step (before the Trainer's optimizer hooks), so not observable
        state_bytes += sum(tensor_bytes(p) for p in masters)
        return {"param_bytes": param_bytes, "grad_bytes": None, "optimizer_state_bytes": state_bytes}
    return {"param_bytes": param_bytes, "grad_bytes": grad_bytes, "optimizer_state_bytes": state_bytes}


def _deepspeed_master_partitions(optimizer: Any) -> list[torch.Tensor] | None:
    """DeepSpeed's fp32 master partitions held by this rank (ZeRO-1/2: ``single_partition_of_fp32_groups``,
    ZeRO-3: ``fp32_partitioned_groups_flat``), or None when the optimizer is not a DeepSpeed ZeRO optimizer."""
    seen = set()
    opt = optimizer
    while opt is not None and id(opt) not in seen:
        seen.add(id(opt))
        for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
            if hasattr(opt, attr):
                return list(getattr(opt, attr))
        opt = getattr(opt, "optimizer", None)
    return None


class Windows:
    """Which window a 0-based optimizer step falls in: ``timed``, ``memory``, ``profile`` (ranges of 0-based step
    indices; the warm-up is ``range(timed.start)``).

    With a fixed ``timed_steps`` the windows are known from the start. With ``timed_steps=auto`` (``rule`` given)
    ``timed`` holds the cap (``timed`` steps) until :meth:`end_timed` ends it earlier; the memory and profile windows
    then follow the real end. Every callback reads the ranges when it needs them, so each follows the dynamic end
    (the end is decided in ``on_step_end`` of the last timed step, before the next step begins).

    Attributes:
        rule: the :class:`sweeper.results.stats.StopRule` of ``timed_steps=auto``, or None (fixed).
        decided: the timed window's end is known (always with a fixed count).
        stop_reason: ``"fixed"``, ``"ci"`` (the median's interval is narrow enough), ``"cap"`` (the step cap), or
            None while undecided.
    """

    def __init__(self, warmup: int, timed: int, memory: int, profile: int, rule: Any = None) -> None:
        self.rule = rule
        self._memory_steps, self._profile_steps = memory, profile
        self.decided = rule is None
        self.stop_reason: str | None = "fixed" if rule is None else None
        self._set(range(warmup, warmup + timed))

    def _set(self, timed: range) -> None:
        self.timed = timed
        self.memory = range(timed.stop, timed.stop + self._memory_steps)
        self.profile = range(self.memory.stop, self.memory.stop + self._profile_steps)

    def end_timed(self, stop: int, reason: str) -> None:
        """End the timed window before the 0-based step ``stop`` (its last step is ``stop - 1``), for ``reason``
        (``"ci"`` / ``"cap"``); the memory and profile windows follow."""
        self._set(range(self.timed.start, stop))
        self.decided = True
        self.stop_reason = reason

    @property
    def end(self) -> int:
        """Optimizer steps of the whole run as known now (1-based number of the last profile step)."""
        return self.profile.stop


class PhaseTracker(TrainerCallback):
    """Knows the phase (setup / train / eval) and the current optimizer step, for failure records."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.phase = "train"

    def on_step_begin(self, args, state, control, **kwargs):
        self.step = state.global_step


#: Where Linux lists the threads of this process; each has a ``schedstat`` file (:func:`read_schedstat`).
TASK_DIR = "/proc/self/task"


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """(time on a CPU, time waiting on a run queue), both nanoseconds, from one line of a Linux ``schedstat`` file
    (``/proc/<pid>/task/<tid>/schedstat``), or None when the text is not three non-negative integers.

    The three fields are: time spent on the CPU (ns), time spent waiting on a run queue (ns), and the number of
    timeslices run on this CPU (the kernel's ``Documentation/scheduler/sched-stats.rst``, "/proc/<pid>/schedstat").
    The wait is time the thread was runnable but another task held the CPU; time asleep (I/O, a lock, a collective
    waiting for another rank) is not in either field.
    """
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):  # isdigit: no sign, no decimal point
        return None
    return int(fields[0]), int(fields[1])


def read_schedstat(task_dir: str = TASK_DIR) -> dict[int, tuple[int, int]] | None:
    """Thread id -> (on-CPU ns, run-queue wait ns) for every thread of this process now (:func:`parse_schedstat`).

    A thread that exits between the directory listing and its read is left out. None when the counters cannot be
    read: not Linux, no ``schedstat`` files (a kernel without ``CONFIG_SCHED_INFO``), a line that does not parse,
    or every counter 0 (the kernel writes ``0 0 0`` when scheduler statistics are off, and this thread has run).
    Never raises. Cost: one small file read per thread, about 25 us each (median on the loaded 2-core development
    machine: 0.06 ms with 2 threads, 1 ms with 38), so it is called only outside a timed step's clock.
    """
    try:
        tids = [int(t) for t in os.listdir(task_dir) if t.isdigit()]
    except OSError:
        return None
    out: dict[int, tuple[int, int]] = {}
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/schedstat", encoding="ascii") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited meanwhile
        except (OSError, UnicodeDecodeError):
            return None
        parsed = parse_schedstat(text)
        if parsed is None:
            return None
        out[tid] = parsed
    if not out or not any(cpu or wait for cpu, wait in out.values()):
        return None
    return out


def schedstat_delta(start: dict[int, tuple[int, int]], end: dict[int, tuple[int, int]]) -> tuple[float, float]:
    """(on-CPU seconds, run-queue wait seconds) the threads of this process spent between two
    :func:`read_schedstat` readings, summed over threads.

    Per thread id: ``end - start`` for a thread present at both readings; a thread that started in between counts
    its whole ``end`` reading (all of its life lies in between); a thread that exited in between is not counted
    (its last counters cannot be read after it exits), so the sums can fall short when threads exit, never
    exceed. A counter lower at the end than at the start (a thread id reused by a new thread) counts as a new
    thread.
    """
    cpu_ns = wait_ns = 0
    for tid, (cpu1, wait1) in end.items():
        cpu0, wait0 = start.get(tid, (0, 0))
        if cpu1 < cpu0 or wait1 < wait0:
            cpu0 = wait0 = 0
        cpu_ns += cpu1 - cpu0
        wait_ns += wait1 - wait0
    return cpu_ns / 1e9, wait_ns / 1e9


class StepTimer(TrainerCallback):
    """Wall time of every optimizer step (seconds, ``time.perf_counter``) and the memory high-water mark after it;
    with ``timed_steps=auto`` it also ends the timed window.

    Every step is timed from ``on_step_begin`` to ``on_step_end`` (one optimizer step, all gradient-accumulation
    micro-batches); on CUDA synchronised at both ends. The timed window's steps are the point's step-time
    measurement (:attr:`times_s`); the other windows' times are history only (the memory and profile windows run
    their tracker or profiler inside the step). The memory high-water mark is read in ``on_step_end`` after the
    clock has stopped, so nothing extra runs inside a timed step.

    ``timed_steps=auto`` (``windows.rule`` set): after each timed step, once the clock has stopped, the step's time
    is all-reduced with MAX over the process group (when ``torch.distributed`` is initialised with more than one
    rank: the slowest rank's time, the step time the record uses), appended to :attr:`slowest_s`, and every rank
    applies the same stop rule to the same list, so all ranks end the timed window at the same step
    (:meth:`Windows.end_timed`). Training stops (``control.should_training_stop``) after the last step of the
    windows that follow, since the Trainer's ``max_steps`` counts the timed window at its cap.

    CPU contention of the timed window (docs/measurement.md, "Contention"): the run-queue wait and on-CPU time of
    every thread of this process (:func:`read_schedstat`, Linux schedstat) are read in ``on_step_begin`` of the first
    timed step, before its clock starts, and in ``on_step_end`` of the last timed step, after its clock stopped (with
    ``timed_steps=auto`` once the stop rule ended the window there), each with a wall-clock reading:
    nothing of it runs inside a timed step. :meth:`contention` gives the result for the rank file.
    The window's wall time is read with ``time.monotonic`` (``CLOCK_MONOTONIC`` on Linux, as ``perf_counter``).

    Attributes:
        times_s: wall time of each step of the timed window on this rank, seconds (unchanged measurement).
        slowest_s: ``timed_steps=auto`` only: each timed step's time, max over ranks, seconds (the stop rule's input).
        wall_s: wall time of every optimizer step this rank finished, all windows, in step order, seconds; a timed
            step's entry is the same number as in :attr:`times_s`.
        mem_high_water_bytes: after each finished step (same length as :attr:`wall_s`), the memory high-water mark
            so far, bytes: on CUDA ``torch.cuda.max_memory_allocated()`` (``mem_kind = "cuda_max_allocated"``), on
            CPU the process's peak RSS, ``getrusage(RUSAGE_SELF).ru_maxrss x 1024`` (``mem_kind = "rss_peak"``).
        mem_kind: which counter :attr:`mem_high_water_bytes` holds.
        window_wall_s: wall time of the timed window, seconds, from the reading before the first timed step's clock
            to the reading after the last one's (the gaps between timed steps included); None until it ended.
        runqueue_wait_s: seconds the training thread (the one that runs the Trainer's loop and this callback) waited
            on a CPU run queue in that window (:func:`schedstat_delta`): its steps were that much longer than its
            work; None when schedstat could not be read or the window never ended.
        cpu_s: seconds the training thread ran on a CPU in that window; None likewise.
        all_threads_runqueue_wait_s, all_threads_cpu_s: the same summed over every thread of this process (gloo's
            communication threads wake at every collective and wait briefly for a CPU each time: on a 2-core machine
            running 2 ranks they add ~4 % each to the sum on an otherwise idle machine, measured), for diagnosis.
        threads: threads of this process at the window's end (schedstat files read); None likewise.
    """

    def __init__(self, windows: Windows, cuda: bool) -> None:
        self.windows = windows
        self.cuda = cuda
        self.times_s: list[float] = []
        self.slowest_s: list[float] = []
        self.wall_s: list[float] = []
        self.mem_high_water_bytes: list[int] = []
        self.mem_kind = "cuda_max_allocated" if cuda else "rss_peak"
        self._t0: float | None = None
        self.window_wall_s: float | None = None
        self.runqueue_wait_s: float | None = None
        self.cpu_s: float | None = None
        self.all_threads_runqueue_wait_s: float | None = None
        self.all_threads_cpu_s: float | None = None
        self.threads: int | None = None
        self._tid: int | None = None
        self._window_t0: float | None = None
        self._sched0: dict[int, tuple[int, int]] | None = None

    def contention(self) -> dict[str, float | int | None]:
        """The timed window's CPU contention for the rank file (:class:`sweeper.results.rankfile.Schedstat`):
        ``runqueue_wait_s`` and ``cpu_s`` of the training thread, ``all_threads_runqueue_wait_s`` and
        ``all_threads_cpu_s`` summed over the process's threads, ``wall_s`` (seconds; see the attributes) and
        ``threads``; None values when schedstat could not be read or the window never ended."""
        return {
            "runqueue_wait_s": self.runqueue_wait_s,
            "cpu_s": self.cpu_s,
            "all_threads_runqueue_wait_s": self.all_threads_runqueue_wait_s,
            "all_threads_cpu_s": self.all_threads_cpu_s,
            "wall_s": self.window_wall_s,
            "threads": self.threads,
        }

    def _begin_window(self) -> None:
        """Before the first timed step's clock: the window's start readings (wall clock, schedstat)."""
        self._window_t0 = time.monotonic()  # its own clock: the step clock (perf_counter) is left alone
        self._tid = threading.get_native_id()  # the thread that runs the training loop (and these callbacks)
        self._sched0 = read_schedstat()

    def _end_window(self) -> None:
        """After the last timed step's clock stopped: the window's end readings and the schedstat differences."""
        end = read_schedstat()
        if self._window_t0 is None:
            return
        self.window_wall_s = time.monotonic() - self._window_t0
        if self._sched0 is not None and end is not None:
            self.all_threads_cpu_s, self.all_threads_runqueue_wait_s = schedstat_delta(self._sched0, end)
            self.threads = len(end)
            if self._tid in self._sched0 and self._tid in end:
                main = {self._tid: self._sched0[self._tid]}
                self.cpu_s, self.runqueue_wait_s = schedstat_delta(main, {self._tid: end[self._tid]})

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _high_water_bytes(self) -> int:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def on_step_begin(self, args, state, control, **kwargs):
        # timed steps: synchronised as always; the other windows' steps likewise (outside the timed window)
        self._sync()
        if state.global_step == self.windows.timed.start:  # the first timed step, before its clock starts
            self._begin_window()
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        # global_step was incremented just before on_step_end
        if self._t0 is not None:
            self._sync()
            dt = time.perf_counter() - self._t0
            timed = state.global_step - 1 in self.windows.timed
            if timed:
                self.times_s.append(dt)
            self.wall_s.append(dt)
            self.mem_high_water_bytes.append(self._high_water_bytes())  # after the clock stopped
            if timed and not self.windows.decided:  # timed_steps=auto, after the clock stopped
                self.slowest_s.append(slowest_over_ranks(dt))
                reason = self.windows.rule.decide(self.slowest_s)
                if reason:
                    self.windows.end_timed(state.global_step, reason)
            if timed and self.windows.decided and state.global_step == self.windows.timed.stop:
                self._end_window()  # the last timed step, after its clock stopped (auto: once the rule ended it)
        self._t0 = None
        if self.windows.rule is not None and self.windows.decided and state.global_step >= self.windows.end:
            control.should_training_stop = True  # auto: max_steps counts the cap; a fixed count ends at max_steps


def slowest_over_ranks(seconds: float) -> float:
    """``seconds`` all-reduced with MAX over the default process group (the slowest rank's value); ``seconds``
    itself when ``torch.distributed`` is not initialised or has one rank. A collective: every rank must call it at
    the same step. On NCCL the value travels as a CUDA tensor, otherwise (gloo) on the CPU; float64."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return seconds
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


class MemoryWindow(TrainerCallback):
    """Tensor-byte peak (CPU, MemTracker) and model-state bytes of this rank, in the memory window.

    Attributes after training:
        peak_bytes: MemTracker's peak total over the window (CPU only; None on CUDA).
        breakdown_bytes: that peak split by MemTracker's categories (Parameter, Buffer, Gradient, Activation,
            Temp, Optstate, Other).
        state_bytes: :func:`model_state_bytes` measured before the window's first optimizer step.
    """

    def __init__(self, windows: Windows, cuda: bool, budget_bytes: int | None = None) -> None:
        self.windows = windows
        self.cuda = cuda
        self.budget_bytes = budget_bytes  # CPU: raise the OOM a GPU would past it (sweeper.job.budget)
        self.peak_bytes: int | None = None
        self.breakdown_bytes: dict[str, int] = {}
        self.state_bytes: dict[str, int] = {}
        self._tracker = None
        self._model = None
        self._optimizer = None

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step not in self.windows.memory:
            return
        self._model, self._optimizer = model, optimizer
        if self.cuda:
            return
        if self._tracker is None:
            from torch.distributed._tools.mem_tracker import MemTracker

            from sweeper.job.budget import BudgetTracker

            self._tracker = BudgetTracker(self.budget_bytes) if self.budget_bytes else MemTracker()
            self._tracker.track_external(model, innermost_optimizer(optimizer))
            self._tracker.__enter__()
        else:
            self._tracker.reset_mod_stats()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if state.global_step == self.windows.memory.start and self._model is not None:
            self.state_bytes = model_state_bytes(self._model, self._optimizer)

    def on_step_end(self, args, state, control, **kwargs):
        if self._tracker is not None and state.global_step - 1 == self.windows.memory.stop - 1:
            self._tracker.__exit__(None, None, None)
            snap = self._tracker.get_tracker_snapshot("peak")
            totals: dict[str, int] = {}
            for per_dev in snap.values():
                for k, v in per_dev.items():
                    key = getattr(k, "value", str(k))
                    totals[key] = totals.get(key, 0) + int(v)
            self.peak_bytes = totals.pop("Total", None)
            self.breakdown_bytes = totals
            self._tracker = None


class ProfilerWindow(TrainerCallback):
    """A ``torch.profiler`` trace of the profile window; exports a chrome trace and a top-ops table per rank."""

    def __init__(self, windows: Windows, cuda: bool, out_dir: Path, rank: int, trace: bool) -> None:
        self.windows = windows
        self.cuda = cuda
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.trace = trace
        self.artifacts: dict[str, str] = {}
        self._prof = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self._prof is None and state.global_step == self.windows.profile.start and len(self.windows.profile):
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._prof = profile(activities=acts, record_shapes=False, with_stack=False)
            self._prof.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self._prof is not None and state.global_step - 1 == self.windows.profile.stop - 1:
            self._prof.__exit__(None, None, None)
            sort_by = "self_cuda_time_total" if self.cuda else "self_cpu_time_total"
            table = self._prof.key_averages().table(sort_by=sort_by, row_limit=20)
            top = self.out_dir / f"top_ops_rank{self.rank}.txt"
            top.write_text(table)
            self.artifacts[f"top_ops_rank{self.rank}"] = top.name
            if self.trace:
                trace = self.out_dir / f"trace_rank{self.rank}.json"
                self._prof.export_chrome_trace(str(trace))
                self.artifacts[f"trace_rank{self.rank}"] = trace.name
            self._prof = None


class DtypeProbe(TrainerCallback):
    """Records the dtype a Linear layer really computes in during the first training step.

    A forward hook on the first ``nn.Linear`` of the model stores its output dtype: under autocast that is the
    autocast dtype, without it the weight dtype. This is how a silent fp32 run labelled fp16 is caught.
    """

    def __init__(self) -> None:
        self.compute_dtype: str | None = None
        self._handle = None

    def attach(self, model: torch.nn.Module) -> None:
        """Hook the first Linear of ``model``."""
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                self._handle = m.register_forward_hook(self._hook)
                return

    def _hook(self, module, inputs, output):
        if self.compute_dtype is None and isinstance(output, torch.Tensor):
            self.compute_dtype = str(output.dtype).replace("torch.", "")
        if self._handle is not None and self.compute_dtype is not None:
            self._handle.remove()
            self._handle = None


class LossLog(TrainerCallback):
    """Training losses as logged by the Trainer (one per optimizer step with ``logging_steps=1``, which
    :func:`sweeper.point.passthrough.sweeper_training_args` sets; the Trainer logs after ``on_step_end``, outside
    the timed window).

    Attributes:
        losses: each logged training loss (the mean over ranks of the steps since the last log).
        steps: for each entry of :attr:`losses`, the optimizer step it was logged at (1-based ``global_step``).
    """

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.steps: list[int] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))
            self.steps.append(int(state.global_step))


def measure_cpu_peak(dtype: str = "fp32", n: int = 512, seconds: float = 0.3) -> Peak:
    """Measure this process's matmul FLOP/s on the CPU (same thread count as the training ranks).

    Runs an ``n x n`` matmul (2·n³ FLOPs each) repeatedly for about ``seconds`` and takes the best rate.

    Returns:
        A :class:`Peak` labelled "measured: ...". Imports torch.
    """
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, dtype=tdtype)
    b = torch.randn(n, n, dtype=tdtype)
    a @ b  # warm-up
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        a @ b
        dt = time.perf_counter() - t0
        best = max(best, 2 * n**3 / dt)
    threads = torch.get_num_threads()
    return Peak(best, f"measured: {dtype} matmul {n}x{n}, {threads} thread(s), best of {seconds:.1f} s")
