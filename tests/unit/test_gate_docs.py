"""docs/gate.md lists exactly the registered gate rules, in the order they run, with their keys, rule and source."""

from __future__ import annotations

import re
from pathlib import Path

from sweeper.point.gate import ordered_rules

DOC = Path(__file__).resolve().parents[2] / "docs" / "gate.md"


def _rows() -> list[list[str]]:
    """The cells of the "Every rule" table (``\\|`` inside a cell is a literal bar)."""
    text = DOC.read_text(encoding="utf-8").split("## Every rule", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        if re.match(r"^\| [A-Z]\d\d ", line):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
    return rows


def test_the_rule_table_lists_exactly_the_registered_rules_in_order():
    assert [r[0] for r in _rows()] == [rule.id for rule in ordered_rules()]


def test_each_row_states_the_registered_keys_rule_and_source():
    for (rid, keys, statement, gist, source), rule in zip(_rows(), ordered_rules(), strict=True):
        assert [k.strip("`") for k in keys.split(", ")] == list(rule.keys), rid
        assert statement == rule.statement, rid
        assert source == rule.source, rid
        assert gist, rid  # what to use instead
