"""Collect a sweep's result records into one table and write the report.

``python -m sweeper.report <sweep_dir>`` (re)builds, inside the sweep directory:

- ``results.csv`` and ``results.parquet``: one row per point, flat columns with units in their names;
- ``report.md``: pasteable Markdown (environment, grid, results with the Pareto frontier marked, failures, replay
  commands, how each number was measured);
- ``report.html``: a self-contained page with an interactive throughput vs peak-memory plot and the same tables;
- ``frontier.png``: the same plot as a static image.

Memory in report.md, report.html and the plots is shown in one unit per report: GiB (2**30 bytes) when the largest
recorded peak memory is at least 1 GiB, else MiB (2**20 bytes); booleans are spelled ``true``/``false`` as on the
command line.

In report.md and report.html each table (and the replay commands) shows at most ``max_rows`` rows (200 by default,
every frontier point always), with a note saying how many were left out; the CSV and Parquet files hold every point.

Every file is written atomically (temp file in the same folder, then ``os.replace``). This module imports neither
torch nor transformers; matplotlib and plotly are imported only inside the functions that draw.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sweeper.report.frontier import mark_frontier
from sweeper.results.record import POINTS_DIR, RESULT_FILE, Record, iter_records

GIB = 2**30
MIB = 2**20
FRONTIER_MARK = "★"
FRONTIER_DEFINITION = (
    "no other ok point is at least as fast (tokens/s per device) with no more peak memory, "
    "and strictly better in one of the two"
)

# fmt: off
#: The first columns of the results table, in this order (more follow, see :func:`records_to_frame`).
LEADING_COLUMNS: tuple[str, ...] = (
    "status", "model", "fsdp", "gc", "precision", "zero", "per_device_batch_size", "seq_len", "grad_accum",
    "world_size", "step_time_s_median", "step_time_s_p10", "step_time_s_p90", "tokens_per_s",
    "tokens_per_s_per_device", "samples_per_s", "tflops_per_device", "mfu", "peak_mem_bytes", "peak_mem_gib",
    "peak_mem_kind", "peak_reserved_bytes", "rss_peak_bytes", "param_bytes_per_rank", "grad_bytes_per_rank",
    "optimizer_state_bytes_per_rank", "on_frontier", "reason", "error_kind", "point_id", "replay",
)
_SPEC_KEYS = LEADING_COLUMNS[1:9]
_METRIC_KEYS = tuple(c for c in LEADING_COLUMNS[10:26] if c != "peak_mem_gib")
_SETUP_EXTRA = ("checkpointing_impl", "compute_dtype", "wrapper", "deepspeed_stage", "fsdp_version", "device_type",
                "device_name")
_METRIC_EXTRA = ("timed_steps", "warmup_steps_dropped", "flops_per_token", "mfu_peak_flops", "mfu_peak_source",
                 "mfu_note")
_OOM_KEYS = ("requested_bytes", "capacity_bytes", "free_bytes", "in_use_bytes", "allocated_bytes",
             "reserved_unallocated_bytes", "device_index", "fragmentation_hint")
_FAILURE_KEYS = ("phase", "rank", "step", "exception_type")
_INT_COLUMNS = ("zero", "per_device_batch_size", "seq_len", "grad_accum", "world_size", "timed_steps",
                "warmup_steps_dropped", "deepspeed_stage", "fsdp_version", "oom_device_index", "failure_rank",
                "failure_step", "ranks_per_node", "nodes")  # and every column with "_bytes" in its name
_FLOAT_COLUMNS = ("step_time_s_median", "step_time_s_p10", "step_time_s_p90", "tokens_per_s",
                  "tokens_per_s_per_device", "samples_per_s", "tflops_per_device", "mfu", "peak_mem_gib",
                  "flops_per_token", "mfu_peak_flops", "wall_time_s")  # and every other predicted_* column
_BOOL_COLUMNS = ("gc", "use_reentrant", "oom_fragmentation_hint")
# fmt: on

_TRACKER_NOTE = "peak tensor bytes counted by torch's `MemTracker` (the CPU analogue of the allocator peak)"
#: What each peak-memory counter means (matched by substring of ``peak_mem_kind``, first match wins).
_MEM_KIND_NOTES = (
    ("reserved", "bytes reserved by the device caching allocator (`torch.cuda.max_memory_reserved`)"),
    ("allocated", "peak bytes of live tensors in the device allocator (`torch.cuda.max_memory_allocated`)"),
    ("tracker", _TRACKER_NOTE),
    ("tensor", _TRACKER_NOTE),
    ("rss", "peak resident set size of the process (`ru_maxrss`); coarse, about 45-50 MiB fixed overhead"),
)


# ----------------------------------------------------------------------------------------------------------------
# Collecting
# ----------------------------------------------------------------------------------------------------------------


def _missing(v: Any) -> bool:
    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and math.isnan(v)


_NESTED = (list, dict, tuple)


def _plain(v: Any) -> Any:
    """A scalar for a table cell: nested lists/dicts become compact JSON."""
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, _NESTED) else v


_METRICS_BEFORE_GIB = LEADING_COLUMNS[10 : LEADING_COLUMNS.index("peak_mem_gib")]
_METRICS_AFTER_GIB = LEADING_COLUMNS[LEADING_COLUMNS.index("peak_mem_gib") + 1 : 26]
#: The keys of every row, in order, as :func:`_row` fills them (``predicted_*`` keys follow).
_ROW_KEYS: tuple[str, ...] = (
    *LEADING_COLUMNS,
    "use_reentrant",
    *_SETUP_EXTRA,
    *_METRIC_EXTRA,
    *(f"oom_{k}" for k in _OOM_KEYS),
    *(f"failure_{k}" for k in _FAILURE_KEYS),
    "ranks_per_node",
    "nodes",
    "wall_time_s",
    "overrides",
    "sweep_id",
)


def _row(r: Record) -> dict[str, Any]:
    spec, setup, met, fail = r.spec or {}, r.setup or {}, r.metrics or {}, r.failure or {}
    sget, mget = spec.get, met.get
    ws = setup.get("world_size")
    if ws is None and sget("ranks_per_node") is not None and sget("nodes") is not None:
        ws = spec["ranks_per_node"] * spec["nodes"]
    peak = mget("peak_mem_bytes")
    gib = peak / GIB if isinstance(peak, (int, float)) and not _missing(peak) else None
    values = [
        r.status,
        *map(sget, _SPEC_KEYS),
        ws,
        *map(mget, _METRICS_BEFORE_GIB),
        gib,
        *map(mget, _METRICS_AFTER_GIB),
        False,  # on_frontier, filled in by records_to_frame
        r.reason,
        r.error_kind,
        r.point_id,
        r.replay,
        setup.get("use_reentrant", sget("use_reentrant")),
        *map(setup.get, _SETUP_EXTRA),
        *map(mget, _METRIC_EXTRA),
        *map(fail.get, _OOM_KEYS),
        *map(fail.get, _FAILURE_KEYS),
        sget("ranks_per_node"),
        sget("nodes"),
        r.wall_time_s,
        " ".join(r.overrides or []),
        r.sweep_id,
    ]
    row = dict(zip(_ROW_KEYS, values, strict=True))
    for k, v in (r.predicted or {}).items():
        row[k if k.startswith("predicted_") else f"predicted_{k}"] = v
    if any(issubclass(t, _NESTED) for t in set(map(type, row.values()))):  # rare: look at each value
        for k, v in row.items():
            if isinstance(v, _NESTED):
                row[k] = _plain(v)
    return row


def _coerce(df: pd.DataFrame, col: str, dtype: str) -> None:
    try:
        df[col] = df[col].astype(dtype)
    except (TypeError, ValueError):
        pass  # unexpected values: keep them as they are rather than lose them


def records_to_frame(records: Sequence[Record]) -> pd.DataFrame:
    """One row per point, flat columns with units in their names.

    Columns start with :data:`LEADING_COLUMNS` (config axes from ``spec``; ``world_size`` from ``setup``, else
    ``ranks_per_node * nodes``; step times in s, throughput in tokens/s and samples/s, ``tflops_per_device`` in
    TFLOP/s, ``mfu`` as a fraction of peak, memory in bytes and ``peak_mem_gib`` = ``peak_mem_bytes / 2**30``),
    followed by ``use_reentrant``, the effective setup (``checkpointing_impl``, ``compute_dtype``, ``wrapper``,
    ``deepspeed_stage``, ...), step counts and the MFU peak (FLOP/s) with its source, the parsed OOM numbers
    (``oom_requested_bytes``, ``oom_capacity_bytes``, ``oom_free_bytes``, ...), ``failure_phase/rank/step``,
    ``ranks_per_node``, ``nodes``, ``wall_time_s``, ``overrides``, ``sweep_id`` and every ``predicted_*`` number.

    ``on_frontier`` is the Pareto frontier of ``tokens_per_s_per_device`` (higher is better) against
    ``peak_mem_bytes`` (lower is better) over the ``ok`` rows; False for every other row.
    """
    rows = [_row(r) for r in records]
    fixed = list(_ROW_KEYS)
    extra = [k for row in rows if len(row) > len(fixed) for k in row]  # only rows with predicted_* keys
    df = pd.DataFrame(rows, columns=list(dict.fromkeys(fixed + extra)))
    for cols, dtype in ((_INT_COLUMNS, "Int64"), (_FLOAT_COLUMNS, "float64"), (_BOOL_COLUMNS, "boolean")):
        for c in cols:
            _coerce(df, c, dtype)
    for c in [c for c in df.columns if "_bytes" in c or c.startswith("predicted_")]:
        _coerce(df, c, "Int64" if "_bytes" in c else "float64")
    for c in [c for c in df.columns if df[c].dtype == object]:  # Parquet needs one type per column
        types = set(map(type, df[c])) - {type(None), type(pd.NA)}
        if len(types) > 1:  # cheap check first; NaN (a float) may be the only other "type"
            types = {type(v) for v in df[c] if not _missing(v)}
        if len(types) > 1:
            df[c] = df[c].map(lambda v: None if _missing(v) else str(v))
    df["on_frontier"] = mark_frontier(df).astype(bool) if len(df) else pd.Series(dtype=bool)
    return df


def collect_records(sweep_dir: Path) -> list[Record]:
    """All records of a sweep (via :func:`~sweeper.results.record.iter_records`), plus a ``pending`` record for every
    point folder that has no ``result.json`` yet. Sorted by point id."""
    sweep_dir = Path(sweep_dir)
    records = iter_records(sweep_dir)
    sweep_id = sweep_info(sweep_dir).get("sweep_id") or (records[0].sweep_id if records else sweep_dir.name)
    root = sweep_dir / POINTS_DIR
    folders = sorted(_pending_folders(root))
    submitted = _submitted(sweep_dir) if folders else {}
    for name in folders:
        entry = submitted.get(name, {})
        spec = entry.get("spec") or _read_json(root / name / "spec.json")
        reason = f"no result yet (SLURM job {entry['job_id']})" if entry else "no result yet"
        records.append(
            Record(
                sweep_id=sweep_id,
                point_id=name,
                status="pending",
                reason=reason,
                spec=spec,
                overrides=entry.get("overrides", []),
                replay=entry.get("replay", ""),
            )
        )
    return sorted(records, key=lambda r: r.point_id)


def _pending_folders(root: Path) -> list[str]:
    """Names of the point folders under ``root`` that hold no ``result.json`` (yet); [] if ``root`` is missing."""
    try:
        with os.scandir(root) as it:
            dirs = [e.name for e in it if not e.name.startswith(".") and e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [n for n in dirs if not os.path.exists(os.path.join(root, n, RESULT_FILE))]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _submitted(sweep_dir: Path) -> dict[str, Any]:
    """``submitted.json`` (points submitted to SLURM, see :mod:`sweeper.launchers.slurm.accounting`), or ``{}``."""
    return _read_json(Path(sweep_dir) / "submitted.json")


def sweep_info(sweep_dir: Path) -> dict[str, Any]:
    """The contents of ``<sweep_dir>/sweep.json`` (sweep id, start time, command line), or ``{}``."""
    try:
        data = json.loads((Path(sweep_dir) / "sweep.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ----------------------------------------------------------------------------------------------------------------
# Formatting helpers
# ----------------------------------------------------------------------------------------------------------------


def _num(v: Any, scale: float = 1.0, digits: int = 4, zeros: bool = False) -> str:
    """``v / scale`` for people: thousands separators from 1,000 up, else ``digits`` significant digits (trailing
    zeros kept when ``zeros``, so 3 GiB reads "3.00"); "—" if missing."""
    if _missing(v):
        return "—"
    try:
        x = float(v) / scale
    except (TypeError, ValueError):
        return str(v)
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:{'#' if zeros else ''}.{digits}g}".rstrip(".")


def _text(v: Any) -> str:
    return "—" if _missing(v) else str(v)


def _cli(v: Any) -> str:
    """A setting's value as the command line spells it: ``true``/``false``, ``null``, nested values as JSON."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    return "null" if v is None else str(_plain(v))


def _cli_overrides(overrides: Any) -> list[str]:
    """Override strings (``gc=True``, as Hydra spells swept booleans) with booleans spelled ``true``/``false``."""
    out = []
    for tok in str(overrides or "").split():
        key, sep, val = tok.partition("=")
        out.append(f"{key}={val.lower()}" if sep and val in ("True", "False") else tok)
    return out


def _mem_unit(df: pd.DataFrame) -> tuple[str, int]:
    """The report's memory display unit: ("GiB", 2**30) when the largest recorded peak memory (``peak_mem_bytes``,
    any point) is at least 1 GiB or none is recorded, else ("MiB", 2**20)."""
    peaks = pd.to_numeric(df["peak_mem_bytes"], errors="coerce") if len(df) else pd.Series(dtype=float)
    return ("MiB", MIB) if peaks.notna().any() and peaks.max() < GIB else ("GiB", GIB)


def _md_table(df: pd.DataFrame) -> str:
    """A Markdown (pipe) table of a frame of display strings, via ``DataFrame.to_markdown`` (tabulate); columns
    whose every cell is a number are right-aligned."""
    numeric = re.compile(r"^-?[\d,.]+(e[+-]?\d+)?%?$|^—$")
    right = [bool(len(df)) and all(numeric.match(str(v)) for v in df[c]) for c in df.columns]
    cells = df.map(lambda v: str(v).replace("|", "\\|").replace("\n", " "))
    cells.columns = [str(c).replace("|", "\\|") for c in df.columns]
    return cells.to_markdown(
        index=False, tablefmt="pipe", disable_numparse=True, colalign=["right" if r else "left" for r in right]
    )


def _grid(records: Sequence[Record]) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """(axes that vary across points with their sorted values, settings that are the same for every point)."""
    specs = [r.spec for r in records if r.spec]
    keys = list(dict.fromkeys(k for s in specs for k in s))
    varying: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    for k in keys:
        column = [s.get(k) for s in specs]
        vals = _distinct_plain(column)
        if vals is None:  # values other than str/int/float/bool/None: tell them apart by their JSON
            vals = {json.dumps(v, sort_keys=True, default=str): v for v in column}
        if len(vals) > 1:
            varying[k] = sorted(vals.values(), key=lambda v: (v is None, _sort_key(v)))
        else:
            fixed[k] = next(iter(vals.values()))
    return varying, fixed


_PLAIN_TYPES = frozenset({str, int, bool, type(None)})


def _distinct_plain(values: Sequence[Any]) -> dict[tuple[type, Any], Any] | None:
    """The distinct values, in order of first appearance, when every value is a str, int, float, bool or None;
    else None. Two values count as the same exactly when their JSON is the same (so ``1``, ``1.0`` and ``True``
    differ, and every NaN is the same), without encoding each value."""
    out: dict[tuple[type, Any], Any] = {}
    for v in values:
        t = type(v)
        if t in _PLAIN_TYPES:
            out[t, v] = v
        elif t is float:
            out[t, repr(v)] = v
        else:
            return None
    return out


def _sort_key(v: Any) -> tuple[int, float, str]:
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, str(v))


def _labels(df: pd.DataFrame, axes: Sequence[str]) -> list[str]:
    """A short name for each point: its values on the varying axes, else its overrides, else its id."""
    axes = [a for a in axes if a in df.columns]
    out = []
    columns = [df["overrides"].tolist(), df["point_id"].tolist(), *(df[a].tolist() for a in axes)]
    for over, pid, *vals in zip(*columns, strict=True):
        parts = [f"{a}={_cli(v)}" for a, v in zip(axes, vals, strict=True) if not _missing(v)]
        out.append(" ".join(parts) or " ".join(_cli_overrides(over)) or str(pid))
    return out


def _axis_columns(df: pd.DataFrame, axes: Sequence[str]) -> dict[str, list[str]]:
    return {a: ["—" if _missing(v) else _cli(v) for v in df[a]] for a in axes if a in df.columns}


def _spec_axes(df: pd.DataFrame, varying: dict[str, list[Any]]) -> list[str]:
    """Varying axes that can be shown from the table's columns (spec keys without a column are skipped)."""
    return [a for a in varying if a in df.columns]


def results_table(df: pd.DataFrame, axes: Sequence[str] = (), mem_unit: tuple[str, int] | None = None) -> pd.DataFrame:
    """The ``ok`` points as display strings, sorted by tokens/s per device (descending), frontier marked ★.

    Headers carry units: tokens/s, seconds, MFU in percent of peak, peak memory in ``mem_unit`` (a (name, bytes)
    pair, see :func:`_mem_unit`; by default chosen from ``df``), optimizer state in MiB. An ``MFU peak (TFLOP/s)``
    column follows MFU when the peaks of the points shown differ by more than 1 %.
    """
    unit, scale = mem_unit or _mem_unit(df)
    ok = df[df["status"] == "ok"].sort_values("tokens_per_s_per_device", ascending=False, na_position="last")
    out: dict[str, list[str]] = {
        "frontier": [FRONTIER_MARK if f else "" for f in ok["on_frontier"]],
        "point": ok["point_id"].astype(str).tolist(),
        **_axis_columns(ok, axes),
        "tokens/s/device": [_num(v) for v in ok["tokens_per_s_per_device"]],
        "tokens/s (all devices)": [_num(v) for v in ok["tokens_per_s"]],
        "step time median (s)": [_num(v) for v in ok["step_time_s_median"]],
        "step time p10-p90 (s)": [
            f"{_num(a)}-{_num(b)}" for a, b in zip(ok["step_time_s_p10"], ok["step_time_s_p90"], strict=True)
        ],
        "TFLOP/s/device": [_num(v, digits=3) for v in ok["tflops_per_device"]],
        "MFU (%)": [_num(v, 0.01, 3, zeros=True) for v in ok["mfu"]],
    }
    peaks = pd.to_numeric(ok["mfu_peak_flops"], errors="coerce").dropna()
    if len(peaks) and peaks.max() > 1.01 * peaks.min():
        out["MFU peak (TFLOP/s)"] = [_num(v, 1e12, 3) for v in ok["mfu_peak_flops"]]
    out |= {
        f"peak mem ({unit})": [_num(v, scale, 3, zeros=True) for v in ok["peak_mem_bytes"]],
        "peak mem kind": [_text(v) for v in ok["peak_mem_kind"]],
        "opt state/rank (MiB)": [_num(v, MIB, 4, zeros=True) for v in ok["optimizer_state_bytes_per_rank"]],
    }
    if "predicted_peak_mem_bytes" in ok.columns:
        out[f"predicted peak mem ({unit})"] = [_num(v, scale, 3, zeros=True) for v in ok["predicted_peak_mem_bytes"]]
    return pd.DataFrame(out, dtype=object)


def failures_table(df: pd.DataFrame, axes: Sequence[str] = ()) -> pd.DataFrame:
    """The non-``ok`` points as display strings: status, error kind, reason, and for OOMs the parsed numbers
    (requested/free in MiB, in use/capacity in GiB). Columns that are empty for every row are left out."""
    bad = df[df["status"] != "ok"].sort_values(["status", "point_id"])
    out: dict[str, list[str]] = {
        "status": bad["status"].astype(str).tolist(),
        "point": bad["point_id"].astype(str).tolist(),
        **_axis_columns(bad, axes),
        "error kind": [_text(v) for v in bad["error_kind"]],
        "reason": [_text(v) for v in bad["reason"]],
        "OOM requested (MiB)": [_num(v, MIB) for v in bad["oom_requested_bytes"]],
        "OOM free (MiB)": [_num(v, MIB) for v in bad["oom_free_bytes"]],
        "OOM in use (GiB)": [_num(v, GIB) for v in bad["oom_in_use_bytes"]],
        "device capacity (GiB)": [_num(v, GIB) for v in bad["oom_capacity_bytes"]],
        "phase": [_text(v) for v in bad["failure_phase"]],
        "rank": [_text(v) for v in bad["failure_rank"]],
        "step": [_text(v) for v in bad["failure_step"]],
    }
    keep = {"status", "point", "reason"}
    return pd.DataFrame({k: v for k, v in out.items() if k in keep or any(x != "—" for x in v)}, dtype=object)


def _mem_kind_note(kind: str) -> str:
    low = kind.lower()
    note = next((n for key, n in _MEM_KIND_NOTES if key in low), "as reported by the harness (see the record)")
    return f"{note}, max over ranks"


def _values(s: pd.Series) -> str:
    vals = sorted({str(v) for v in s if not _missing(v)}, key=lambda x: (len(x), x))
    return ", ".join(vals) if vals else "—"


# ----------------------------------------------------------------------------------------------------------------
# Report document (rendered to Markdown and HTML from one list of sections)
# ----------------------------------------------------------------------------------------------------------------

#: ("p", str) | ("ul", list[str]) | ("table", DataFrame) | ("pre", str) | ("plot", None)
Block = tuple[str, Any]


@dataclass
class _Doc:
    title: str
    sections: list[tuple[str, list[Block]]]


def _document(
    sweep_dir: Path,
    records: Sequence[Record],
    df: pd.DataFrame,
    max_rows: int | None = None,
    grid: tuple[dict[str, list[Any]], dict[str, Any]] | None = None,
) -> _Doc:
    """The report's sections. Tables (and the replay commands) show at most ``max_rows`` rows each (None: all),
    see :func:`_shown_ok`, :func:`_shown_failures` and :func:`_shown_replays`; ``grid`` is :func:`_grid`'s answer
    when the caller already has it."""
    info = sweep_info(sweep_dir)
    sweep_id = info.get("sweep_id") or (records[0].sweep_id if records else "") or Path(sweep_dir).name
    counts = df["status"].value_counts()
    n_front = int(df["on_frontier"].sum())
    summary = (
        f"{len(df)} points: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f"; {n_front} on the frontier."
        if len(df)
        else "No points: this sweep directory holds no results yet."
    )
    head: list[Block] = [("p", summary)]
    if info:
        head.append(("ul", [f"**{k}**: `{_plain(v)}`" for k, v in info.items()]))
    sections: list[tuple[str, list[Block]]] = [("", head)]

    env_rec = next((r for r in records if r.env), None)
    env: list[Block] = [("p", "No environment recorded.")]
    if env_rec:
        env = [
            ("p", f"From point `{env_rec.point_id}`."),
            ("ul", [f"**{k}**: {_plain(v)}" for k, v in env_rec.env.items()]),
        ]
    sections.append(("Environment", env))

    varying, fixed = grid if grid is not None else _grid(records)
    axes = _spec_axes(df, varying)
    grid: list[Block] = []
    if varying:
        grid.append(("ul", [f"**{k}**: {_grid_values(vs)}" for k, vs in varying.items()]))
    if fixed:
        grid.append(("p", "Fixed: " + ", ".join(f"`{k}={_cli(v)}`" for k, v in fixed.items())))
    sections.append(("Grid", grid or [("p", "No point specs recorded.")]))

    results: list[Block] = [("plot", None)]
    shown_ok, n_ok = _shown_ok(df, max_rows)
    unit = _mem_unit(df)
    res = results_table(shown_ok, axes, unit)
    if len(res):
        results.append(("table", res))
        if len(res) < n_ok:
            results.append(
                (
                    "p",
                    f"Showing {len(res):,} of {n_ok:,} ok points: every frontier point, then the fastest by "
                    f"tokens/s per device. **{n_ok - len(res):,} rows left out**: {_ALL_ROWS}",
                )
            )
        results.append(("p", f"{FRONTIER_MARK} = on the Pareto frontier: {FRONTIER_DEFINITION}."))
        kinds = sorted({str(k) for k in df.loc[df["status"] == "ok", "peak_mem_kind"] if not _missing(k)})
        results.append(
            (
                "ul",
                [f"peak mem kind `{k}`: {_mem_kind_note(k)}" for k in kinds] or ["peak mem kind: not recorded"],
            )
        )
    else:
        results.append(("p", "No point finished with status ok, so there is no frontier."))
    sections.append(("Results", results))

    shown_bad, n_bad = _shown_failures(df, max_rows)
    fails = failures_table(shown_bad, axes)
    failures: list[Block] = [("table", fails)] if len(fails) else [("p", "None.")]
    if len(fails) < n_bad:
        failures.append(
            (
                "p",
                f"Showing {len(fails):,} of {n_bad:,} points that did not finish ok (every status, the first point "
                f"ids of each). **{n_bad - len(fails):,} rows left out**: {_ALL_ROWS}",
            )
        )
    sections.append(("Failures", failures))

    shown_records = _shown_replays(records, df, shown_ok, shown_bad, max_rows)
    replay = [
        f"# {r.point_id} ({r.status}) {' '.join(_cli_overrides(' '.join(r.overrides or [])))}".rstrip()
        + "\n"
        + (r.replay or "# no replay command recorded")
        for r in shown_records
    ]
    replays: list[Block] = [("pre", "\n\n".join(replay))] if replay else [("p", "No points.")]
    if len(shown_records) < len(records):
        replays.append(
            (
                "p",
                f"Showing the replay commands of {len(shown_records):,} of {len(records):,} points: every frontier "
                f"point, then the failures and the ok points shown above. **{len(records) - len(shown_records):,} "
                f"commands left out**: the `replay` column of `results.csv` / `results.parquet` holds every point's.",
            )
        )
    sections.append(("Replay", replays))
    sections.append(("How each number was measured", [("ul", _method_notes(df, unit[0]))]))
    return _Doc(title=f"Sweep {sweep_id}", sections=sections)


#: The most values the grid section lists for one varying key.
GRID_MAX_VALUES = 20


def _grid_values(values: Sequence[Any]) -> str:
    """A varying key's (sorted) values, the first :data:`GRID_MAX_VALUES` of them, then how many more."""
    shown = ", ".join(f"`{_cli(v)}`" for v in values[:GRID_MAX_VALUES])
    more = len(values) - GRID_MAX_VALUES
    return shown + (f", … and {more:,} more (up to `{_cli(values[-1])}`)" if more > 0 else "")


_ALL_ROWS = "`results.csv` / `results.parquet` (next to this file) hold all of them."


def _shown_ok(df: pd.DataFrame, max_rows: int | None) -> tuple[pd.DataFrame, int]:
    """(the rows of ``df`` whose ``ok`` points the results table shows, how many ``ok`` points there are).

    At most ``max_rows`` ``ok`` points: every frontier point (even when there are more than ``max_rows``), then the
    fastest of the others by tokens/s per device. With ``max_rows`` None or no more ``ok`` points than that, ``df``
    itself."""
    is_ok = df["status"] == "ok"
    n_ok = int(is_ok.sum())
    if max_rows is None or n_ok <= max_rows:
        return df, n_ok
    ranked = df[is_ok].sort_values("tokens_per_s_per_device", ascending=False, na_position="last", kind="stable")
    front = ranked["on_frontier"].astype(bool)
    room = max(max_rows - int(front.sum()), 0)
    keep = front | (~front & ((~front).cumsum() <= room))
    return ranked[keep], n_ok


def _shown_failures(df: pd.DataFrame, max_rows: int | None) -> tuple[pd.DataFrame, int]:
    """(the non-``ok`` rows the failures table shows, how many there are): at most ``max_rows``, taken in turn from
    each status (lowest point ids first) so that every status shows. With ``max_rows`` None or no more rows than
    that, ``df`` itself."""
    is_bad = df["status"] != "ok"
    n_bad = int(is_bad.sum())
    if max_rows is None or n_bad <= max_rows:
        return df, n_bad
    bad = df[is_bad].sort_values(["status", "point_id"], kind="stable")
    turn = bad.groupby("status", sort=False).cumcount()
    order = pd.DataFrame({"turn": turn, "status": bad["status"]}).sort_values(["turn", "status"], kind="stable")
    return bad.loc[order.index[:max_rows]], n_bad


def _shown_replays(
    records: Sequence[Record],
    df: pd.DataFrame,
    shown_ok: pd.DataFrame,
    shown_bad: pd.DataFrame,
    max_rows: int | None,
) -> Sequence[Record]:
    """The records whose replay commands the report shows, in point-id order: every one when ``max_rows`` is None
    or there are no more than that, else at most ``max_rows`` (more only when there are more frontier points):
    every frontier point, then the failures shown, then the other ``ok`` points shown (fastest first)."""
    if max_rows is None or len(records) <= max_rows:
        return records
    front = df.loc[df["on_frontier"].astype(bool), "point_id"].tolist()
    bad = shown_bad.loc[shown_bad["status"] != "ok", "point_id"].tolist()
    ok = shown_ok[shown_ok["status"] == "ok"]
    ok = ok.sort_values("tokens_per_s_per_device", ascending=False, na_position="last", kind="stable")
    wanted = list(dict.fromkeys([*front, *bad, *ok["point_id"].tolist()]))
    keep = set(wanted[: max(max_rows, len(front))])
    return [r for r in records if r.point_id in keep]


def _method_notes(df: pd.DataFrame, mem_unit: str = "GiB") -> list[str]:
    ok = df[df["status"] == "ok"]
    notes = sorted({str(n) for n in ok["mfu_note"] if not _missing(n)})
    kinds = sorted({str(k) for k in ok["peak_mem_kind"] if not _missing(k)})
    no_mfu = int(ok["mfu"].isna().sum())
    shown_in = (
        f" Shown in {mem_unit}: the largest peak is {'at least' if mem_unit == 'GiB' else 'under'} 1 GiB."
        if len(ok)
        else ""
    )
    return [
        "Step time: median (and p10/p90) of the timed steps"
        + (f" ({_values(ok['timed_steps'])} per point)" if ok["timed_steps"].notna().any() else "")
        + " after dropping "
        + (f"{_values(ok['warmup_steps_dropped'])} " if ok["warmup_steps_dropped"].notna().any() else "the ")
        + "warm-up steps; seconds.",
        (
            "tokens/s = per-device batch x sequence length x grad accumulation x world size / median step time; "
            "tokens/s/device = tokens/s / world size."
        ),
        "TFLOP/s/device = FLOPs per token x tokens/s/device / 1e12; MFU = TFLOP/s/device / the device's peak.",
        _mfu_peak_note(ok) + (f" No MFU for {no_mfu:,} ok point(s): {_capped(notes, 3)}." if no_mfu and notes else ""),
        "Peak memory: "
        + ("; ".join(f"`{k}`: {_mem_kind_note(k)}" for k in kinds) if kinds else "no counter recorded")
        + ". GiB = 2**30 bytes, MiB = 2**20 bytes."
        + shown_in,
        "opt state/rank: optimizer-state bytes held by one rank, in MiB.",
        "Failed points carry the reason the harness recorded; OOM numbers are parsed from the allocator's message.",
    ]


def _capped(items: Sequence[str], n: int) -> str:
    """``items`` joined by "; ", the first ``n`` of them, then how many more."""
    more = len(items) - n
    return "; ".join(items[:n]) + (f"; … and {more:,} more" if more > 0 else "")


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
        return f"{_num(hi, 1e12, 4)} TFLOP/s"
    return f"between {_num(lo, 1e12, 3)} and {_num(hi, 1e12, 3)} TFLOP/s"


def _mfu_peak_note(ok: pd.DataFrame) -> str:
    """One sentence on the peak FLOP/s that MFU divides by: each kind of source (measured, datasheet, ...) once,
    with the range of its peaks, and where each point's own peak is."""
    groups: dict[str, dict[str, list[float]]] = {}  # kind -> detail -> peaks
    for flops, source in zip(ok["mfu_peak_flops"], ok["mfu_peak_source"], strict=True):
        if not _missing(flops):
            kind, detail = _peak_source(_text(source))
            groups.setdefault(kind, {}).setdefault(detail, []).append(float(flops))
    if not groups:
        return "MFU peak: none recorded, so no MFU."
    n_points = {kind: sum(map(len, by.values())) for kind, by in groups.items()}
    parts = []
    for kind, by_detail in groups.items():
        count = f" for {n_points[kind]:,} point(s)" if len(groups) > 1 else ""
        if kind == "datasheet":
            each = [f"{d or kind}, {_tflops_span(ps)}" for d, ps in sorted(by_detail.items())]
            parts.append(f"datasheet{count}: {_capped(each, 4)}")
            continue
        details = sorted(d for d in by_detail if d)
        what = "measured per point on rank 0" if kind == "measured" else kind
        peaks = [p for ps in by_detail.values() for p in ps]
        parts.append(f"{what}{count}" + (f" ({_capped(details, 3)})" if details else "") + f", {_tflops_span(peaks)}")
    return (
        "MFU peak: "
        + "; ".join(parts)
        + "; each point's peak is in the `mfu_peak_flops` / `mfu_peak_source` columns of results.csv."
    )


def _render_md(doc: _Doc) -> str:
    out = [f"# {doc.title}"]
    for title, blocks in doc.sections:
        if title:
            out.append(f"## {title}")
        for kind, content in blocks:
            if kind == "p":
                out.append(content)
            elif kind == "ul":
                out.append("\n".join(f"- {x}" for x in content))
            elif kind == "table":
                out.append(_md_table(content))
            elif kind == "pre":
                out.append(f"```sh\n{content}\n```")
            elif kind == "plot":
                out.append("Plot: `frontier.png` (static) and `report.html` (interactive), next to this file.")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    s = html.escape(text)
    s = re.sub(r"`([^`]*)`", r"<code>\1</code>", s)
    return re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", s)


def _render_html(doc: _Doc, plot_div: str) -> str:
    out = [f"<h1>{html.escape(doc.title)}</h1>"]
    for title, blocks in doc.sections:
        if title:
            out.append(f"<h2>{html.escape(title)}</h2>")
        for kind, content in blocks:
            if kind == "p":
                out.append(f"<p>{_inline_html(content)}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in content) + "</ul>")
            elif kind == "table":
                out.append(content.to_html(index=False, border=0, classes="tbl"))
            elif kind == "pre":
                out.append(f"<pre>{html.escape(content)}</pre>")
            elif kind == "plot":
                out.append(plot_div)
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}"
        ".tbl{border-collapse:collapse;font-size:0.9em}.tbl td,.tbl th{padding:3px 8px;border-bottom:1px solid #ddd}"
        "pre{background:#f5f5f5;padding:1em;overflow-x:auto}code{background:#f5f5f5}"
    )
    return (
        f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>{html.escape(doc.title)}</title>\n'
        f"<style>{style}</style>\n</head>\n<body>\n" + "\n".join(out) + "\n</body>\n</html>\n"
    )


# ----------------------------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class _PlotData:
    """``ok``: ok points with both numbers (x in ``unit``, y in tokens/s/device, label, hover, on_frontier).
    ``failed``: every other point (x in ``unit``: the device capacity for OOMs that report it, else ``edge``).
    ``devices``: (label, capacity in ``unit``) of each device-memory line."""

    ok: pd.DataFrame
    failed: pd.DataFrame
    edge: float
    devices: list[tuple[str, float]]
    unit: str = "GiB"

    @property
    def xlabel(self) -> str:
        return f"peak memory per device ({self.unit})"


_HOVER_COLUMNS = (
    "point_id",
    "status",
    "overrides",
    "tokens_per_s_per_device",
    "peak_mem_bytes",
    "peak_mem_kind",
    "step_time_s_median",
    "reason",
    "oom_requested_bytes",
    "oom_free_bytes",
    "oom_capacity_bytes",
)


def _hovers(df: pd.DataFrame, mem_unit: tuple[str, int] = ("GiB", GIB)) -> list[str]:
    """The plot's hover text of each point (HTML: first line bold, then overrides, numbers or failure reason);
    peak memory in ``mem_unit`` (name, bytes)."""
    unit, scale = mem_unit
    out = []
    for pid, status, over, tps, peak, kind, step, reason, req, free, cap in zip(
        *(df[c].tolist() for c in _HOVER_COLUMNS), strict=True
    ):
        lines = [f"{pid} ({status})", *_cli_overrides(over)]
        if status == "ok":
            lines += [
                f"tokens/s/device: {_num(tps)}",
                f"peak mem: {_num(peak, scale, 3, zeros=True)} {unit} ({_text(kind)})",
                f"step time median: {_num(step)} s",
            ]
        else:
            lines += [f"reason: {_text(reason)}"]
            if not _missing(req):
                lines += [f"requested {_num(req, MIB)} MiB, free {_num(free, MIB)} MiB, capacity {_num(cap, GIB)} GiB"]
        out.append("<b>" + "<br>".join(html.escape(x) for x in lines).replace("<br>", "</b><br>", 1))
    return out


def _plot_data(
    df: pd.DataFrame,
    axes: Sequence[str],
    device_mem_gib: Sequence[tuple[str, float]],
    mem_unit: tuple[str, int] | None = None,
) -> _PlotData:
    unit, scale = mem_unit or _mem_unit(df)
    y = pd.to_numeric(df["tokens_per_s_per_device"], errors="coerce")
    x = pd.to_numeric(df["peak_mem_bytes"], errors="coerce").astype(float) / scale
    measured = (df["status"] == "ok") & x.notna() & y.notna()
    cap = pd.to_numeric(df["oom_capacity_bytes"], errors="coerce").astype(float) / scale
    devices = [(name, gib * GIB / scale) for name, gib in device_mem_gib]
    known = [*x[measured], *cap[~measured].dropna(), *(d for _, d in devices)]
    edge = max(known) * 1.1 if known else 1.0
    base = pd.DataFrame(
        {
            "label": _labels(df, axes),
            "hover": _hovers(df, (unit, scale)),
            "status": [
                s if m else ("ok (no numbers)" if s == "ok" else s) for s, m in zip(df["status"], measured, strict=True)
            ],
        },
        index=df.index,
    )
    ok = base[measured].assign(x=x[measured], y=y[measured], on_frontier=df.loc[measured, "on_frontier"])
    failed = base[~measured].assign(x=cap[~measured].fillna(edge))
    return _PlotData(ok=ok.sort_values("x"), failed=failed, edge=edge, devices=devices, unit=unit)


_FAILED_TITLE = "not measured: OOM at device capacity; others at the right edge"
_YLABEL = "throughput (tokens/s per device)"


def _plot_html(data: _PlotData) -> str:
    """The interactive plot as an HTML ``<div>`` with plotly.js inlined (no CDN). The strip of points that were
    not measured is drawn only when there are such points."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    strip = bool(len(data.failed))
    fig = make_subplots(
        rows=2 if strip else 1,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.78, 0.22] if strip else None,
        vertical_spacing=0.06,
        subplot_titles=("ok points (★ = Pareto frontier)", _FAILED_TITLE)
        if strip
        else ("ok points (★ = Pareto frontier)",),
    )
    ok, front = data.ok, data.ok[data.ok["on_frontier"]]
    if len(ok):
        fig.add_trace(
            go.Scatter(
                x=ok["x"],
                y=ok["y"],
                mode="markers",
                name="ok",
                text=ok["hover"],
                hoverinfo="text",
                marker={"size": 9, "color": "#1f77b4"},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=front["x"],
                y=front["y"],
                mode="lines+markers",
                line_shape="hv",
                name="Pareto frontier",
                text=front["hover"],
                hoverinfo="text",
                marker={"size": 14, "symbol": "star", "color": "#d62728"},
            ),
            row=1,
            col=1,
        )
    for status, grp in data.failed.groupby("status", sort=True):
        fig.add_trace(
            go.Scatter(
                x=grp["x"],
                y=grp["status"],
                mode="markers",
                name=str(status),
                text=grp["hover"],
                hoverinfo="text",
                marker={"size": 11, "symbol": "x"},
            ),
            row=2,
            col=1,
        )
    for name, cap in data.devices:
        fig.add_vline(x=cap, line_dash="dash", line_color="gray", annotation_text=name, row="all", col=1)
    if not len(ok):
        fig.add_annotation(
            text="no ok points" if strip else "no points",
            showarrow=False,
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
            row=1,
            col=1,
        )
    fig.update_xaxes(title_text=data.xlabel, row=2 if strip else 1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text=_YLABEL, row=1, col=1, rangemode="tozero")
    fig.update_layout(height=650 if strip else 520, hovermode="closest", template="plotly_white")
    return fig.to_html(full_html=False, include_plotlyjs=True)


def _png_figure(data: _PlotData) -> Any:
    """The static plot as a matplotlib ``Figure`` (Agg, no global backend change): ok points with the frontier
    and, only when some point was not measured, a strip below with those points. Point labels point away from
    the nearer side edge so that they stay inside the axes."""
    from matplotlib.figure import Figure

    strip = bool(len(data.failed))
    fig = Figure(figsize=(9, 6.5) if strip else (9, 5.5), layout="constrained")
    if strip:
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[4, 1])
    else:
        top, bottom = fig.subplots(1, 1), None
    right = data.edge * 1.05
    ok, front = data.ok, data.ok[data.ok["on_frontier"]]
    top.scatter(ok["x"], ok["y"], color="#1f77b4", label="ok", zorder=3)
    if len(front):
        top.step(front["x"], front["y"], where="post", color="#d62728", lw=1.5, label="Pareto frontier")
        top.scatter(front["x"], front["y"], marker="*", s=180, color="#d62728", zorder=4)
    ymax = max(ok["y"].max() * 1.15, 1.0) if len(ok) else 1.0
    if len(ok) <= 20:
        for _, r in ok.iterrows():
            _label(top, r["label"], r["x"], r["y"], right, 7, below=r["y"] > 0.9 * ymax)
    if not len(ok):
        top.text(0.5, 0.5, "no ok points" if strip else "no points", ha="center", va="center", transform=top.transAxes)
    if bottom is not None:
        statuses = sorted(data.failed["status"].unique())
        for i, status in enumerate(statuses):
            grp = data.failed[data.failed["status"] == status]
            bottom.scatter(grp["x"], [i] * len(grp), marker="x", s=60, label=status)
            if len(data.failed) <= 12:
                for _, r in grp.iterrows():
                    _label(bottom, r["label"], r["x"], i, right, 6)
        bottom.set_yticks(range(len(statuses)), statuses)
        bottom.set_ylim(-0.7, max(len(statuses), 1) - 0.3)
        bottom.set_title(_FAILED_TITLE, fontsize=8)
    for name, cap in data.devices:
        for ax in (top, bottom):
            if ax is not None:
                ax.axvline(cap, ls="--", color="gray", lw=1)
        top.text(cap, 0.98, f" {name}", transform=top.get_xaxis_transform(), fontsize=7, va="top", color="gray")
    top.set_ylabel(_YLABEL)
    (bottom if bottom is not None else top).set_xlabel(data.xlabel)
    top.set_xlim(left=0, right=right)
    top.set_ylim(0, ymax)
    top.set_title("Throughput vs peak memory")
    if len(ok):
        top.legend(loc="lower right", fontsize=8)
    return fig


def _label(ax: Any, text: str, x: float, y: float, right: float, size: int, below: bool = False) -> None:
    """Label a point, to its right in the left half of the x range, else to its left; above it unless ``below``."""
    left_side = x > right / 2
    ax.annotate(
        text,
        (x, y),
        fontsize=size,
        xytext=(-8 if left_side else 8, -7 if below else 5),
        textcoords="offset points",
        ha="right" if left_side else "left",
        va="top" if below else "bottom",
    )


def _plot_png(data: _PlotData, path: Path) -> None:
    """The plot as a static PNG (see :func:`_png_figure`)."""
    _png_figure(data).savefig(path, format="png", dpi=120)


# ----------------------------------------------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------------------------------------------


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temp file next to ``path``, then rename it onto ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_report(
    sweep_dir: Path,
    device_mem_gib: Sequence[tuple[str, float]] = (),
    *,
    max_rows: int | None = 200,
) -> Path:
    """Write ``results.csv``, ``results.parquet``, ``report.md``, ``report.html`` and ``frontier.png`` into
    ``sweep_dir``, each atomically, from the records on disk (point folders without ``result.json`` show as
    ``pending``).

    Args:
        sweep_dir: the sweep directory (holds ``points/``).
        device_mem_gib: optional device memory capacities drawn as vertical lines, as (label, GiB) pairs,
            e.g. ``[("H100 80 GiB", 80.0)]``.
        max_rows: the most rows each table of report.md/report.html shows (None: every row). The results table
            shows every frontier point and then the fastest other ``ok`` points; the failures table takes rows
            from every status in turn; the replay section shows as many commands (frontier points first, then
            the failures shown). A note under each cut table says how many rows were left out. ``results.csv``
            and ``results.parquet`` always hold every point.

    Returns:
        The path of ``report.md``.
    """
    sweep_dir = Path(sweep_dir)
    records = collect_records(sweep_dir)
    df = records_to_frame(records)
    grid = _grid(records)
    doc = _document(sweep_dir, records, df, max_rows, grid)
    data = _plot_data(df, _spec_axes(df, grid[0]), device_mem_gib, _mem_unit(df))

    _write_atomic(sweep_dir / "results.csv", lambda p: df.to_csv(p, index=False))
    _write_atomic(sweep_dir / "results.parquet", lambda p: df.to_parquet(p, index=False))
    _write_atomic(sweep_dir / "frontier.png", lambda p: _plot_png(data, p))
    page = _render_html(doc, _plot_html(data))
    _write_atomic(sweep_dir / "report.html", lambda p: p.write_text(page, encoding="utf-8"))
    md = sweep_dir / "report.md"
    _write_atomic(md, lambda p: p.write_text(_render_md(doc), encoding="utf-8"))
    return md


def _device_mem(text: str) -> tuple[str, float]:
    label, sep, gib = text.rpartition("=")
    try:
        return (label if sep else f"{gib} GiB"), float(gib)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LABEL=GIB (e.g. 'H100 80 GiB=80'), got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweeper.report <sweep_dir>``: rebuild the report; prints the path of report.md last.

    Returns 0 on success, 2 if the directory does not exist or has no ``points/`` folder, 1 if a record on disk
    cannot be read (the message names the file).
    """
    parser = argparse.ArgumentParser(prog="python -m sweeper.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep directory (the one that holds points/)")
    parser.add_argument(
        "--device-mem",
        type=_device_mem,
        action="append",
        default=[],
        metavar="LABEL=GIB",
        help="draw a device-memory line, e.g. 'H100 80 GiB=80' (repeatable)",
    )
    args = parser.parse_args(argv)
    sweep_dir: Path = args.sweep_dir
    if not sweep_dir.is_dir():
        print(f"sweeper.report: error: sweep directory {sweep_dir} does not exist", file=sys.stderr)
        return 2
    if not (sweep_dir / POINTS_DIR).is_dir():
        print(
            f"sweeper.report: error: {sweep_dir} has no {POINTS_DIR}/ folder; is it a sweep directory?",
            file=sys.stderr,
        )
        return 2
    try:
        if _submitted(sweep_dir):  # collect: learn from SLURM how ended jobs ended before reporting
            from sweeper.launchers.slurm.accounting import reconcile

            reconcile(sweep_dir, sweep_info(sweep_dir).get("sweep_id", sweep_dir.name))
        path = build_report(sweep_dir, args.device_mem)
    except ValueError as e:
        print(f"sweeper.report: error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
