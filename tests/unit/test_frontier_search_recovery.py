"""The frontier-search benchmark's recovery rate (benchmarks/frontier_search.py), on hand-made frontiers: a full-grid
frontier point is recovered when the search's frontier holds it or a point tied with it, in the full grid's report
(one-sided) or in either report (two-sided: a tie the search measured itself)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from frontier_search import recovery


def front(rows: dict[str, str | None]) -> pd.DataFrame:
    """A frontier table: point id -> its ``frontier_tie_with`` (space-separated ids, or None)."""
    return pd.DataFrame({"point_id": list(rows), "frontier_tie_with": list(rows.values())})


def test_a_point_held_or_tied_in_the_full_grids_report_is_recovered_either_way():
    grid = front({"a": None, "b": "x y"})
    assert recovery(grid, front({"a": None, "y": None})) == (2, 2)
    assert recovery(grid, front({"a": None, "y": None}), two_sided=False) == (2, 2)
    assert recovery(grid, front({"a": None, "z": None})) == (1, 2)  # z is tied with nothing of the grid's


def test_a_tie_only_the_search_measured_counts_two_sided_only():
    """b fell off the search's frontier because the search measured it tied with c (less memory): c's row in the
    search's report names b. One-sided that is a miss; two-sided it is the measurement's noise, recovered."""
    grid = front({"a": None, "b": None})
    search = front({"a": None, "c": "b"})
    assert recovery(grid, search, two_sided=False) == (1, 2)
    assert recovery(grid, search) == (2, 2)
    # a point the search skipped is in no row of the search's report: only the full grid's ties can count for it
    assert recovery(grid, front({"a": None, "c": None})) == (1, 2)
