"""Combinations known to fail with the installed library versions (kind ``incompatible``): the table in
:mod:`sweeper.failures` as a gate rule."""

from __future__ import annotations

from sweeper import failures
from sweeper.grid.spec import PointSpec
from sweeper.point.gate import Target, rule


@rule(
    "K01",
    ("see the known-incompatible table",),
    "a combination in the known-incompatible table, for the installed versions",
    "sweeper.failures.KNOWN_INCOMPATIBLE (each row cites its issue)",
    kind="incompatible",
)
def _known_incompatible(spec: PointSpec, target: Target):
    row = failures.match_known_incompatible(spec.to_dict(), dict(target.versions))
    if row is None:
        return None
    return failures.known_incompatible(spec.to_dict(), dict(target.versions)), tuple(row.condition)
