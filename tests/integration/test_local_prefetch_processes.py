"""Tests of ``tests/unit/test_local_prefetch.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import subprocess
import sys

from sweeper.launchers.prefetch import REPORT_MODULES
from tests.unit.test_local_prefetch import CHECK


def test_prefetch_imports_the_report_libraries_once_in_a_background_thread():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(REPORT_MODULES))
