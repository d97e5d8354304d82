"""Combinations known to fail with the installed library versions (kind ``incompatible``): the table in
:mod:`sweeper.failures.incompatible` as a gate rule (rows the spec can show: ``before_launch=True``)."""

from __future__ import annotations

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.failures.incompatible import describe, match_known_incompatible
from sweeper.point.gate import rule


@rule(
    "K01",
    ("<the matching row's keys>",),
    "a combination in the known-incompatible table, for the installed versions",
    "sweeper.failures.incompatible.KNOWN_INCOMPATIBLE (each row cites its source)",
    kind="incompatible",
)
def _known_incompatible(spec: PointSpec, target: Target):
    versions = dict(target.versions)
    row = match_known_incompatible(spec.to_dict(), versions, before_launch=True)
    if row is None:
        return None
    return describe(row, versions), row.named_keys()
