"""Markdown from text that is not ours: failure reasons, overrides, library messages, host names.

Rule: outside text is never markup. Every piece of it enters report.md through :func:`escape` (inline text and
table cells), :func:`code` (a code span) or :func:`fence` (a fenced block), so ``*x*``, ``_y_``, backticks,
``[a](b)``, ``<script>``, ``&amp;`` and ``|`` show literally in report.md (as CommonMark reads it) and in the HTML
made from it (:mod:`sweeper.report.render`). Newlines become spaces where one line is needed (cells, list items).
CommonMark: https://spec.commonmark.org/0.31.2/ (backslash escapes, section 2.4; code spans, 6.1; fences, 4.5).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

#: ASCII punctuation that can start or end inline markup (emphasis, code, links, autolinks, raw HTML, entities,
#: strikethrough, table cells) or escape it; a backslash before any ASCII punctuation makes it literal.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")
_NEWLINES = re.compile(r"\s*[\r\n]+\s*")
_NUMERIC = re.compile(r"^[-+]?[\d,.]+(e[+-]?\d+)?%?$|^—$")


def one_line(text: Any) -> str:
    """``str(text)`` with each run of line breaks (and the blanks around it) replaced by one space."""
    return _NEWLINES.sub(" ", str(text))


def escape(text: Any) -> str:
    """``text`` as literal Markdown inline text on one line: a backslash before each markup character, except an
    underscore between two letters or digits (``full_shard``), which cannot open or close emphasis (CommonMark
    6.2, rules 2 and 6)."""
    s = one_line(text)
    return _SPECIAL.sub(lambda m: m.group(1) if _intraword(s, m.start()) else "\\" + m.group(1), s)


def _intraword(s: str, i: int) -> bool:
    return s[i] == "_" and 0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum()


def strong(text: Any) -> str:
    """``text`` in bold, literal inside."""
    return f"**{escape(text)}**"


def code(text: Any) -> str:
    """``text`` as a code span on one line: the backtick fence is one longer than the longest run of backticks in
    it, with a space inside when it starts or ends with a backtick (CommonMark 6.1)."""
    s = one_line(text)
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def fence(text: str, info: str = "") -> str:
    """``text`` verbatim in a fenced code block whose backtick fence is longer than any run of backticks in it."""
    n = max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{'`' * n}{info}\n{text}\n{'`' * n}"


def table(df: pd.DataFrame) -> str:
    """A Markdown pipe table of a frame of display strings (plain text: every header and cell is escaped), via
    ``DataFrame.to_markdown`` (tabulate); columns whose every cell is a number (or "—") are right-aligned."""
    right = [bool(len(df)) and all(_NUMERIC.match(str(v)) for v in df[c]) for c in df.columns]
    cells = df.map(escape) if len(df) else df.astype(str)
    cells.columns = [escape(c) for c in df.columns]
    return cells.to_markdown(
        index=False, tablefmt="pipe", disable_numparse=True, colalign=["right" if r else "left" for r in right]
    )
