"""Several sweeps compared point by point: what changed between them, and whether it is beyond the noise.

The first sweep is the baseline; every other sweep is compared with it (``python -m sweeper.report A B ...``,
:mod:`sweeper.report.compare_page` writes the page). Points are aligned by their **configuration**: the point's
identity (:func:`sweeper.point.identity.normalised`: budgets and settings without effect left out) without its
``seed`` (two runs of one grid with another seed are the same configurations measured again) and without the model
(so that sweeps of two models line up configuration by configuration).

What each sweep is of, its **context**, decides what a difference means (:func:`context_of`): the model (name,
``model_type`` and config), the hardware (device type and name, or the CPU model and count, and the number of
hosts) and the library versions. Sweeps of the same model on the same hardware are *like for like*: a difference is
a change, and a slower or newly failing point is a **regression**. Sweeps of different models or hardware are
compared as such: the same configuration side by side, never called a regression. Library versions may differ
(before and after an upgrade is what the comparison is for); the page says which changed.

A change of throughput is beyond the noise when the two points' 95 % intervals of tokens/s per device
(:func:`sweeper.results.frontier.throughput_interval`, from the median step time's interval) do not overlap and it
is at least :data:`MIN_CHANGE` (the machine's drift between runs, which no interval sees);
a change of peak memory counts when it exceeds :data:`MEMORY_TOLERANCE` of the baseline's (MemTracker tensor bytes
on CPU and the CUDA allocator's peak repeat to the byte for a configuration, so 1 % is far above their noise).
A throughput change beyond the noise decides the verdict (``faster``, ``slower``); else a memory change does (``more
memory``, ``less memory``); else the configuration is ``unchanged``. Regressions (:data:`REGRESSIONS`): slower,
more memory, stopped fitting (ok, now out of memory), newly failing (ok, now any other failure).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.results.sweepdir import SweepDir
from sweeper.units import missing

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.results.record import Record

#: The keys of a row's tokens/s per device interval in :attr:`Side.rows` (not results columns).
LOW, HIGH = "_tokens_per_s_per_device_low", "_tokens_per_s_per_device_high"
#: Relative change of peak memory (bytes) below which two points use the same memory.
MEMORY_TOLERANCE = 0.01
#: Default smallest relative change of tokens/s per device called a change, even when the intervals do not
#: overlap: an interval sees the noise inside one point's timed window, not the machine's drift between two runs
#: (docs/compare.md: a GPU node repeats within a few percent; this shared 2-core VM drifted 6-32 % between two runs
#: of the same tiny-model grid, ``tests/integration/test_compare_sweeps.py``).
MIN_CHANGE = 0.05
#: Spec fields left out of the configuration key: the seed, and the model (a context of the sweep).
NOT_CONFIGURATION = frozenset({"seed", "model", "model_config", "model_type", "decoder_layer"})
#: Final statuses that mean a point did not run to a measurement (``pending``, ``skipped`` and ``pruned`` are not
#: failures: nothing was tried).
FAILED = frozenset({"oom", "host_oom", "error", "timeout", "cancelled", "preempted", "invalid", "unsupported"})
#: Out of memory: a point that "stops fitting" or "newly fits".
OUT_OF_MEMORY = frozenset({"oom", "host_oom"})
#: Library versions a context names (the record's ``env``).
LIBRARIES = ("torch", "transformers", "accelerate", "deepspeed")

#: The verdicts of one configuration in one sweep against the baseline, in the order the page lists them.
SLOWER, STOPPED_FITTING, NEWLY_FAILING, MORE_MEMORY = "slower", "stopped fitting", "newly failing", "more memory"
FASTER, NEWLY_FITTING, NOW_RUNS, LESS_MEMORY = "faster", "newly fitting", "now runs", "less memory"
SAME, STILL_FAILING, ONLY_BASELINE, ONLY_HERE, NOT_MEASURED = (
    "unchanged",
    "still failing",
    "not in this sweep",
    "new configuration",
    "not measured",
)
#: Verdicts that are regressions between like-for-like sweeps.
REGRESSIONS = frozenset({SLOWER, STOPPED_FITTING, NEWLY_FAILING, MORE_MEMORY})
VERDICT_ORDER = (
    SLOWER,
    STOPPED_FITTING,
    NEWLY_FAILING,
    MORE_MEMORY,
    FASTER,
    NEWLY_FITTING,
    NOW_RUNS,
    LESS_MEMORY,
    SAME,
    STILL_FAILING,
    NOT_MEASURED,
    ONLY_HERE,
    ONLY_BASELINE,
)


@dataclass(frozen=True)
class Side:
    """One sweep of a comparison.

    Attributes:
        path: the sweep directory. sweep_id: its id. records: its records. df: its results frame
            (:func:`sweeper.results.row.records_to_frame`), one row per record, in the records' order.
        context: :func:`context_of` its records. keys: the configuration key of each row (:func:`configuration`).
        rows: the results row of each configuration (the last one when the sweep has it twice), with its tokens/s
            per device interval (:data:`LOW`, :data:`HIGH`), built once.
    """

    path: Path
    sweep_id: str
    records: list[Record]
    df: pd.DataFrame
    context: dict[str, Any]
    keys: list[str]
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Side:
        """The sweep at ``path``, read as the single-sweep report reads it.

        Raises:
            ValueError: not a sweep directory, or a ``result.json`` is not a valid record (the message names it).
        """
        from sweeper.report.build import collect

        sweep = SweepDir(path)
        why = sweep.not_a_sweep()
        if why:
            raise ValueError(why)
        from sweeper.results.frontier import throughput_interval

        got = collect(sweep)
        keys = [configuration(r) for r in got.records]
        low, high = throughput_interval(got.df) if len(got.df) else ([], [])
        rows = {}
        for key, row, lo, hi in zip(keys, got.df.to_dict("records"), low, high, strict=True):
            rows[key] = {**row, LOW: float(lo), HIGH: float(hi)}
        return cls(sweep.path, sweep.sweep_id, got.records, got.df, context_of(got.records), keys, rows)

    def row(self, key: str) -> dict[str, Any] | None:
        """The results row of configuration ``key`` (the last one when the sweep has it twice), or None."""
        return self.rows.get(key)


def configuration(record: Record) -> str:
    """The configuration key of a record: its identity (budgets and settings without effect left out) without the
    fields of :data:`NOT_CONFIGURATION`, as canonical JSON. A spec this version cannot read is keyed by its own
    fields, budgets left out."""
    from sweeper.config.spec import PointSpec
    from sweeper.point.identity import BUDGET_FIELDS, normalised

    try:
        data = normalised(PointSpec.from_dict(record.spec))
    except (TypeError, ValueError, KeyError):
        data = {k: v for k, v in (record.spec or {}).items() if k not in BUDGET_FIELDS}
    return json.dumps({k: v for k, v in data.items() if k not in NOT_CONFIGURATION}, sort_keys=True, default=str)


def context_of(records: Sequence[Record]) -> dict[str, Any]:
    """What a sweep is of: ``model`` (the models' names, with their ``model_type`` and config), ``hardware`` (device
    type and name, or CPU model and count; the number of hosts), ``libraries`` (versions of :data:`LIBRARIES`).
    Each value is a sorted list of the distinct values over the records that say it."""
    models, hardware, libraries = set(), set(), set()
    for r in records:
        spec, env = r.spec or {}, r.env or {}
        if spec.get("model"):
            cfg = json.dumps(spec.get("model_config") or {}, sort_keys=True, default=str)
            models.add(f"{spec['model']} ({spec.get('model_type') or '?'}) {cfg}")
        device = env.get("device_type") or (r.ran or {}).get("device_type")
        if device:
            name = env.get("device_name") if device == "cuda" else f"{env.get('cpu')} x{env.get('cpu_count')}"
            hosts = len(set(env.get("hosts") or [env.get("host")]))
            hardware.add(f"{device} {name}, {hosts} host{'s' if hosts != 1 else ''}")
        versions = [f"{lib} {env[lib]}" for lib in LIBRARIES if env.get(lib)]
        if versions:
            libraries.add(", ".join(versions))
    return {"model": sorted(models), "hardware": sorted(hardware), "libraries": sorted(libraries)}


def model_names(context: dict[str, Any]) -> str:
    """The models of a context, by name (``tiny``, ``llama-2-7b``), for a sentence."""
    return ", ".join(sorted({m.split(" (", 1)[0] for m in context["model"]})) or "unknown"


def differences(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """The parts of two contexts that differ (``model``, ``hardware``, ``libraries``); parts one side does not say
    are not compared."""
    return [k for k in ("model", "hardware", "libraries") if base[k] and other[k] and base[k] != other[k]]


def like_for_like(base: dict[str, Any], other: dict[str, Any]) -> bool:
    """Same model and hardware (library versions may differ): a difference is a change, a worse one a regression."""
    return not {"model", "hardware"} & set(differences(base, other))


@dataclass(frozen=True)
class Change:
    """One configuration in one sweep against the baseline.

    Attributes:
        key: the configuration key. verdict: one of :data:`VERDICT_ORDER`.
        base, other: the two results rows (None where the sweep lacks the configuration).
        throughput_ratio: other / baseline tokens/s per device (both ok), else None.
        memory_ratio: other / baseline peak memory (bytes; both ok), else None.
        beyond_noise: the throughput intervals do not overlap (both ok), else None.
        contended: either point was measured under CPU contention (the record's ``contended``).
    """

    key: str
    verdict: str
    base: dict[str, Any] | None
    other: dict[str, Any] | None
    throughput_ratio: float | None = None
    memory_ratio: float | None = None
    beyond_noise: bool | None = None
    contended: bool = False

    @property
    def regression(self) -> bool:
        """The verdict is a regression (:data:`REGRESSIONS`); whether it counts depends on the sweeps' contexts."""
        return self.verdict in REGRESSIONS


@dataclass(frozen=True)
class Comparison:
    """Every configuration of one sweep against the baseline.

    Attributes:
        base, other: the two sweeps. changes: one per configuration in either, baseline order first.
        differs: :func:`differences` of their contexts. like_for_like: :func:`like_for_like`.
    """

    base: Side
    other: Side
    changes: list[Change] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)
    like_for_like: bool = True

    def counts(self) -> dict[str, int]:
        """Configurations per verdict, in :data:`VERDICT_ORDER`, verdicts with none left out."""
        out = {v: sum(c.verdict == v for c in self.changes) for v in VERDICT_ORDER}
        return {v: n for v, n in out.items() if n}

    @property
    def regressions(self) -> list[Change]:
        """The regressions, when the sweeps are like for like (else none: a different model is not a regression)."""
        return [c for c in self.changes if c.regression] if self.like_for_like else []


def compare(base: Side, other: Side, min_change: float = MIN_CHANGE) -> Comparison:
    """``other`` against ``base``, configuration by configuration (see the module doc; ``min_change``: as for
    :func:`change`)."""
    order = list(dict.fromkeys([*base.keys, *other.keys]))
    changes = [change(key, base.row(key), other.row(key), min_change) for key in order]
    differs = differences(base.context, other.context)
    return Comparison(base, other, changes, differs, like_for_like(base.context, other.context))


def _number(row: dict[str, Any], key: str) -> float | None:
    v: Any = row.get(key)
    if missing(v):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def interval(row: dict[str, Any]) -> tuple[float, float] | None:
    """(low, high) tokens/s per device of a row of :attr:`Side.rows` (:func:`sweeper.results.frontier.
    throughput_interval`, computed once per sweep), or None without a throughput."""
    lo, hi = float(row.get(LOW, math.nan)), float(row.get(HIGH, math.nan))
    return None if math.isnan(lo) or math.isnan(hi) else (lo, hi)


def change(
    key: str, base: dict[str, Any] | None, other: dict[str, Any] | None, min_change: float = MIN_CHANGE
) -> Change:
    """The verdict on one configuration: ``base`` and ``other`` are its results rows (None: not in that sweep).
    A throughput change is beyond the noise when the two intervals do not overlap and the ratio differs from 1 by at
    least ``min_change`` (a fraction, :data:`MIN_CHANGE` by default)."""
    if other is None:
        return Change(key, ONLY_BASELINE, base, None)
    if base is None:
        return Change(key, ONLY_HERE, None, other)
    b, o = str(base.get("status")), str(other.get("status"))
    contended = bool(base.get("contended") is True or other.get("contended") is True)
    if b == "ok" and o == "ok":
        bt, ot = _number(base, "tokens_per_s_per_device"), _number(other, "tokens_per_s_per_device")
        bm, om = _number(base, "peak_mem_bytes"), _number(other, "peak_mem_bytes")
        ratio = ot / bt if bt and ot is not None else None
        mem = om / bm if bm and om is not None else None
        bi, oi = interval(base), interval(other)
        apart = bool(bi and oi and (oi[1] < bi[0] or oi[0] > bi[1]))
        beyond = apart and ratio is not None and abs(ratio - 1) >= min_change
        if beyond and ratio is not None:
            verdict = FASTER if ratio > 1 else SLOWER
        elif mem is not None and abs(mem - 1) > MEMORY_TOLERANCE:
            verdict = MORE_MEMORY if mem > 1 else LESS_MEMORY
        else:
            verdict = SAME
        return Change(key, verdict, base, other, ratio, mem, beyond, contended)
    if b == "ok" and o in FAILED:
        return Change(key, STOPPED_FITTING if o in OUT_OF_MEMORY else NEWLY_FAILING, base, other, contended=contended)
    if b in FAILED and o == "ok":
        return Change(key, NEWLY_FITTING if b in OUT_OF_MEMORY else NOW_RUNS, base, other, contended=contended)
    if b in FAILED and o in FAILED:
        return Change(key, STILL_FAILING, base, other, contended=contended)
    return Change(key, NOT_MEASURED, base, other, contended=contended)


def compare_all(sides: Sequence[Side], min_change: float = MIN_CHANGE) -> list[Comparison]:
    """Each sweep after the first against the first (``min_change``: as for :func:`change`).

    Raises:
        ValueError: fewer than two sweeps, or one sweep given twice.
    """
    if len(sides) < 2:
        raise ValueError("a comparison needs at least two sweeps")
    seen = [s.path.resolve() for s in sides]
    if len(set(seen)) != len(seen):
        twice = next(p for p in seen if seen.count(p) > 1)
        raise ValueError(f"{twice} is given twice")
    return [compare(sides[0], s, min_change) for s in sides[1:]]
