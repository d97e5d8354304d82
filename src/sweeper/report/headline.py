"""The answer at the top of the report: which configuration to pick, in one or two sentences.

Sentence one names the fastest ``ok`` configuration (highest median tokens/s per device; ties of that number broken
by point id so the sentence is the same on every rebuild), the points tied with it (their tokens/s per device
intervals overlap its own: from the 95 % confidence interval of the median step time, or the p10-p90 spread of
records without one, :mod:`sweeper.results.frontier`) and then which of them to pick (the least memory on the
frontier: the measurements cannot tell them apart) and what to rerun to tell them apart, the one with the least peak
memory, and, for each
device capacity known (``--device-mem`` lines, else the single ``cluster.gpu_mem_gib`` that capacity planning
judged every point against: the ``predicted_device_mem_bytes`` column), the fastest whose measured peak fits in it.
Sentence two counts the points per status and how many are on the frontier.

A throughput verdict (the fastest, the fastest that fits) that involves a point measured under CPU contention
(``contended``: a rank's training thread waited more than ``timing.contention_warn_frac`` of the timed window for a CPU,
docs/measurement.md "Contention") is not presented as certain: the named point, a point tied with it, or a slower
contended point that would reach it had its threads not waited (:func:`contended_involved`) adds the clause "not
certain: ... measured under CPU contention".

Configurations are named by their values on the swept axes (``fsdp=none gc=true``), in code spans; every outside
string goes through :mod:`sweeper.report.md`. Units: tokens/s per device; peak memory in the report's unit (GiB =
2**30 bytes or MiB = 2**20 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sweeper.report.fmt import cli, cli_overrides
from sweeper.report.md import code, escape
from sweeper.results.frontier import mark_ties
from sweeper.units import GIB, missing, num

#: Tied points named before "and N more".
MAX_TIED = 3


def capacities(df: pd.DataFrame, device_mem_gib: Sequence[tuple[str, float]] = ()) -> list[tuple[str, float]]:
    """The device capacities the sweep knows, as (label, bytes): the ``device_mem_gib`` (label, GiB) pairs, else
    the one ``predicted_device_mem_bytes`` (``cluster.gpu_mem_gib``) every predicted point was judged against."""
    if device_mem_gib:
        return [(label, gib * GIB) for label, gib in device_mem_gib]
    if "predicted_device_mem_bytes" not in df.columns:
        return []
    caps = pd.to_numeric(df["predicted_device_mem_bytes"], errors="coerce").dropna().unique()
    return [("cluster.gpu_mem_gib", float(caps[0]))] if len(caps) == 1 else []


def config_name(row: pd.Series, axes: Sequence[str]) -> str:
    """A point named by its values on the swept ``axes`` (``fsdp=none gc=true``), else its overrides, else its id;
    a Markdown code span."""
    parts = [f"{a}={cli(row[a])}" for a in axes if a in row.index and not missing(row[a])]
    return code(" ".join(parts) or " ".join(cli_overrides(row.get("overrides"))) or str(row["point_id"]))


def _numbers(row: pd.Series, unit: tuple[str, int]) -> str:
    return (
        f"{num(row['tokens_per_s_per_device'])} tokens/s per device, "
        f"{num(row['peak_mem_bytes'], unit[1], 3, zeros=True)} {unit[0]} peak"
    )


def _tied(ties: pd.Series, row: pd.Series) -> list[str]:
    """The point ids tied with ``row`` on throughput (:func:`sweeper.results.frontier.mark_ties`)."""
    value = ties[row.name]
    return [] if missing(value) else str(value).split()


def _tie_basis(df: pd.DataFrame, ties: pd.Series, row: pd.Series) -> str:
    """What the tie of ``row`` rests on: the 95 % confidence intervals of the median step times when every point
    involved has one, the p10-p90 spreads when none has (records older than the interval), both otherwise
    (:func:`sweeper.results.frontier.throughput_interval`)."""
    col = "step_time_s_ci95_low"
    if col not in df.columns:
        return "their p10-p90 step-time spreads overlap"
    pids = df["point_id"].astype(str) if "point_id" in df.columns else pd.Series(df.index.astype(str), index=df.index)
    involved = pids.isin({str(pids[row.name]), *_tied(ties, row)})
    has = pd.to_numeric(df.loc[involved, col], errors="coerce").notna()
    if has.all():
        return "the 95 % confidence intervals of their median step times overlap"
    if not has.any():
        return "their p10-p90 step-time spreads overlap"
    return "their step-time intervals overlap: 95 % confidence interval of the median, p10-p90 for older records"


def _some(pids: list[str], names: dict[str, str]) -> str:
    """The first :data:`MAX_TIED` of ``pids`` by name, then how many more."""
    shown = ", ".join(names.get(t, code(t)) for t in pids[:MAX_TIED])
    return shown + (f" and {len(pids) - MAX_TIED:,} more" if len(pids) > MAX_TIED else "")


class _Names(dict[str, str]):
    """Point id -> :func:`config_name` of the ``ok`` rows (``_pid`` column), each made when first asked: a
    10,000-point table names only the few points the answer shows."""

    def __init__(self, ok: pd.DataFrame, axes: Sequence[str]) -> None:
        super().__init__()
        self.ok, self.axes = ok, axes
        self.where = {pid: k for k, pid in enumerate(ok["_pid"])}

    def __missing__(self, pid: str) -> str:
        if pid not in self.where:
            raise KeyError(pid)
        (_, row), *_ = self.ok.iloc[[self.where[pid]]].iterrows()  # as iterrows gives it: the table's own values
        self[pid] = config_name(row, self.axes)
        return self[pid]

    def get(self, pid: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self[pid] if pid in self.where else default


def _flag(v: object) -> bool:
    return not missing(v) and bool(v)


def lost_frac(df: pd.DataFrame) -> pd.Series:
    """Per row, the share of the timed window its steps lost to contention: the larger of ``runqueue_wait_frac``
    (waiting for a CPU) and ``steal_frac`` (the hypervisor's steal), fractions; NaN where neither was measured."""
    cols = [pd.to_numeric(df[c], errors="coerce") for c in ("runqueue_wait_frac", "steal_frac") if c in df.columns]
    if not cols:
        return pd.Series(float("nan"), index=df.index)
    return pd.concat(cols, axis=1).max(axis=1, skipna=True)


def contended_involved(ok: pd.DataFrame, best: pd.Series, tied: Sequence[str]) -> list[str]:
    """The contended points (``contended`` true) a throughput verdict for ``best`` rests on: ``best`` itself, the
    points ``tied`` with it, and any slower contended point whose tokens/s per device / (1 - its lost share,
    :func:`lost_frac`) reaches ``best``'s (had its threads not waited for a CPU or the
    hypervisor, it could be as fast: a first-order bound, assuming the loss lay on the step's critical path; a
    fraction of 1 or more always reaches). Point ids, ``best`` first.

    Args:
        ok: the candidate rows, with ``_pid`` (point id) and ``_tps`` (tokens/s per device) columns as
            :func:`answer` makes them.
    """
    if "contended" not in ok.columns:
        return []
    frac = lost_frac(ok)  # waiting for a CPU, or the hypervisor's steal: the larger
    out = []
    for i, row in ok[ok["contended"].map(_flag).astype(bool)].iterrows():  # the contended rows only
        f = frac[i]
        reaches = pd.isna(f) or f >= 1 or row["_tps"] / (1 - f) >= best["_tps"]
        if row["_pid"] == best["_pid"] or row["_pid"] in tied or reaches:
            out.append(row["_pid"])
    return sorted(out, key=lambda p: (p != best["_pid"], p))


def _unsure(ok: pd.DataFrame, best: pd.Series, tied: Sequence[str], names: dict[str, str]) -> str:
    """The clause that keeps a verdict for ``best`` from sounding certain (:func:`contended_involved`), or ``""``."""
    pids = contended_involved(ok, best, tied)
    if not pids:
        return ""
    verb = "was" if len(pids) == 1 else "were"
    return f" (not certain: {_some(pids, names)} {verb} measured under CPU contention)"


#: The fewest timed steps a rerun to separate tied points is advised (twice the sweep's, at least this).
MIN_RERUN_STEPS = 16


def _pick_among_tied(ok: pd.DataFrame, fastest: pd.Series, tied: Sequence[str], names: dict[str, str]) -> str:
    """The clause after "tied with ...": the measurements cannot tell the candidates (``fastest`` and the points
    ``tied`` with it) apart, so the pick is the one of least peak memory on the frontier (``fastest`` itself, or a
    tied frontier point: the frontier's meaning, never "fastest but off the frontier"), and what to rerun to tell them
    apart (``timed_steps`` twice the most any of them timed, at least :data:`MIN_RERUN_STEPS`, or ``auto``)."""
    rows = ok[ok["_pid"].isin([fastest["_pid"], *tied])]
    front = rows[rows["on_frontier"].astype(bool)]
    pool = front if len(front) else rows
    pick = pool.sort_values(["_mem", "_tps", "_pid"], ascending=[True, False, True], kind="stable").iloc[0]
    steps = pd.to_numeric(rows.get("timed_steps_measured", pd.Series(dtype=float)), errors="coerce").max()
    more = max(MIN_RERUN_STEPS, 2 * int(steps)) if not pd.isna(steps) else MIN_RERUN_STEPS
    which = (
        "it, the least memory of them"
        if pick["_pid"] == fastest["_pid"]
        else f"{names[pick['_pid']]}, as fast within the intervals with the least memory of them"
    )
    return (
        f": the measurements cannot tell them apart, so pick {which}; to tell them apart, rerun these points "
        f"with {code(f'timed_steps={more}')} (or {code('timed_steps=auto')})"
    )


def answer(
    df: pd.DataFrame,
    axes: Sequence[str],
    unit: tuple[str, int],
    device_mem_gib: Sequence[tuple[str, float]] = (),
) -> list[str]:
    """The first paragraphs of the report (Markdown, outside text escaped): the answer, then the counts.

    Args:
        df: the results table (:func:`sweeper.results.row.records_to_frame`).
        axes: the swept axes that name a configuration.
        unit: the report's memory unit, (name, bytes).
        device_mem_gib: device capacities as (label, GiB) pairs (see :func:`capacities`).
    """
    if not len(df):
        return ["No points: this sweep directory holds no results yet."]
    tps = pd.to_numeric(df["tokens_per_s_per_device"], errors="coerce")
    mem = pd.to_numeric(df["peak_mem_bytes"], errors="coerce")
    measured = (df["status"] == "ok") & tps.notna() & mem.notna()
    ok = df[measured].assign(_tps=tps[measured], _mem=mem[measured], _pid=df.loc[measured, "point_id"].astype(str))
    out: list[str] = []
    if len(ok):
        names = _Names(ok, axes)
        fastest = ok.sort_values(["_tps", "_pid"], ascending=[False, True], kind="stable").iloc[0]
        least = ok.sort_values(["_mem", "_tps", "_pid"], ascending=[True, False, True], kind="stable").iloc[0]
        fitting = [
            (label, cap, ok[ok["_mem"] <= cap].sort_values(["_tps", "_pid"], ascending=[False, True], kind="stable"))
            for label, cap in capacities(df, device_mem_gib)
        ]
        named = {fastest.name, least.name, *(fits.index[0] for _, _, fits in fitting if len(fits))}
        ties = mark_ties(df, rows=pd.Series(df.index.isin(list(named)), index=df.index))
        parts = [f"Fastest: {names[fastest['_pid']]} ({_numbers(fastest, unit)})"]
        tied = _tied(ties, fastest)
        if tied:
            parts[0] += f", tied with {_some(tied, names)} ({_tie_basis(df, ties, fastest)})"
        mems = dict(zip(ok["_pid"], ok["_mem"], strict=True))
        if tied:
            parts[0] += _pick_among_tied(ok, fastest, tied, names)
        parts[0] += _unsure(ok, fastest, tied, names)
        parts.append(f"least memory: {names[least['_pid']]} ({_numbers(least, unit)})")
        same = [t for t in _tied(ties, least) if mems.get(t) == least["_mem"]]
        if same:
            parts[-1] += f", tied with {_some(same, names)} (same memory, overlapping ranges)"
        for label, cap, fits in fitting:
            where = f"{escape(label)} ({num(cap, unit[1], 3, zeros=True)} {unit[0]})"
            if len(fits):
                best = fits.iloc[0]
                parts.append(f"fastest that fits {where}: {names[best['_pid']]} ({_numbers(best, unit)})")
                parts[-1] += _unsure(fits, best, _tied(ties, best), names)
            else:
                parts.append(f"no ok point fits {where}")
        out.append("; ".join(parts) + ".")
    else:
        out.append("No point finished with status ok and measured numbers, so there is no answer yet.")
    counts = df["status"].value_counts()
    bad = {s: int(n) for s, n in counts.items() if s != "ok"}
    n_front = int(df["on_frontier"].sum())
    count = f"{len(df):,} points: {int(counts.get('ok', 0)):,} ok ({n_front:,} on the frontier)"
    if bad:
        count += "; " + ", ".join(f"{n:,} {escape(s)}" for s, n in sorted(bad.items(), key=lambda x: (-x[1], x[0])))
        apart = {"pruned": "Pruned before launch", "skipped": "Skipped by the search"}
        sections = ["Failures"] * bool(set(bad) - set(apart)) + [apart[s] for s in apart if s in bad]
        count += f" (reasons under {' and '.join(sections)})"
    out.append(count + ".")
    return out
