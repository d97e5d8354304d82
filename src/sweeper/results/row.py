"""The per-point result row: ONE schema whose column names CSV, Parquet, the report, capacity planning and W&B share.

A row is flat: one column per swept key (every :class:`~sweeper.config.spec.PointSpec` field, named as on the command
line), the passthrough dicts flattened into dotted columns (``training_args.max_grad_norm``,
``fsdp_config.reshard_after_forward``, ``deepspeed_config.zero_optimization.stage``, ``model.config.hidden_size``),
what really ran (setup), the measurements, the failure details, the SLURM job and the bookkeeping. Every column
carries its unit in its name (``_bytes``, ``_s``, ``_gib``, ``tokens_per_s``) and in :data:`COLUMNS`.

:data:`~sweeper.results.columns.COLUMNS` is the explicit list (name, pandas dtype, unit, meaning, where the record
holds it). A *family*
column (dtype ``"family"``) stands for the dotted columns of one spec dict; they take its place, sorted by name, and
their dtype is inferred (ints and floats mixed: float64; any other mix: strings). A spec key the list does not name
(a newer spec) still becomes a column, after the spec block. The capacity-planning columns follow the bookkeeping
columns: the model's numbers for the point (``Record.predicted``, as ``predicted_<key>``, typed in :data:`COLUMNS`)
and the relative errors against the measurement (``ok`` rows only); any other ``predicted_*`` key of a record (the
memory terms, ``predicted_<term>_bytes``) comes after them, Int64 when its name ends in ``_bytes``, else inferred.

:data:`SCHEMA_VERSION` is written as the ``schema_version`` column of every row and, in Parquet, as the schema
metadata key ``sweeper.schema_version`` (each Parquet field also carries its unit and meaning as field metadata).

Nothing here imports torch; pandas and pyarrow only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sweeper.config.spec import dotted_leaves

if TYPE_CHECKING:
    import pyarrow as pa

    from sweeper.results.record import Record

from sweeper.results.columns import (
    BOOL,
    BY_NAME,
    COLUMNS,
    FAMILY,
    FAMILY_PREFIXES,
    FLOAT,
    INT,
    SCHEMA_VERSION,
    STR,
    Column,
)

_SPEC_KEYS = {c.source.split(".", 1)[1] for c in COLUMNS if isinstance(c.source, str) and c.source.startswith("spec.")}
_SPEC_KEYS.update(("per_device_batch_size", "timed_steps"))  # read by _batch, _timed_steps (spec keys, not extras)
_AFTER_SPEC = "model.config"  # unknown spec keys go after this family


def _step(c: Column) -> tuple[str, str, str | None, str, Callable[[Record], Any] | None]:
    """(name, dtype, record part, key, function): how :func:`_columns` reads a column (key ``""`` for a
    function's column; part None for a family, a function or a record attribute)."""
    if callable(c.source):
        return c.name, c.dtype, None, "", c.source
    part, sep, key = c.source.partition(".")
    if c.dtype == FAMILY:  # a spec dict expanded into dotted columns (part None: _columns' family branch)
        return c.name, c.dtype, None, key, None
    return (c.name, c.dtype, part, key, None) if sep else (c.name, c.dtype, None, part, None)


_PLAN = [_step(c) for c in COLUMNS]
_NESTED = (list, tuple, dict)
_SCALARS = {type(None), bool, int, float, str}


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def flatten(prefix: str, value: Any) -> dict[str, Any]:
    """A spec dict as dotted columns (:func:`sweeper.config.spec.dotted_leaves`):
    ``flatten("deepspeed_config", {"zero_optimization": {"stage": 3}})`` ->
    ``{"deepspeed_config.zero_optimization.stage": 3}``. Lists become compact JSON; an empty dict gives no column."""
    if not isinstance(value, Mapping):
        value = {"": value}
    out: dict[str, Any] = {}
    for path, leaf in dotted_leaves(dict(value), f"{prefix}.").items():
        if isinstance(leaf, Mapping):  # an empty dict: nothing set
            continue
        name = path.rstrip(".")
        out[name] = json.dumps(leaf, sort_keys=True, default=str) if isinstance(leaf, (list, tuple)) else leaf
    return out


def config_columns(names: Iterable[str]) -> list[str]:
    """The configuration columns among ``names`` (a frame's columns, in order): the swept keys, their dotted
    columns, unknown spec keys and the derived ``fp32_master_weights``; not ``world_size``. For the report's grid."""
    names = list(names)
    block = names[names.index("model") : names.index("step_time_s_median")]
    return [k for k in block if k != "world_size"]


def _cell(v: Any) -> Any:
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, _NESTED) else v


def _columns(records: Sequence[Record]) -> tuple[dict[str, list[Any]], dict[str, dict[int, Any]]]:
    """The values of ``records`` column by column: the fixed columns of :data:`COLUMNS` (one value per record, None
    when absent) and the columns only some records have (families' dotted columns, unknown spec keys, untyped
    ``predicted_*`` keys: ``{column: {record index: value}}``). Nested values become compact JSON."""
    parts = {p: [getattr(r, p) or {} for r in records] for p in ("spec", "ran", "metrics", "failure", "env")}
    specs = parts["spec"]
    fixed: dict[str, list[Any]] = {}
    sparse: dict[str, dict[int, Any]] = {}
    for name, dtype, part, key, func in _PLAN:
        if part is not None:  # the common case first: a value of a record part
            values = [d.get(key) for d in parts[part]]
        elif dtype == FAMILY:
            for i, spec in enumerate(specs):
                value = spec.get(key)
                if value:
                    for col, v in flatten(name, value).items():
                        sparse.setdefault(col, {})[i] = v
                if name == _AFTER_SPEC:
                    for k in [k for k in spec if k not in _SPEC_KEYS]:
                        for col, v in flatten(k, spec[k]).items():
                            sparse.setdefault(col, {})[i] = v
            continue
        else:
            if name == "schema_version":
                for i, r in enumerate(records):
                    for k, pv in (r.predicted or {}).items():
                        col = k if k.startswith("predicted_") else f"predicted_{k}"
                        if col not in BY_NAME:  # the typed ones are fixed columns
                            sparse.setdefault(col, {})[i] = _cell(pv)
            values = [func(r) for r in records] if func is not None else [getattr(r, key) for r in records]
        fixed[name] = values if set(map(type, values)) <= _SCALARS else [_cell(v) for v in values]
    return fixed, sparse


def row_from_record(record: Record) -> dict[str, Any]:
    """One point's row: ``{column: value}`` in :data:`COLUMNS` order with families expanded in place (sorted),
    unknown spec keys after the spec block, ``predicted_*`` before ``schema_version``: the row
    :func:`records_to_frame` makes of it. Values are plain Python (None when absent); nested values become compact
    JSON. ``on_frontier`` is False here: it is a property of the whole table (see :func:`records_to_frame`)."""
    fixed, sparse = _columns([record])
    return {name: fixed[name][0] if name in fixed else sparse[name][0] for name in _ordered_names([*fixed, *sparse])}


def _coerce(s: pd.Series, dtype: str) -> pd.Series:
    try:
        return s.astype(dtype)
    except (TypeError, ValueError):
        return s  # unexpected values: keep them as they are rather than lose them


def _infer(s: pd.Series) -> pd.Series:
    """A column the schema does not type (dotted, unknown spec keys): one type per column for Parquet."""
    types = set(map(type, s.dropna()))  # None, NaN and pd.NA are missing
    if not types:
        return s
    if types <= {bool}:
        return _coerce(s, BOOL)
    if types <= {int}:
        return _coerce(s, INT)
    if types <= {int, float}:
        return _coerce(s, FLOAT)
    if len(types) > 1 or types - {str}:
        return s.map(lambda v: None if _missing(v) else str(v)).astype(object)
    return s


def dtype_of(name: str) -> str | None:
    """The schema's pandas dtype of a column: :data:`COLUMNS`' own, Int64 for any other ``predicted_*_bytes``
    column (the memory terms); None for a dotted or unknown column (inferred from its values)."""
    c = BY_NAME.get(name)
    if c is not None and c.dtype != FAMILY:
        return c.dtype
    if name.startswith("predicted_") and name.endswith("_bytes"):
        return INT
    return None


def read_results_csv(path: str | Path) -> pd.DataFrame:
    """``results.csv`` read back with its text columns as text: pandas would otherwise parse a sweep id such as
    ``723e67`` or a point id of digits as a number (``7.23e+69``). Every ``str`` column of
    :data:`~sweeper.results.columns.COLUMNS` is read as ``str``; the other columns as pandas infers them
    (``results.parquet`` carries every dtype and is the typed copy)."""
    text = [c.name for c in COLUMNS if c.dtype == STR]
    return pd.read_csv(path, dtype=dict.fromkeys(text, str))


def records_to_frame(records: Sequence[Record]) -> pd.DataFrame:
    """The table of a sweep: one row per record (as :func:`row_from_record` makes it), columns typed by :data:`COLUMNS`.

    Columns a record lacks are missing (``<NA>``/NaN). ``on_frontier`` is the Pareto frontier of
    ``tokens_per_s_per_device`` (higher is better) against ``peak_mem_bytes`` (lower is better) over the ``ok``
    rows (:func:`sweeper.results.frontier.mark_frontier`: throughput intervals from the step-time spread, overlaps
    are ties); False for every other row. ``frontier_tie_with`` lists, for each frontier row, the ok points tied
    with it on throughput (:func:`sweeper.results.frontier.frontier_ties`). An empty sweep gives an empty
    frame that still has every fixed column.
    """
    from sweeper.results.frontier import frontier_ties, mark_frontier

    fixed, sparse = _columns(records)
    names = _ordered_names([*fixed, *sparse])
    n = len(records)
    data = {k: fixed[k] if k in fixed else [sparse[k].get(i, math.nan) for i in range(n)] for k in names}
    df = pd.DataFrame(data, columns=names)
    for name in names:
        dtype = dtype_of(name)
        df[name] = _coerce(df[name], dtype) if dtype and dtype != STR else _infer(df[name])
    df["on_frontier"] = mark_frontier(df).astype(bool) if len(df) else pd.Series(dtype=bool)
    df["frontier_tie_with"] = frontier_ties(df, df["on_frontier"]) if len(df) else pd.Series(dtype=object)
    return df


def _ordered_names(columns: Iterable[str]) -> list[str]:
    """``columns`` in schema order: fixed columns, each family's dotted columns (sorted) in its place, unknown spec
    keys after the spec block, ``predicted_*`` before ``schema_version``."""
    seen = dict.fromkeys(columns)
    extra = [k for k in seen if k not in BY_NAME]
    out: list[str] = []
    for c in COLUMNS:
        if c.dtype == FAMILY:
            out += sorted(k for k in extra if k.startswith(c.name + "."))
            if c.name == _AFTER_SPEC:
                out += [k for k in extra if not k.startswith((*FAMILY_PREFIXES, "predicted_"))]
            continue
        if c.name == "schema_version":
            out += [k for k in extra if k.startswith("predicted_")]
        out.append(c.name)
    return out


def frame_to_arrow(df: pd.DataFrame) -> pa.Table:
    """``df`` as an Arrow table for Parquet: schema metadata ``sweeper.schema_version`` = :data:`SCHEMA_VERSION`,
    and each field's ``unit`` and ``doc`` from :data:`COLUMNS` (dotted columns: the family's)."""
    import pyarrow as pa

    table = pa.Table.from_pandas(df, preserve_index=False)
    fields = []
    for f in table.schema:
        c = BY_NAME.get(f.name) or next((x for x in COLUMNS if x.dtype == FAMILY and f.name.startswith(x.name)), None)
        fields.append(f.with_metadata({"unit": c.unit, "doc": c.doc}) if c else f)
    meta = {**(table.schema.metadata or {}), b"sweeper.schema_version": str(SCHEMA_VERSION).encode()}
    return table.cast(pa.schema(fields, metadata=meta))
