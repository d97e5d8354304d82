"""Units and display formats, in one place: every byte count in sweeper is an ``int`` of bytes, every fraction a
``float`` (0.25 = 25 %), every duration seconds; this module parses printed sizes and writes every value for people
(bytes, numbers, percents, days, booleans), so a table, a sentence, a plan and a report write the same value alike.

Binary units (KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40 bytes) are what CUDA and torch report; decimal units
(KB, MB, GB, TB = 10**3, ...) are what vendors print ("80 GB"). A label is always taken literally.

A missing value (None, NaN, ``pd.NA``) is written :data:`MISSING` by every formatter here. No import beyond the
standard library: the ranks and the planner use it too.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

KIB = 2**10
MIB = 2**20
GIB = 2**30
TIB = 2**40
KB = 10**3
MB = 10**6
GB = 10**9

#: Bytes per unit label. Binary labels are binary, decimal labels decimal: the label is taken literally.
_UNIT_BYTES: dict[str, int] = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_NUM = r"\d+(?:\.\d+)?"
_UNIT = r"(?:TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|byte|B)"
#: A size as the allocators print it, e.g. "340.00 MiB", "0 bytes", "5GB" (regex, one group: the whole size).
SIZE_PATTERN = rf"({_NUM}\s*{_UNIT})\b"
_SIZE_FULL = re.compile(rf"\s*({_NUM})\s*({_UNIT})\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Parse a printed size into bytes: ``"340.00 MiB"`` -> ``356515840``.

    Units (case-insensitive): ``B``/``byte``/``bytes``; binary ``KiB``, ``MiB``, ``GiB``, ``TiB`` (2**10, 2**20, ...);
    decimal ``KB``, ``MB``, ``GB``, ``TB`` (10**3, 10**6, ...). The label is taken literally, also where a tool
    computed a binary value and labelled it ``MB``. A unit is required; whitespace between number and unit optional.

    Rounding: the exact decimal product ``value * unit`` is rounded to the nearest integer, ties to even (Python's
    ``round``), without float error: ``"94.97 GiB"`` -> ``round(Decimal("94.97") * 2**30)``.

    Raises:
        TypeError: ``text`` is not a ``str``.
        ValueError: anything else than one non-negative number followed by a known unit.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_size expects a str, got {type(text).__name__}")
    m = _SIZE_FULL.fullmatch(text)
    if not m:
        raise ValueError(f"not a size with a unit (e.g. '340.00 MiB', '123 bytes'): {text!r}")
    try:
        value = Decimal(m.group(1))
    except InvalidOperation as e:  # pragma: no cover - the regex only lets digits through
        raise ValueError(f"bad number in size {text!r}") from e
    exact = value * _UNIT_BYTES[m.group(2).lower()]
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


#: What a missing value shows as.
MISSING = "—"


def missing(v: Any) -> bool:
    """True for None, NaN (float or numpy) and ``pd.NA`` (whose comparisons are neither true nor false), without
    importing pandas."""
    if v is None:
        return True
    try:
        return bool(v != v)  # only NaN differs from itself
    except (TypeError, ValueError):  # pd.NA: its truth value is ambiguous; an array is no value
        return type(v).__name__ == "NAType"


def significant(x: float, digits: int = 3, zeros: bool = False) -> str:
    """``x`` for people, as the report's tables write numbers: thousands separators from 1,000 up (no decimals),
    else ``digits`` significant digits (trailing zeros kept when ``zeros``: ``3.00``)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:{'#' if zeros else ''}.{digits}g}".rstrip(".")


def num(v: Any, scale: float = 1.0, digits: int = 4, zeros: bool = False) -> str:
    """``v / scale`` for people (:func:`significant`: thousands separators from 1,000 up, else ``digits`` significant
    digits, trailing zeros kept when ``zeros``, so 3 GiB reads "3.00"); :data:`MISSING` if missing; ``str(v)`` if not
    a number."""
    if missing(v):
        return MISSING
    try:
        x = float(v) / scale
    except (TypeError, ValueError):
        return str(v)
    return significant(x, digits, zeros)


def count(v: Any) -> str:
    """A whole number with thousands separators: ``1234`` -> ``"1,234"``; :data:`MISSING` if missing."""
    return MISSING if missing(v) else f"{int(v):,}"


def percent(frac: Any, decimals: int | None = 1, sign: bool = False, unit: str = " %") -> str:
    """A fraction in percent: ``0.1234`` -> ``"12.3 %"``; ``sign``: ``"+12.3 %"``; ``unit=""`` for a table column
    whose header says %. ``decimals=None``: as a sentence says it, whole from 10 % up or when whole (``0.234`` ->
    ``"23 %"``, ``0.05`` -> ``"5 %"``), else one decimal (``0.012`` -> ``"1.2 %"``). :data:`MISSING` if missing."""
    if missing(frac):
        return MISSING
    x = float(frac) * 100
    if decimals is None:
        decimals = 0 if abs(x) >= 9.95 or round(x, 1) == round(x) else 1
    return f"{x:{'+' if sign else ''}.{decimals}f}{unit}"


def days(v: Any) -> str:
    """A number of days: whole with thousands separators from 100 up (``1234.4`` -> ``"1,234"``), else three
    significant digits (``12.34`` -> ``"12.3"``, ``0.5`` -> ``"0.5"``); :data:`MISSING` if missing."""
    if missing(v):
        return MISSING
    x = float(v)
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def yes_no(v: Any, unknown: str = "unknown") -> str:
    """A verdict (fits, on the frontier): ``"yes"``/``"no"``, ``unknown`` when missing."""
    return unknown if missing(v) else ("yes" if v else "no")


def flag(v: Any) -> str:
    """A boolean as the command line and Hydra spell it: ``"true"``/``"false"``."""
    return "true" if v else "false"


def in_unit(n: Any, unit: str, decimals: int = 2, label: bool = True) -> str:
    """``n`` bytes in ``unit`` (``"GiB"``, ``"MiB"``, ``"KiB"``, or a decimal ``"GB"``, ...), thousands separators and
    ``decimals`` decimals (``3 * 2**30`` -> ``"3.00 GiB"``); a value too small to show that way (below one unit of
    the last decimal, not zero) gets three significant digits (``"0.00123 GiB"``); ``label=False`` leaves the unit out
    (a table whose header names it). :data:`MISSING` if missing.

    Raises:
        KeyError: an unknown unit.
    """
    if missing(n):
        return MISSING
    x = float(n) / _UNIT_BYTES[unit.lower()]
    body = f"{x:,.{decimals}f}" if x == 0 or abs(x) >= 10**-decimals else f"{x:.3g}"
    return f"{body} {unit}" if label else body


def size_text(n: float, decimals: int = 2) -> str:
    """Bytes in GiB from 1 GiB up, else in MiB, with ``decimals`` decimals (:func:`in_unit`): a message's size."""
    return in_unit(n, "GiB" if abs(n) >= GIB else "MiB", decimals)


def peak_text(n: float) -> str:
    """A memory figure (bytes) as the report shows it: MiB (2**20 bytes) below 1 GiB, else GiB (2**30 bytes), three
    significant digits (:func:`significant`): ``12_140_000`` -> ``"11.6 MiB"``, ``3 * 2**30`` -> ``"3.00 GiB"``."""
    unit, scale = ("MiB", MIB) if abs(n) < GIB else ("GiB", GIB)
    return f"{significant(n / scale, 3, zeros=True)} {unit}"


def format_bytes(n: int | None) -> str:
    """Display a byte count in binary units with two decimals: ``356515840`` -> ``"340.00 MiB"``.

    Below 1 KiB the count is shown as ``"512 B"``; the unit is the largest of KiB/MiB/GiB/TiB not above ``n``.
    ``None`` (a number the message did not give) is shown as ``"n/a"``.
    """
    if n is None:
        return "n/a"
    sign, a = ("-", -n) if n < 0 else ("", n)
    if a < 1024:
        return f"{sign}{a} B"
    for unit, k in (("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if a >= 1024**k:
            return f"{sign}{a / 1024**k:.2f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring as one line (its lines joined up to the first blank line, reST's double
    backticks dropped): a command's ``--help`` description, whole, never cut at the docstring's first line break."""
    lines: list[str] = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines).replace("``", "")
