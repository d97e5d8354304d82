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
from typing import Any

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
    "pending",  # no final result yet (collected before the sweep finished)
)

#: Statuses after which the point will not change any more (resume skips these).
FINAL_STATUSES: frozenset[str] = frozenset(s for s in STATUSES if s != "pending")


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
            (SLURM accounting) or ``internal`` (a bug of sweeper's own); every kind is a row of ``docs/failures.md``.
        setup: what really ran, verified after the Trainer was set up (world size, wrapper type, compute dtype,
            DeepSpeed stage, checkpointing implementation, ``use_reentrant``).
        metrics: the measurements (keys carry units: ``step_time_s_median``, ``peak_mem_bytes``, ...).
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
    """

    sweep_id: str
    point_id: str
    status: str
    overrides: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    replay: str = ""
    reason: str | None = None
    error_kind: str | None = None
    setup: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    failure: dict[str, Any] | None = None
    predicted: dict[str, Any] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    wall_time_s: float | None = None
    series: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status!r} record needs a reason a person can act on")

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-serialisable data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """Build a record from :meth:`to_dict` output; unknown keys are ignored (newer writers)."""
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


def read_record(path: Path) -> Record:
    """Read one ``result.json``.

    Raises:
        ValueError: if the file is not a valid record (the message names the file).
    """
    try:
        return Record.from_dict(json.loads(Path(path).read_text()))
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a valid sweeper result record: {e}") from e
