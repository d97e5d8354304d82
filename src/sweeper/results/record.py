"""The result record: one JSON file per grid point, written atomically.

A record is plain data (JSON-serialisable dicts, no live objects) so that it survives a crash of the job that
wrote it, pickles for SLURM, and can be read back by ``python -m sweeper.report`` long after the sweep ended.

Where records live (``<sweep_dir>/points/<point_id>/result.json``), how they are written (atomically, a final one
never overwritten) and read back, and whether a point is final: :class:`sweeper.results.sweepdir.SweepDir`.

Units: every byte count is in bytes (int), every duration in seconds (float), throughput in tokens/s or
samples/s. Binary units (MiB = 2**20 bytes, GiB = 2**30 bytes) are used only for display.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

#: Every status a point can end in. ``ok`` is the only one with valid throughput numbers.
STATUSES: tuple[str, ...] = (
    "ok",  # ran, measured
    "oom",  # out of memory (device or host allocator); failure holds the parsed numbers
    "host_oom",  # killed by the scheduler for exceeding the job's host memory request
    "error",  # any other exception; error_kind says which family
    "timeout",  # exceeded its wall-clock limit (or the scheduler's time limit)
    "preempted",  # preempted by the scheduler more often than the requeue budget allows
    "cancelled",  # cancelled by a person or the scheduler
    "invalid",  # refused before launch: the combination cannot work (reason names the keys)
    "unsupported",  # refused or stopped: this hardware cannot run what the label says
    "pruned",  # predicted not to fit, not launched
    "skipped",  # search=frontier did not measure it: predicted not to fit or dominated, with margin (docs/search.md)
    "pending",  # no final result yet (collected before the sweep finished)
)

#: Statuses after which the point will not change any more (resume skips these).
FINAL_STATUSES: frozenset[str] = frozenset(s for s in STATUSES if s != "pending")


class RecordMetrics(TypedDict, total=False):
    """``Record.metrics``: what a point measured, as :func:`sweeper.results.metrics.metrics_from_ranks` writes it
    (definitions: that module's docstring) plus the launcher's host-memory numbers. Every key is absent when not
    measured (a failed point, a CPU point, an older record: ``total=False``, so old records still load)."""

    #: warm-up steps left out of the statistics (the spec's ``warmup_steps``).
    warmup_steps_dropped: int
    #: why the timed window ended: ``fixed``, ``ci``, ``cap`` (``mixed`` if the ranks disagreed: never).
    timed_stop: str
    #: max over ranks of the training thread's run-queue wait / the timed window's wall time, a fraction.
    runqueue_wait_frac: float
    #: the hypervisor's share of the host's CPU time in the timed window (``/proc/stat`` steal), max over ranks.
    steal_frac: float
    #: ``runqueue_wait_frac`` or ``steal_frac`` above ``timing.contention_warn_frac``.
    contended: bool
    #: seconds: median, p10 and p90 over the timed steps of the slowest rank's step time.
    step_time_s_median: float
    step_time_s_p10: float
    step_time_s_p90: float
    #: seconds: the median's 95 % confidence interval (order statistics).
    step_time_s_ci95_low: float
    step_time_s_ci95_high: float
    #: that interval's half-width / the median, a fraction.
    step_time_ci95_rel: float
    #: the interval's real coverage, a fraction (below 0.95 for fewer than 6 steps).
    step_time_ci95_coverage: float
    #: steps timed by every rank.
    timed_steps: int
    #: timed steps whose optimizer update was skipped (fp16 loss-scale overflow), left out of the statistics; max
    #: over ranks.
    skipped_steps: int
    #: contained faults of sweeper's own measurement code (what was not measured, and why); absent when none.
    measurement_note: str
    #: tokens per optimizer step, all ranks, each data-parallel batch once: per_device_batch_size x seq_len x
    #: grad_accum x dp (dp = world_size / (tp x sp): a TP or SP group trains on one batch).
    tokens_per_step: int
    #: tokens/s, all ranks (tokens_per_step / median step time).
    tokens_per_s: float
    #: tokens/s per device.
    tokens_per_s_per_device: float
    #: samples/s, all ranks.
    samples_per_s: float
    #: the model's parameters (count).
    param_count: int
    #: training FLOPs per token (PaLM, :func:`sweeper.results.mfu.flops_per_token`).
    flops_per_token: float
    #: TFLOP/s per device (1e12 FLOP/s).
    tflops_per_device: float
    #: model FLOPs utilisation, a fraction; None when the device peak is unknown (``mfu_note`` says why).
    mfu: float | None
    #: FLOP/s: the device peak MFU divides by; None when unknown.
    mfu_peak_flops: float | None
    #: where that peak comes from.
    mfu_peak_source: str
    #: why there is no MFU (the peak's source), only when ``mfu`` is None.
    mfu_note: str
    #: bytes: max over ranks of the peak memory (``peak_mem_kind`` says which counter); None when none measured.
    peak_mem_bytes: int | None
    #: ``cuda_max_allocated`` or ``cpu_tensor_bytes_memtracker``; None without a peak.
    peak_mem_kind: str | None
    #: bytes, CUDA: max over ranks of ``torch.cuda.max_memory_reserved``.
    peak_reserved_bytes: int | None
    #: bytes, CPU: the largest rank's tensor peak by MemTracker category.
    peak_mem_breakdown_bytes: dict[str, int]
    #: bytes: max over ranks of the process's peak RSS.
    rss_peak_bytes: int | None
    #: bytes: max over ranks of the parameters, gradients (None under DeepSpeed) and optimizer state a rank holds.
    param_bytes_per_rank: int | None
    grad_bytes_per_rank: int | None
    optimizer_state_bytes_per_rank: int | None
    #: rank 0's first and last logged training loss.
    loss_first: float
    loss_last: float
    zero_loss: bool
    #: the metrics ``Trainer.evaluate()`` returned (rank 0), when evaluation ran.
    eval: dict[str, Any]
    #: bytes: the host-memory limit on the sum of the ranks' RSS (local launcher).
    host_mem_limit_bytes: int
    #: bytes: the largest sampled sum of the ranks' RSS (local launcher).
    host_rss_peak_bytes: int


@dataclass
class Record:
    """One grid point's outcome.

    Attributes:
        sweep_id: the sweep's unique id (also the last part of the sweep directory name).
        point_id: 12 hex digits, hash of the normalised point spec (see :func:`sweeper.point.identity.point_id`).
        status: one of :data:`STATUSES`.
        overrides: the Hydra overrides that select this point (``["fsdp=full_shard", "gc=true"]``).
        spec: the canonical point spec (flat dict of plain values, see :class:`sweeper.config.spec.PointSpec`).
        replay: a shell command that runs exactly this point again.
        reason: for every non-``ok`` status, a sentence a person can act on.
        error_kind: for ``error``, the family: :data:`sweeper.failures.ERROR_KINDS` from the classifier, ``scheduler``
            (SLURM accounting) or ``internal`` (a bug of sweeper's own, or a rendezvous port another process held);
            every kind is a row of ``docs/failures.md``.
        ran: what really ran, verified after the Trainer was set up (world size, wrapper type, compute dtype,
            DeepSpeed stage, checkpointing implementation, ``use_reentrant``), and how a searched batch was found
            (``batch_search``). Records before this name held it as ``setup`` (read as ``ran``).
        metrics: the measurements (:class:`RecordMetrics`; keys carry units: ``step_time_s_median``,
            ``peak_mem_bytes``, ...).
        failure: failure details: parsed OOM numbers in bytes, rank, phase (setup/train/eval), step, exception
            type, traceback tail.
        predicted: the memory/time model's numbers for this point (filled by capacity planning).
        env: host, devices, library versions, SLURM job id.
        artifacts: paths (relative to the point directory) of traces, top-op tables and logs.
        wall_time_s: seconds from launching the point's ranks to the record being written.
        series: the point's per-step history (:func:`sweeper.results.metrics.series_from_ranks`), or None (no rank
            finished a step, or an older record). Plain JSON: lists of equal length, one entry per optimizer step
            of every window -- ``step`` (int, 1-based), ``window`` (``warmup``/``timed``/``memory``/``profile``),
            ``step_time_s`` (float, seconds, slowest rank), ``loss`` (float or None, rank 0's logged loss),
            ``mem_high_water_bytes`` (int or None, bytes, max over ranks of the high-water mark so far) -- and
            ``mem_kind`` (``cuda_max_allocated`` or ``rss_peak``). Not a column of the results table.
        search: the frontier search's word on a point it did not measure in full (``skipped``): the decision
            (``predicted-no-fit``, ``predicted-dominated``, ``screen-dominated``, ``stopped``), the point that
            dominates it and the numbers compared (tokens/s per device, bytes), the margins used; None otherwise
            (docs/search.md).
    """

    sweep_id: str
    point_id: str
    status: str
    overrides: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    replay: str = ""
    reason: str | None = None
    error_kind: str | None = None
    ran: dict[str, Any] = field(default_factory=dict)
    metrics: RecordMetrics = field(default_factory=RecordMetrics)
    failure: dict[str, Any] | None = None
    predicted: dict[str, Any] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    wall_time_s: float | None = None
    series: dict[str, Any] | None = None
    search: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status!r} record needs a reason a person can act on")

    @property
    def screen(self) -> bool:
        """This record measured the frontier search's short window (``spec.search.window == "screen"``): never the
        point's final measurement when ``ok`` (docs/search.md)."""
        return ((self.spec or {}).get("search") or {}).get("window") == "screen"

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-serialisable data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """Build a record from :meth:`to_dict` output; unknown keys are ignored (newer writers); an earlier record's
        ``setup`` is its ``ran``."""
        if "setup" in data and "ran" not in data:
            data = {**data, "ran": data["setup"]}
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class RecordNotWritten(OSError):
    """A record that could not be written (a full disk, a read-only folder, ...): same ``errno``, ``strerror`` and
    ``filename`` (the ``result.json`` path) as the filesystem's error, plus the unwritten record.

    Attributes:
        record: the record as it would have been written (its status is what the point really ended in).
    """

    def __init__(self, record: Record, error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error), error.filename)
        self.record = record


def read_record(path: Path | str) -> Record:
    """Read one ``result.json``.

    Raises:
        ValueError: if the file is not a valid record (the message names the file).
    """
    try:
        with open(path, "rb") as f:  # UTF-8, as the writer wrote it
            return Record.from_dict(json.loads(f.read()))
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a valid sweeper result record: {e}") from e
