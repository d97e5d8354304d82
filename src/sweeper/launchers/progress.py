"""Progress lines while a sweep runs (rich): a spinner while a point runs, one summary line when it ends.

Overrides, reasons and every other text from a user or a library are printed literally: rich markup and highlighting
are off everywhere here (case T07: a gloo message starting ``[/.../pair.cc:NNN]`` was read as a markup tag and
killed the sweep).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.text import Text

from sweeper.results.record import Record
from sweeper.units import MIB

_console = Console(stderr=False, highlight=False, markup=False, emoji=False)


def _label(index: int, total: int | None, overrides: list[str]) -> str:
    pos = f"[{index + 1}/{total}]" if total else f"[{index + 1}]"
    return f"{pos} {' '.join(overrides) or '(defaults)'}"


@contextmanager
def announce(index: int, total: int | None, overrides: list[str]) -> Iterator[None]:
    """Show a spinner with the point's overrides while the block runs (plain text when not a terminal)."""
    with _console.status(Text(f"running {_label(index, total, overrides)}")):
        yield


def summary_line(index: int, total: int | None, overrides: list[str], record: Record) -> str:
    """One line: position and overrides, status, tokens/s per device and peak memory (MiB = 2**20 bytes) when
    ``ok``, else the reason; wall time in seconds."""
    m = record.metrics
    parts = [_label(index, total, overrides), record.status]
    if record.status == "ok":
        parts.append(f"{m.get('tokens_per_s_per_device', 0):,.0f} tokens/s/device")
        if m.get("peak_mem_bytes") is not None:
            parts.append(f"peak {m['peak_mem_bytes'] / MIB:,.1f} MiB")
    else:
        parts.append(record.reason or "")
    if record.wall_time_s is not None:
        parts.append(f"({record.wall_time_s:.1f} s)")
    return "  ".join(parts)


def finished(index: int, total: int | None, overrides: list[str], record: Record) -> None:
    """Print :func:`summary_line` literally (never as markup)."""
    _console.print(Text(summary_line(index, total, overrides, record)), soft_wrap=True)
