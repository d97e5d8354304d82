"""The rank files: the one format two processes share (the ranks write it, :mod:`sweeper.job`; the driver reads it),
and its I/O. Driver side, no torch.

Two files per rank in the point directory:

* ``rank<r>.json`` (:data:`RANK_FILE`): a :class:`RankFile`, written once, atomically (:func:`write_rank_file`),
  when the rank ends, normally or by an exception; a rank killed by a signal leaves none. Read back with
  :func:`read_rank_files`.
* ``rank<r>.step`` (:data:`STEP_FILE`): the rank's progress while it runs: the optimizer steps it has finished (the
  Trainer's ``state.global_step``) as ASCII decimal digits, nothing else (``"4"``). Written at train begin (``0``)
  and after every optimizer step, outside the timed window, by replacing the file (:func:`write_rank_step`), so a
  reader never sees a partial number. Removed by the rank when it starts. It survives a rank killed by a signal, so
  the merge can say which rank died at which step; :func:`read_rank_steps` reads them all.

The types below are the format: each field says what it holds and its unit. Fields added by later versions are
absent from older files (every type is ``total=False``); every reader takes that into account, so old point
directories are still read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

from sweeper.results.atomic import write_json_atomic

#: The process name (``/proc/<pid>/comm``, ``prctl(PR_SET_NAME)``) of a rank forked from the pre-flight worker
#: (:mod:`sweeper.job.forked_launch`): a forked rank's ``/proc/<pid>/environ`` is the worker's, with no ``RANK``, so
#: the driver's host-memory watch tells its rank by this name (:func:`rank_of_process_name`).
RANK_PROCESS_NAME = "sweeper-rank{rank}"
#: The process name of a forked launch process (torchrun's part).
LAUNCH_PROCESS_NAME = "sweeper-launch"
_RANK_NAME = re.compile(r"sweeper-rank(\d+)")


def rank_of_process_name(name: str) -> str | None:
    """The rank (decimal digits) named by a process name of :data:`RANK_PROCESS_NAME`'s form, else None."""
    m = _RANK_NAME.fullmatch(name)
    return m.group(1) if m else None


#: A rank's result file in the point directory (``.format(rank=r)``).
RANK_FILE = "rank{rank}.json"
#: A rank's progress file in the point directory (``.format(rank=r)``): optimizer steps finished, ASCII digits.
STEP_FILE = "rank{rank}.step"
_STEP_NAME = re.compile(r"^rank(\d+)\.step$")
#: ``RankFailure.message`` keeps the first this many characters of the exception's text.
MESSAGE_CHARS = 4000
#: ``RankFailure.traceback`` keeps the last this many characters of the formatted traceback.
TRACEBACK_CHARS = 12000


class RankFailure(TypedDict, total=False):
    """How a rank failed (``RankFile.failure``): the raw exception, classified by the driver, never by the rank."""

    #: ``type(e).__name__``.
    exception_type: str
    #: ``str(e)``, its first :data:`MESSAGE_CHARS` characters.
    message: str
    #: the formatted traceback, its last :data:`TRACEBACK_CHARS` characters.
    traceback: str
    #: ``setup``, ``train`` or ``eval`` (:data:`sweeper.failures.PHASES`).
    phase: str
    #: optimizer steps finished when the failing step began, i.e. the 0-based index of that step; None before the
    #: first step.
    step: int | None
    #: only when the failure is a fault of sweeper's own code at this site (:data:`sweeper.job.faults.SITES`): the
    #: driver records it as ``error`` / ``internal``.
    site: str


class HarnessNote(TypedDict, total=False):
    """A contained fault of sweeper's own measurement code on a rank (``RankFile.harness_faults``,
    :class:`sweeper.job.faults.Degradations`): that measurement is missing, the rest of the point's numbers stand."""

    #: the site (:data:`sweeper.job.faults.SITES`).
    site: str
    #: ``type(e).__name__``.
    exception_type: str
    #: ``str(e)``, its first :data:`MESSAGE_CHARS` characters.
    message: str
    #: optimizer steps finished when it happened (0-based index of the running step); None outside training.
    step: int | None


class Schedstat(TypedDict, total=False):
    """The timed window's CPU contention on one rank (``RankFile.schedstat``,
    :meth:`sweeper.job.timing.StepTimer.contention`).

    Read from ``/proc/self/task/<tid>/schedstat`` (Linux; the kernel's ``Documentation/scheduler/sched-stats.rst``)
    outside every step's clock; threads that started in the window count whole, threads that exited in it are
    missing. Each value is None when schedstat could not be read (not Linux, no such file, a parse error) or the
    window never ended.
    """

    #: seconds the rank's training thread (the one that runs the Trainer's loop) waited on a CPU run queue in the
    #: timed window (runnable, but another task held the CPU).
    runqueue_wait_s: float | None
    #: seconds the training thread ran on a CPU in the timed window.
    cpu_s: float | None
    #: ``runqueue_wait_s`` summed over the rank's threads (gloo's communication threads included), seconds.
    all_threads_runqueue_wait_s: float | None
    #: ``cpu_s`` summed over the rank's threads, seconds.
    all_threads_cpu_s: float | None
    #: the window's wall time, seconds (``time.monotonic`` from just before the first timed step's clock started to
    #: just after the last one's stopped).
    wall_s: float | None
    #: threads of the rank's process, read at the window's end.
    threads: int | None
    #: CPU seconds the hypervisor took from the host's virtual CPUs in the window, summed over every CPU
    #: (``/proc/stat`` steal, ``proc(5)``; host-wide).
    steal_s: float | None
    #: the host's CPUs (``cpuN`` lines of ``/proc/stat``), for ``steal_s``'s share.
    cpus: int | None


class Series(TypedDict, total=False):
    """The rank's per-step history (``RankFile.series``): every window, one entry per optimizer step this rank
    finished, in step order; :func:`sweeper.results.metrics.series_from_ranks` merges the ranks'."""

    #: seconds per step: ``time.perf_counter`` from ``on_step_begin`` to ``on_step_end``, on CUDA synchronised at
    #: both ends; a timed step's entry is the same number as in ``RankFile.step_times_s``.
    step_wall_s: list[float]
    #: bytes: the memory high-water mark so far, read after each step's clock stopped (see ``mem_kind``).
    mem_high_water_bytes: list[int]
    #: which counter ``mem_high_water_bytes`` holds: ``"cuda_max_allocated"`` (``torch.cuda.max_memory_allocated``)
    #: or, on CPU, ``"rss_peak"`` (the process's peak RSS, ``ru_maxrss`` x 1024).
    mem_kind: str
    #: for each entry of ``RankFile.losses``, the 1-based optimizer step it was logged at.
    loss_steps: list[int]
    #: for each entry of ``RankFile.losses``, the Trainer's logged learning rate (None: none logged).
    learning_rate: list[float | None]
    #: for each entry of ``RankFile.losses``, the Trainer's logged ``grad_norm`` (total norm before clipping; None:
    #: none logged).
    grad_norm: list[float | None]
    #: for each finished step (same length as ``step_wall_s``): the optimizer's update was skipped (fp16 dynamic
    #: loss scaling found inf/NaN gradients: accelerate's ``step_was_skipped``, DeepSpeed's ``overflow``).
    optimizer_step_skipped: list[bool]


class RankMemory(TypedDict, total=False):
    """What the rank measured of its memory (``RankFile.memory``). All bytes."""

    #: MemTracker's tensor-byte peak over the memory window (CPU); None on CUDA.
    tensor_peak_bytes: int | None
    #: that peak split by MemTracker's categories (Parameter, Buffer, Gradient, Activation, Temp, Optstate, Other).
    tensor_peak_breakdown_bytes: dict[str, int]
    #: the process's peak RSS (``ru_maxrss`` x 1024).
    rss_peak_bytes: int
    #: parameters this rank holds (its shard), measured in the memory window.
    param_bytes: int
    #: gradients this rank holds; None under DeepSpeed (consumed inside its own step, not observable).
    grad_bytes: int | None
    #: optimizer state this rank holds (DeepSpeed's fp32 master partitions included).
    optimizer_state_bytes: int
    #: CUDA only: ``torch.cuda.max_memory_allocated()`` over the run.
    cuda_peak_allocated_bytes: int
    #: CUDA only: ``torch.cuda.max_memory_reserved()`` over the run.
    cuda_peak_reserved_bytes: int


class ModelShape(TypedDict, total=False):
    """The numbers :func:`sweeper.results.mfu.flops_per_token` needs, read off the unwrapped model
    (``RankFile.model``, :func:`sweeper.job.harness.model_flops_inputs`). All counts."""

    param_count: int
    #: unique parameters minus the input token embedding (added back when the output projection is tied to it).
    non_embedding_params: int
    num_layers: int
    num_heads: int
    head_dim: int


class RankPeak(TypedDict, total=False):
    """The device peak MFU divides by (``RankFile.peak``, rank 0 when ok)."""

    #: FLOP/s; None when there is none (a GPU without a datasheet entry for the dtype: ``source`` says so).
    flops: float | None
    #: where it comes from (a datasheet entry, or how and when it was measured on CPU).
    source: str


class RankFile(TypedDict, total=False):
    """``rank<r>.json``: what one rank measured, or how it failed.

    Every rank file has ``rank``, ``world_size``, ``pid``, ``host``, ``status``, ``steps_completed``, ``setup`` and
    ``memory``; a failed one ``failure``; a measured one (:mod:`sweeper.job.harness`) every other field but those
    marked CUDA only, rank 0 or eval. A failed batch-search trial (:mod:`sweeper.job.batch_trials`) writes only the
    common fields.
    """

    rank: int
    world_size: int
    pid: int
    host: str
    #: ``"ok"`` (``train()`` returned, and evaluation when asked) or ``"failed"``.
    status: str
    #: only when failed.
    failure: RankFailure
    #: optimizer steps this rank finished (the Trainer's ``state.global_step``); None when training never began.
    #: Fewer than it was to run (:func:`sweeper.failures.attribution.steps_planned`) on an ``ok`` rank: it left
    #: early.
    steps_completed: int | None
    #: seconds: wall time of each step of the timed window whose optimizer update ran (skipped steps left out:
    #: ``skipped_timed_steps``).
    step_times_s: list[float]
    #: 0-based indices of the timed window's steps whose optimizer update was skipped (fp16 loss-scale overflow),
    #: left out of ``step_times_s``.
    skipped_timed_steps: list[int]
    #: contained faults of sweeper's own measurement code (the point's other numbers stand).
    harness_faults: list[HarnessNote]
    #: ``[start, stop]``: the timed window as 0-based step indices, ``[start, stop)`` (1-based steps ``start + 1``
    #: .. ``stop``); ``stop`` is None when the window never ended (``timed_steps=auto`` and the rank left training
    #: before the stop rule decided). With ``timed_steps=auto`` every rank ends it at the same step (the ranks
    #: all-reduce each step time with MAX and apply the same rule), and the steps the rank was to run are ``stop +
    #: memory_steps + profile_steps``, not the spec's ``total_steps`` (which counts the cap).
    timed_window: list[int | None]
    #: why the timed window ended: ``"fixed"`` (a fixed ``timed_steps``), ``"ci"`` (the median's interval within
    #: ``timing.ci_rel``), ``"cap"`` (``timing.max_timed_steps`` reached); None when it never ended.
    timed_stop: str | None
    #: the timed window's CPU contention on this rank.
    schedstat: Schedstat
    #: training loss per logged step (the Trainer logs every step, ``logging_steps=1``).
    losses: list[float]
    #: the per-step history, every window.
    series: Series
    memory: RankMemory
    model: ModelShape
    #: what really ran, as verified (:mod:`sweeper.job.verify`).
    setup: dict[str, Any]
    #: seconds: from the rank's start to the end of training/evaluation.
    train_wall_s: float
    #: name -> file name in the point directory (traces, top-ops tables).
    artifacts: dict[str, str]
    #: CUDA only: ``torch.cuda.get_device_name()``.
    device_name: str
    #: rank 0 when ok: the device peak MFU divides by.
    peak: RankPeak
    #: eval: the metrics ``Trainer.evaluate()`` returned, when evaluation ran.
    eval: dict[str, Any]


def rank_file_path(point_dir: Path, rank: int) -> Path:
    """``<point_dir>/rank<rank>.json``."""
    return Path(point_dir) / RANK_FILE.format(rank=rank)


def write_rank_file(point_dir: Path, data: RankFile) -> None:
    """Write ``data`` as ``<point_dir>/rank<data["rank"]>.json``, atomically
    (:func:`sweeper.results.atomic.write_json_atomic`).

    Raises:
        OSError: the point directory cannot be written.
    """
    write_json_atomic(rank_file_path(point_dir, data["rank"]), data)


def read_rank_files(point_dir: Path, ranks: Iterable[int] | None = None) -> list[RankFile]:
    """The parsed rank files of ``point_dir``: every ``rank*.json`` in file-name order (``ranks`` None), or the files
    of ``ranks`` that exist, in that order.

    Raises:
        ValueError: a rank file that is not JSON (the ranks write them atomically, so only a foreign file).
        OSError: a rank file that cannot be read.
    """
    pdir = Path(point_dir)
    if ranks is None:
        paths = sorted(pdir.glob("rank*.json"))
    else:
        paths = [p for p in (rank_file_path(pdir, r) for r in ranks) if p.exists()]
    return [json.loads(p.read_text()) for p in paths]


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
