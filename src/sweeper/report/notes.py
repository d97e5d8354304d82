"""How each number was measured: the notes under the results table and in the report's last section.

Library text (MFU peak sources and notes, peak-memory counter names) is escaped or put in code spans here, since
these notes are Markdown. So are the point names and ids in the contention notes (:func:`contention_notes`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from sweeper.report.fmt import capped, text
from sweeper.report.headline import config_name, lost_frac
from sweeper.report.md import code, escape
from sweeper.units import missing, num, percent

#: Contended points named one by one in the Results section before "and N more" (:func:`contention_notes`).
MAX_CONTENDED = 5
#: ``timing.contention_warn_frac`` when a table does not say (:class:`sweeper.config.schema.TimingConfig`).
DEFAULT_CONTENTION_WARN_FRAC = 0.1

_TRACKER_NOTE = "peak tensor bytes counted by torch's `MemTracker` (the CPU analogue of the allocator peak)"
#: What each peak-memory counter means (matched by substring of ``peak_mem_kind``, first match wins).
_MEM_KIND_NOTES = (
    ("reserved", "bytes reserved by the device caching allocator (`torch.cuda.max_memory_reserved`)"),
    ("allocated", "peak bytes of live tensors in the device allocator (`torch.cuda.max_memory_allocated`)"),
    ("tracker", _TRACKER_NOTE),
    ("tensor", _TRACKER_NOTE),
    ("rss", "peak resident set size of the process (`ru_maxrss`); coarse, about 45-50 MiB fixed overhead"),
)


def mem_kind_note(kind: str) -> str:
    """What the peak-memory counter ``kind`` (a ``peak_mem_kind`` value) measures, as Markdown."""
    low = kind.lower()
    note = next((n for key, n in _MEM_KIND_NOTES if key in low), "as reported by the harness (see the record)")
    return f"{note}, max over ranks"


def mem_kinds(df: pd.DataFrame) -> list[str]:
    """The distinct ``peak_mem_kind`` values of the ``ok`` rows, sorted."""
    return sorted({str(k) for k in df.loc[df["status"] == "ok", "peak_mem_kind"] if not missing(k)})


def _values(s: pd.Series) -> str:
    vals = sorted({str(v) for v in s if not missing(v)}, key=lambda x: (len(x), x))
    return ", ".join(vals) if vals else "—"


def method_notes(df: pd.DataFrame, mem_unit: str = "GiB") -> list[str]:
    """The "How each number was measured" list (Markdown items) for the table ``df``, peak memory shown in
    ``mem_unit`` ("GiB" or "MiB")."""
    ok = df[df["status"] == "ok"]
    notes = sorted({one for n in ok["mfu_note"] if not missing(n) for one in [escape(n)]})
    kinds = mem_kinds(df)
    no_mfu = int(ok["mfu"].isna().sum())
    shown_in = (
        f" Shown in {mem_unit}: the largest peak is {'at least' if mem_unit == 'GiB' else 'under'} 1 GiB."
        if len(ok)
        else ""
    )
    return [
        "Step time: median (with its 95 % confidence interval, order statistics, and p10/p90) of the timed steps"
        + (f" ({_values(ok['timed_steps_measured'])} per point)" if ok["timed_steps_measured"].notna().any() else "")
        + " after dropping "
        + (f"{_values(ok['warmup_steps_dropped'])} " if ok["warmup_steps_dropped"].notna().any() else "the ")
        + "warm-up steps; seconds.",
        (
            "tokens/s = per-device batch x sequence length x grad accumulation x world size / median step time; "
            "tokens/s/device = tokens/s / world size."
        ),
        "TFLOP/s/device = FLOPs per token x tokens/s/device / 1e12; MFU = TFLOP/s/device / the device's peak.",
        mfu_peak_note(ok) + (f" No MFU for {no_mfu:,} ok point(s): {capped(notes, 3)}." if no_mfu and notes else ""),
        "Peak memory: "
        + ("; ".join(f"{code(k)}: {mem_kind_note(k)}" for k in kinds) if kinds else "no counter recorded")
        + ". GiB = 2^30 bytes, MiB = 2^20 bytes."
        + shown_in,
        "opt state/rank: optimizer-state bytes held by one rank, in MiB.",
        (
            "fp32 master weights: true when the optimizer updates an fp32 copy of the weights (model_dtype=float32, "
            "or DeepSpeed ZeRO > 0 with bf16/fp16), false for pure bf16/fp16 training."
        ),
        contention_method_note(df),
        "Failed points carry the reason the harness recorded; OOM numbers are parsed from the allocator's message.",
    ]


def contention_sentence(name: str, frac: float, steal: float | None = None) -> str:
    """The plain sentence (Markdown) that names a contended point: ``name`` is Markdown already (a code span);
    ``frac`` its ``runqueue_wait_frac``, ``steal`` its ``steal_frac`` (fractions, shown in percent; the steal only
    when it is the larger or above 1 %)."""
    parts = []
    if not pd.isna(frac):
        parts.append(f"a rank's training thread waited {percent(frac, None)} of the timed window for a CPU")
    if steal is not None and not pd.isna(steal) and (steal >= 0.01 or pd.isna(frac) or steal > frac):
        parts.append(f"the hypervisor took {percent(steal, None)} of the host's CPU time (steal)")
    return (
        f"{name} was measured under CPU contention: {' and '.join(parts) or 'its contention was recorded'}; compare "
        "it with other points only after a rerun on a quiet machine."
    )


def contention_notes(df: pd.DataFrame, axes: Sequence[str] = ()) -> list[str]:
    """One sentence (Markdown, :func:`contention_sentence`) per ``ok`` point measured under CPU contention
    (``contended`` true), the most contended first (:func:`lost_frac`), each named by its swept ``axes`` and its
    point id (both in code spans); after :data:`MAX_CONTENDED` of them, one sentence counts the rest. Empty when
    none is contended or the table has no ``contended`` column (records older than the measure)."""
    if "contended" not in df.columns or not len(df):
        return []
    flag = df["contended"].map(lambda v: not missing(v) and bool(v))
    rows = df[(df["status"] == "ok") & flag]
    if not len(rows):
        return []
    frac = pd.to_numeric(rows["runqueue_wait_frac"], errors="coerce")
    steal = pd.to_numeric(rows["steal_frac"], errors="coerce") if "steal_frac" in rows.columns else frac * float("nan")
    rows = rows.assign(_frac=frac, _steal=steal, _lost=lost_frac(rows), _pid=rows["point_id"].astype(str))
    rows = rows.sort_values(["_lost", "_pid"], ascending=[False, True], kind="stable")
    out = [
        contention_sentence(f"{config_name(row, axes)} (point {code(row['_pid'])})", row["_frac"], row["_steal"])
        for _, row in rows.head(MAX_CONTENDED).iterrows()
    ]
    if len(rows) > MAX_CONTENDED:
        out.append(
            f"{len(rows) - MAX_CONTENDED:,} more ok point(s) were measured under CPU contention: the `contended` "
            "column of `results.csv`."
        )
    return out


def zero_loss_notes(df: pd.DataFrame, axes: Sequence[str] = ()) -> list[str]:
    """One sentence (Markdown) per ``ok`` point whose training loss was exactly 0 at every step (``zero_loss``
    true): it trained on no signal, so its numbers measure no real training. Empty when none did or the table has
    no ``zero_loss`` column (records older than the check)."""
    if "zero_loss" not in df.columns or not len(df):
        return []
    flag = df["zero_loss"].map(lambda v: not missing(v) and bool(v))
    rows = df[(df["status"] == "ok") & flag]
    return [
        f"{config_name(row, axes)} (point {code(str(row['point_id']))}) trained on no signal: its loss was exactly 0 "
        "at every step, so its throughput and memory do not measure real training; check what it learns from "
        "(labels, `seq_len`, the loss) before comparing it."
        for _, row in rows.iterrows()
    ]


def skipped_steps_notes(df: pd.DataFrame, axes: Sequence[str] = ()) -> list[str]:
    """One sentence (Markdown) per ``ok`` point whose timed window had optimizer steps with a skipped update
    (``skipped_steps`` above 0: fp16 loss-scale overflow): they were left out of its step time. Empty when none had
    or the table has no ``skipped_steps`` column (records older than the count)."""
    if "skipped_steps" not in df.columns or not len(df):
        return []
    count = pd.to_numeric(df["skipped_steps"], errors="coerce").fillna(0)
    rows = df[(df["status"] == "ok") & (count > 0)]
    return [
        f"{config_name(row, axes)} (point {code(str(row['point_id']))}) skipped the optimizer update of "
        f"{int(count[i])} timed step(s) (fp16 loss scaling found overflowing gradients): they are left out of its "
        "step time, which rests on the steps that updated (`timed_steps_measured`)."
        for i, row in rows.iterrows()
    ]


def measurement_notes(df: pd.DataFrame, axes: Sequence[str] = ()) -> list[str]:
    """One sentence (Markdown) per ``ok`` point with a ``measurement_note``: a measurement sweeper's own code failed
    to take (a bug of sweeper's, not the configuration's); its other numbers stand. Empty when there is none."""
    if "measurement_note" not in df.columns or not len(df):
        return []
    rows = df[(df["status"] == "ok") & df["measurement_note"].map(lambda v: not missing(v) and bool(str(v)))]
    return [
        f"{config_name(row, axes)} (point {code(str(row['point_id']))}): {escape(str(row['measurement_note']))}; "
        "its other numbers stand."
        for _, row in rows.iterrows()
    ]


def contention_method_note(df: pd.DataFrame) -> str:
    """The "How each number was measured" item on CPU contention (Markdown): what ``runqueue_wait_frac`` is, its
    source, and the threshold(s) ``timing.contention_warn_frac`` the points were judged against."""
    col = "timing.contention_warn_frac"
    values = pd.to_numeric(df[col], errors="coerce").dropna() if col in df.columns else pd.Series(dtype=float)
    levels = sorted(set(values)) or [DEFAULT_CONTENTION_WARN_FRAC]
    threshold = " or ".join(percent(v, None) for v in levels)
    return (
        "CPU contention: `runqueue_wait_frac` = seconds a rank's training thread waited on a CPU run queue during "
        "the timed window (runnable, but another thread or process held the CPU; Linux schedstat) / the "
        "window's wall seconds, max over ranks; `steal_frac` = CPU seconds the hypervisor took from the host's "
        "virtual CPUs in that window (`/proc/stat` steal, which schedstat cannot see) / (wall seconds x CPUs); "
        f"with either above `timing.contention_warn_frac` ({threshold}) a point is `contended`, and its numbers "
        "are not comparable with other points' until it is rerun on a quiet machine."
    )


def _peak_source(source: str) -> tuple[str, str]:
    """(kind, detail) of an ``mfu_peak_source`` ("measured: fp32 matmul ..., 1 thread(s), ..." gives ("measured",
    "fp32 matmul ..., 1 thread, ...")); a source without a colon is its own kind with no detail."""
    kind, sep, detail = source.partition(":")
    if not sep:
        return source.strip(), ""
    detail = re.sub(r"\b1 thread\(s\)", "1 thread", detail.strip())
    return kind.strip(), re.sub(r"thread\(s\)", "threads", detail)


def _tflops_span(flops: Sequence[float]) -> str:
    lo, hi = min(flops), max(flops)
    if hi <= 1.01 * lo:
        return f"{num(hi, 1e12, 4)} TFLOP/s"
    return f"between {num(lo, 1e12, 3)} and {num(hi, 1e12, 3)} TFLOP/s"


def mfu_peak_note(ok: pd.DataFrame) -> str:
    """One sentence (Markdown) on the peak FLOP/s that MFU divides by: each kind of source (measured, datasheet,
    ...) once, with the range of its peaks (TFLOP/s), and where each point's own peak is."""
    groups: dict[str, dict[str, list[float]]] = {}  # kind -> detail -> peaks
    for flops, source in zip(ok["mfu_peak_flop_per_s"], ok["mfu_peak_source"], strict=True):
        if not missing(flops):
            kind, detail = _peak_source(text(source))
            groups.setdefault(kind, {}).setdefault(detail, []).append(float(flops))
    if not groups:
        return "MFU peak: none recorded, so no MFU."
    n_points = {kind: sum(map(len, by.values())) for kind, by in groups.items()}
    parts = []
    for kind, by_detail in groups.items():
        count = f" for {n_points[kind]:,} point(s)" if len(groups) > 1 else ""
        if kind == "datasheet":
            each = [f"{escape(d or kind)}, {_tflops_span(ps)}" for d, ps in sorted(by_detail.items())]
            parts.append(f"datasheet{count}: {capped(each, 4)}")
            continue
        details = [escape(d) for d in sorted(d for d in by_detail if d)]
        what = "measured on this host" if kind == "measured" else escape(kind)  # this sweep, or a cache of the host
        peaks = [p for ps in by_detail.values() for p in ps]
        parts.append(f"{what}{count}" + (f" ({capped(details, 3)})" if details else "") + f", {_tflops_span(peaks)}")
    return (
        "MFU peak: "
        + "; ".join(parts)
        + "; each point's peak is in the `mfu_peak_flop_per_s` / `mfu_peak_source` columns of results.csv."
    )
