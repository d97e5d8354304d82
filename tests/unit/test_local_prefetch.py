"""The driver imports the report's libraries while it waits (sweeper.launchers.prefetch: torchrun shutting down, the
pre-flight's answer to a SLURM submission): once per process, in a daemon thread, only libraries; checked in a fresh
interpreter, with real rank files in a folder."""

from __future__ import annotations

from pathlib import Path

from sweeper.launchers.prefetch import REPORT_MODULES
from sweeper.launchers.torchrun import _rank_files_written

CHECK = """
import sys, threading
from sweeper.launchers import prefetch as local
assert "pandas" not in sys.modules, "imported before the prefetch"
local.prefetch_imports()
local.prefetch_imports()  # once per process
threads = [t for t in threading.enumerate() if t.name == "prefetch-imports"]
assert len(threads) == 1, threads
threads[0].join(60)
print(sorted(m for m in local.REPORT_MODULES if m in sys.modules))
"""


def test_only_libraries_are_prefetched():
    # a sweeper module imported by two threads at once can deadlock with the main thread's imports
    assert not any(m.split(".")[0] == "sweeper" for m in REPORT_MODULES)


def test_the_ranks_are_done_when_every_rank_file_is_there(tmp_path: Path):
    assert not _rank_files_written(tmp_path, 2)
    (tmp_path / "rank0.json").write_text("{}")
    (tmp_path / "rank0.step").write_text("3")
    assert not _rank_files_written(tmp_path, 2)
    (tmp_path / "rank1.json").write_text("{}")
    assert _rank_files_written(tmp_path, 2)
