"""What the frontier search knows, read back from the sweep directory: the records are the truth (so a killed
search resumes where it stopped), ``search.json`` only adds the prediction each point was launched on.

Throughput intervals come from :func:`sweeper.results.frontier.throughput_interval` (the report's), memory is
``peak_mem_bytes``; seconds are ``wall_time_s`` (from launching a point's ranks to its record).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sweeper.results.atomic import write_json_atomic
from sweeper.results.frontier import throughput_interval
from sweeper.results.record import Record, read_record
from sweeper.results.sweepdir import SweepDir
from sweeper.search.order import Measured, on_frontier


def interval(record: Record) -> tuple[float, float] | None:
    """``(low, high)`` tokens/s per device of an ``ok`` record (the report's interval), or None without a
    throughput."""
    import pandas as pd

    m = dict(record.metrics or {})
    if not m.get("tokens_per_s_per_device"):
        return None
    row = {k: m.get(k) for k in ("tokens_per_s_per_device", "step_time_s_median", "step_time_s_ci95_low",
                                 "step_time_s_ci95_high", "step_time_s_p10", "step_time_s_p90")}  # fmt: skip
    row["timed_steps_measured"] = m.get("timed_steps")
    low, high = throughput_interval(pd.DataFrame([row]))
    return float(low.iloc[0]), float(high.iloc[0])


def measured_point(record: Record) -> Measured | None:
    """A full-window ``ok`` record as a :class:`Measured`, or None (not ok, a screen, no throughput or peak)."""
    peak = (record.metrics or {}).get("peak_mem_bytes")
    if record.status != "ok" or record.screen or not peak:
        return None
    iv = interval(record)
    median = (record.metrics or {}).get("tokens_per_s_per_device")
    return None if iv is None else Measured(record.point_id, iv[0], iv[1], float(peak), median and float(median))


def history(sweep: SweepDir, pid: str) -> list[Record]:
    """A point's earlier records set aside (``result.<n>.json``, oldest first) that still read."""
    out = []
    for path in sorted(sweep.point(pid).glob("result.*.json"), key=lambda p: int(p.name.split(".")[1])):
        try:
            out.append(read_record(path))
        except ValueError:
            continue
    return out


def frontier_ids(measured: Iterable[Measured]) -> frozenset[str]:
    """The point ids on the frontier of the measured points (the report's rule)."""
    pts = list(measured)
    return frozenset(a.pid for a, f in zip(pts, on_frontier(pts), strict=True) if f)


@dataclass
class Log:
    """``search.json``: per point the prediction it was launched on (``{"tokens_per_s_per_device", "peak_bytes",
    "round", "window"}``: ``round`` the submission that started it, ``window`` its first job's; ``job`` the window of
    its latest job, ``full`` once promoted); ``rounds``, one entry per submission (a round of a blocking launcher; on
    SLURM each set of jobs submitted when a job ended): its points, how many were promoted and screened, the points
    still in flight (``in_flight``), the time (``at``, Unix seconds) and the margins; ``since_change`` (full-window
    measurements without a frontier change), the stop reason and the cost figures (the report's first line).
    Written atomically after every submission and every job's end; a damaged or missing file is an empty log (the
    records remain)."""

    grid: int = 0
    points: dict[str, dict[str, Any]] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    stop: str | None = None
    cost: dict[str, Any] = field(default_factory=dict)
    since_change: int = 0

    @classmethod
    def read(cls, sweep: SweepDir) -> Log:
        """The sweep's log, or an empty one."""
        try:
            data = json.loads(sweep.search_file.read_text())
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        except (OSError, ValueError, TypeError, AttributeError):
            return cls()

    def write(self, sweep: SweepDir) -> None:
        """Write ``search.json`` atomically, standard JSON: a margin not known yet (infinite: fewer errors than it
        needs) is written as null."""
        write_json_atomic(sweep.search_file, _finite(self.__dict__))


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float (inf, NaN) inside it as None (JSON has no infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x
