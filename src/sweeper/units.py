"""Byte units, in one place: every byte count in sweeper is an ``int`` of bytes; these are for display and parsing.

Binary units (KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40 bytes) are what CUDA and torch report; decimal units
(KB, MB, GB, TB = 10**3, ...) are what vendors print ("80 GB"). A label is always taken literally.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

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


def significant(x: float, digits: int = 3, zeros: bool = False) -> str:
    """``x`` for people, as the report's tables write numbers: thousands separators from 1,000 up (no decimals),
    else ``digits`` significant digits (trailing zeros kept when ``zeros``: ``3.00``)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:{'#' if zeros else ''}.{digits}g}".rstrip(".")


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
