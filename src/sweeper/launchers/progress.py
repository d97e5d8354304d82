"""Progress lines while a sweep runs (rich): a spinner while a point runs, one summary line when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from sweeper.results.record import Record

_console = Console(stderr=False, highlight=False)
MIB = 2**20


def _label(index: int, total: int | None, overrides: list[str]) -> str:
    pos = f"[{index + 1}/{total}]" if total else f"[{index + 1}]"
    return f"{pos} {' '.join(overrides) or '(defaults)'}"


@contextmanager
def announce(index: int, total: int | None, overrides: list[str]) -> Iterator[None]:
    """Show a spinner with the point's overrides while the block runs (plain text when not a terminal)."""
    with _console.status(f"running {_label(index, total, overrides)}"):
        yield


def finished(index: int, total: int | None, overrides: list[str], record: Record) -> None:
    """Print one line: status, tokens/s per device, peak memory (MiB, binary), wall time (s)."""
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
    _console.print("  ".join(parts), soft_wrap=True)
