"""Time inside each rank, as HF ``TrainerCallback``s: the step windows, every step's wall time, the CPU contention
of the timed window and the profiler's trace.

Steps run in windows, in this order (``warmup_steps``, ``timed_steps``, ``memory_steps``, ``profile_steps``;
:class:`Windows`):

* warm-up: dropped (first steps pay for lazy init, allocator growth, JIT).
* timed: ``time.perf_counter()`` from ``on_step_begin`` to ``on_step_end`` (one optimizer step, all
  gradient-accumulation micro-batches); on CUDA, synchronised at both ends. No tracker or profiler runs here.
  ``timed_steps=auto``: the window goes on until the 95 % interval of the median step time (slowest rank per step)
  is within ``timing.ci_rel`` of the median, or ``timing.max_timed_steps`` (:class:`StepTimer`,
  :class:`sweeper.results.stats.StopRule`); the windows after it follow its real end (:class:`Windows`).
* memory: tensor bytes and model-state bytes (:mod:`sweeper.job.memory`).
* profile: ``torch.profiler`` trace (chrome JSON) and a top-ops table (:class:`ProfilerWindow`).

Every step of every window is also timed the same way and followed (after the clock stops) by a reading of the
memory high-water mark, for the point's per-step history (:class:`StepTimer`, ``Record.series``).
"""

from __future__ import annotations

import resource
import threading
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from sweeper.job.contention import read_schedstat, read_steal, schedstat_delta
from sweeper.job.loss_scale import loss_scale, step_was_skipped
from sweeper.results.rankfile import Schedstat


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

    Skipped optimizer steps (fp16 dynamic loss scaling skips the update of a step whose gradients overflowed; the
    first steps of a run usually do, while the scale comes down): read after each step's clock stopped
    (:func:`sweeper.job.loss_scale.step_was_skipped`: accelerate's flag, or the loss scale lower than after the
    step before); a skipped timed step is left out of :attr:`times_s` (and, with ``timed_steps=auto``, of the stop
    rule's list: the window goes on until enough steps that updated were timed, or the cap's steps are
    spent), so it never flatters the statistics. With ``timed_steps=auto`` the skip is all-reduced with the step
    time (a step skipped on any rank is skipped for all).

    Attributes:
        times_s: wall time of each step of the timed window on this rank whose update ran, seconds.
        skipped_timed: 0-based indices of the timed window's steps whose update was skipped (not in :attr:`times_s`).
        skipped: for every finished step (same length as :attr:`wall_s`), whether its update was skipped.
        slowest_s: ``timed_steps=auto`` only: each timed step's time, max over ranks, seconds (the stop rule's input).
        wall_s: wall time of every optimizer step this rank finished, all windows, in step order, seconds; a timed
            step's entry is the same number as in :attr:`times_s`.
        mem_high_water_bytes: after each finished step (same length as :attr:`wall_s`), the memory high-water mark
            so far, bytes: on CUDA ``torch.cuda.max_memory_allocated()`` (``mem_kind = "cuda_max_allocated"``), on
            CPU the process's peak RSS, ``getrusage(RUSAGE_SELF).ru_maxrss x 1024`` (``mem_kind = "rss_peak"``);
            None from a step where the reading faulted (``notes``, site ``step-memory``).
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
        steal_s: CPU seconds the hypervisor took from this host's virtual CPUs in that window, summed over every CPU
            (``/proc/stat`` steal, :func:`read_steal`; host-wide: other ranks' CPUs included); None when it could
            not be read or the window never ended.
        cpus: the host's CPUs in ``/proc/stat``, for :attr:`steal_s`'s share; None likewise.
    """

    def __init__(self, windows: Windows, cuda: bool, notes: Any = None) -> None:
        self.windows = windows
        self.cuda = cuda
        self.notes = notes  # sweeper.job.faults.Degradations: the per-step memory reading is contained there
        self.times_s: list[float] = []
        self.skipped_timed: list[int] = []
        self.skipped: list[bool] = []
        self._scale: float | None = None
        self.slowest_s: list[float] = []
        self.wall_s: list[float] = []
        self.mem_high_water_bytes: list[int | None] = []
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
        self.steal_s: float | None = None
        self.cpus: int | None = None
        self._steal0: tuple[float, int] | None = None

    def contention(self) -> Schedstat:
        """The timed window's CPU contention for the rank file (:class:`sweeper.results.rankfile.Schedstat`):
        ``runqueue_wait_s`` and ``cpu_s`` of the training thread, ``all_threads_runqueue_wait_s`` and
        ``all_threads_cpu_s`` summed over the process's threads, ``wall_s`` (seconds; see the attributes),
        ``threads``, and the host's ``steal_s`` (s) over ``cpus``; None values when they could not be read or the
        window never ended."""
        return {
            "runqueue_wait_s": self.runqueue_wait_s,
            "cpu_s": self.cpu_s,
            "all_threads_runqueue_wait_s": self.all_threads_runqueue_wait_s,
            "all_threads_cpu_s": self.all_threads_cpu_s,
            "wall_s": self.window_wall_s,
            "threads": self.threads,
            "steal_s": self.steal_s,
            "cpus": self.cpus,
        }

    def _begin_window(self) -> None:
        """Before the first timed step's clock: the window's start readings (wall clock, schedstat)."""
        self._window_t0 = time.monotonic()  # its own clock: the step clock (perf_counter) is left alone
        self._tid = threading.get_native_id()  # the thread that runs the training loop (and these callbacks)
        self._sched0 = read_schedstat()
        self._steal0 = read_steal()

    def _end_window(self) -> None:
        """After the last timed step's clock stopped: the window's end readings and the schedstat differences."""
        end = read_schedstat()
        steal = read_steal()
        if self._window_t0 is None:
            return
        self.window_wall_s = time.monotonic() - self._window_t0
        if self._steal0 is not None and steal is not None and steal[1] == self._steal0[1]:
            self.steal_s, self.cpus = max(0.0, steal[0] - self._steal0[0]), steal[1]
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

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        self._scale = loss_scale(optimizer)  # the loss scale before the first step (fp16), outside every step

    def on_step_begin(self, args, state, control, **kwargs):
        # timed steps: synchronised as always; the other windows' steps likewise (outside the timed window)
        self._sync()
        if state.global_step == self.windows.timed.start:  # the first timed step, before its clock starts
            self._begin_window()
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        # global_step was incremented just before on_step_end
        if self._t0 is not None:
            self._sync()
            dt = time.perf_counter() - self._t0
            timed = state.global_step - 1 in self.windows.timed
            scale = loss_scale(optimizer)  # after the clock stopped
            skipped = step_was_skipped(optimizer, self._scale, scale)
            self._scale = scale
            slowest = dt
            if timed and not self.windows.decided:  # timed_steps=auto: every rank agrees on the time and the skip
                slowest, skipped = slowest_over_ranks(dt, skipped)
            if timed and skipped:
                self.skipped_timed.append(state.global_step - 1)  # no update: left out of the statistics
            elif timed:
                self.times_s.append(dt)
            self.wall_s.append(dt)
            self.skipped.append(skipped)
            self.mem_high_water_bytes.append(self._high_water_or_none(state.global_step))  # after the clock stopped
            if timed and not self.windows.decided:  # timed_steps=auto, after the clock stopped
                if not skipped:
                    self.slowest_s.append(slowest)
                reason = self.windows.rule.decide(self.slowest_s)
                if reason is None and state.global_step == self.windows.timed.stop:
                    reason = "cap"  # the cap's steps are spent (skipped steps included)
                if reason:
                    self.windows.end_timed(state.global_step, reason)
            if timed and self.windows.decided and state.global_step == self.windows.timed.stop:
                self._end_window()  # the last timed step, after its clock stopped (auto: once the rule ended it)
        self._t0 = None
        if self.windows.rule is not None and self.windows.decided and state.global_step >= self.windows.end:
            control.should_training_stop = True  # auto: max_steps counts the cap; a fixed count ends at max_steps

    def _high_water_or_none(self, step: int) -> int | None:
        """:meth:`_high_water_bytes`, or None when it faulted (the per-step series only: contained as the site
        ``step-memory`` in :attr:`notes`, and not read again)."""
        if self.notes is None:
            return self._high_water_bytes()
        if self.notes.failed("step-memory"):
            return None
        return self.notes.value("step-memory", self._high_water_bytes, None, step)


def slowest_over_ranks(seconds: float, skipped: bool = False) -> tuple[float, bool]:
    """(``seconds`` all-reduced with MAX over the default process group: the slowest rank's value, whether any
    rank's optimizer step was ``skipped``); the values themselves when ``torch.distributed`` is not initialised or
    has one rank. One collective: every rank must call it at the same step. On NCCL the values travel as a CUDA
    tensor, otherwise (gloo) on the CPU; float64."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return seconds, skipped
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([seconds, 1.0 if skipped else 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0].item()), bool(t[1].item() > 0)


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

    def abandon(self) -> None:
        """Stop profiling after a fault of this window's own code (:func:`sweeper.job.faults.guard_callback`): leave
        the profiler if it runs; the artifacts written before the fault stay listed."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.__exit__(None, None, None)
