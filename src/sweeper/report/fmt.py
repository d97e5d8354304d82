"""The report's values for people beyond :mod:`sweeper.units` (which writes every number, size, percent, day count
and boolean): settings as the command line spells them, the report's memory unit, capped lists. Plain text only:
Markdown escaping is :mod:`sweeper.report.md`'s job."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from sweeper.units import GIB, MIB, MISSING, flag, missing


def text(v: Any) -> str:
    """``str(v)``, or "—" if missing."""
    return MISSING if missing(v) else str(v)


def cli(v: Any) -> str:
    """A setting's value as the command line spells it: ``true``/``false``, ``null``, nested values as JSON."""
    if isinstance(v, (bool, np.bool_)):
        return flag(v)
    if isinstance(v, (list, dict, tuple)):
        return json.dumps(v, sort_keys=True, default=str)
    return "null" if v is None or v is pd.NA else str(v)


def cli_overrides(overrides: Any) -> list[str]:
    """Space-separated override strings (``gc=True``, as Hydra spells swept booleans) as a list, booleans spelled
    ``true``/``false``."""
    out = []
    for tok in str(overrides or "").split():
        key, sep, val = tok.partition("=")
        out.append(f"{key}={val.lower()}" if sep and val in ("True", "False") else tok)
    return out


def mem_unit(df: pd.DataFrame) -> tuple[str, int]:
    """The report's memory display unit: ("GiB", 2**30 bytes) when the largest recorded ``peak_mem_bytes`` (any
    point) is at least 1 GiB or none is recorded, else ("MiB", 2**20 bytes)."""
    peaks = pd.to_numeric(df["peak_mem_bytes"], errors="coerce") if len(df) else pd.Series(dtype=float)
    return ("MiB", MIB) if peaks.notna().any() and peaks.max() < GIB else ("GiB", GIB)


def capped(items: Sequence[str], n: int, sep: str = "; ") -> str:
    """``items`` joined by ``sep``, the first ``n`` of them, then how many more."""
    more = len(items) - n
    return sep.join(items[:n]) + (f"{sep}… and {more:,} more" if more > 0 else "")
