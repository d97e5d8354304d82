"""The grid of a sweep: which configuration columns vary across its points (the axes that tell rows apart) and
which are the same for every point. Column names are the row's (:mod:`sweeper.results.row`): swept keys as on the
command line, passthrough dicts as dotted columns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sweeper.report.fmt import cli
from sweeper.report.md import code
from sweeper.results.row import config_columns
from sweeper.units import missing

#: The most values the grid section lists for one varying key.
GRID_MAX_VALUES = 20
#: Derived columns: shown only when they are not already told by the axis they follow from.
DERIVED = "fp32_master_weights"
#: How the multirun walked its grid (``search=grid|frontier``, the window a job measured): budgets, not a
#: configuration, so never an axis (a search resumed with ``search=grid`` has both values).
_WALK = "search."
_FOLLOWS_MODEL = "model."


@dataclass
class Grid:
    """The sweep's configuration space.

    Attributes:
        varying: column -> its distinct values, sorted (numbers numerically, None last), for the columns whose
            value differs between points; ``model.*`` columns that only follow ``model`` are left out.
        fixed: column -> the one value every point has (columns no point records are left out).
        derived: ``fp32_master_weights`` -> its values (one or more): derived from model_dtype, precision and zero.
    """

    varying: dict[str, list[Any]] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    derived: dict[str, list[Any]] = field(default_factory=dict)

    def axes(self, columns: Sequence[str]) -> list[str]:
        """The varying columns that ``columns`` holds, in grid order, then ``fp32_master_weights`` when it varies:
        what the report's tables show so that rows are told apart by their configuration."""
        shown = [a for a in self.varying if a in columns]
        if len(self.derived.get(DERIVED, ())) > 1 and DERIVED in columns:
            shown.append(DERIVED)
        return shown


def grid_of(df: pd.DataFrame) -> Grid:
    """The grid of the rows of ``df`` (:func:`sweeper.results.row.records_to_frame`) that have a configuration
    (see :class:`Grid`); rows without a spec (a record written without one) take no part."""
    columns = [k for k in config_columns(df.columns) if not k.startswith(_WALK)]
    rows = df.loc[df[columns].notna().any(axis=1), columns] if columns else df.iloc[0:0]
    grid = Grid()
    for k in columns:
        column = [None if missing(v) else v for v in rows[k].drop_duplicates().tolist()]
        if all(v is None for v in column):
            continue
        plain = _distinct_plain(column)
        if plain is not None:
            distinct = list(plain.values())
        else:  # values other than str/int/float/bool/None: tell them apart by their JSON
            distinct = list({json.dumps(v, sort_keys=True, default=str): v for v in column}.values())
        values = sorted(distinct, key=lambda v: (v is None, _sort_key(v)))
        if k == DERIVED:
            grid.derived[k] = values
        elif len(values) == 1:
            grid.fixed[k] = values[0]
        elif not (k.startswith(_FOLLOWS_MODEL) and follows(rows, k, "model")):
            grid.varying[k] = values
    return grid


def follows(rows: pd.DataFrame, key: str, parent: str) -> bool:
    """Whether ``key`` has one value per value of ``parent`` in ``rows`` (so ``parent`` already tells it)."""
    return bool((rows.groupby(parent, dropna=False)[key].nunique(dropna=False) <= 1).all())


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


def grid_values(values: Sequence[Any]) -> str:
    """A varying key's (sorted) values as Markdown code spans, the first :data:`GRID_MAX_VALUES` of them, then how
    many more."""
    shown = ", ".join(code(cli(v)) for v in values[:GRID_MAX_VALUES])
    more = len(values) - GRID_MAX_VALUES
    return shown + (f", … and {more:,} more (up to {code(cli(values[-1]))})" if more > 0 else "")
