"""An exhaustive scan for the batch-search tests: ``python -m tests.batch_scan <dir>`` under torchrun runs the trials
of :mod:`sweeper.job.batch_trials` (same model, same Trainer, same tensor-byte counter and budget) at every batch
from 1 up to the first that does not fit, in one launch. A rank that runs out of memory (the budget's OOM, raised on
CPU) leaves its verdict and exits, as in a search.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from sweeper.job.batch_trials import run_search
from sweeper.point.batch_search import OOM_FILE, SearchState


def every_batch(state: SearchState) -> tuple[int, str] | None:
    """1, 2, 3, ... until the first batch that does not fit."""
    lo, hi = state.bracket()
    return None if hi is not None else (lo + 1, "scan")


def scan_result(scan_dir: Path) -> tuple[int, int]:
    """(largest batch that fit, first batch that did not) after a scan's launch."""
    state = SearchState.read(scan_dir)
    lo, hi = state.bracket()
    if hi is None:  # the first failure ran out of memory: its verdict file says at which batch
        (verdict,) = {json.loads(p.read_text())["batch"] for p in scan_dir.glob(OOM_FILE.format(rank="*"))}
        hi = verdict
    return lo, hi


if __name__ == "__main__":
    code = run_search(Path(sys.argv[1]), next_batch=every_batch)
    sys.stdout.flush()
    os._exit(code)
