"""Importing the report's libraries on a background thread while the driver waits for something else
(:func:`prefetch_imports`)."""

from __future__ import annotations

import importlib
import threading

#: Third-party modules the driver needs for a record's table and the report (pandas alone is ~0.3 s to import).
#: Only libraries: a sweeper module could be in the middle of being imported by the main thread, and two threads
#: importing each other's modules deadlock.
REPORT_MODULES = ("pandas", "pyarrow", "pyarrow.parquet")
_started: set[tuple[str, ...]] = set()


def prefetch_imports(modules: tuple[str, ...] = REPORT_MODULES) -> None:
    """Import ``modules`` in a daemon thread, once per process and tuple, while the main thread waits (torchrun
    shutting down after a point's ranks wrote their results, ``benchmarks/harness_overhead.py``: 0.5 s of a lone
    point's wall time; the pre-flight's worker answering a SLURM submission). A module that fails to import is
    left for the main thread to fail on, with its own error."""
    if modules in _started:
        return
    _started.add(modules)

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the main thread imports it again and reports its own error
                return

    threading.Thread(target=run, name="prefetch-imports", daemon=True).start()
