"""The fast tier's contract: a test under ``tests/unit`` starts no process.

The fast tier (``pytest tests/unit``, README "Tests") is what a developer runs on every change, so it holds unit tests
and golden files only: no CLI, no torchrun, no pre-flight worker, no helper process. This plugin (loaded by
``tests/conftest.py``) makes that a checked rule instead of a convention: while a ``tests/unit`` test runs (its
fixtures included), every way Python starts a process (``subprocess`` and ``multiprocessing``'s spawn both end in
``_posixsubprocess.fork_exec``, which ``subprocess`` holds as ``_fork_exec``; ``os.fork``, ``os.forkpty``,
``os.posix_spawn[p]``, ``os.system``) raises
:class:`ProcessSpawned`, and the test fails at teardown even when the code under test caught that error. A test that
must start a process belongs in ``tests/integration``.

``SWEEPER_SPAWN_LOG=<file>`` turns the guard into a recorder for every test of the run: nothing is refused, and the
node id of each test that started a process is appended to the file (how the tiers were sorted).
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).resolve().parent / "unit"
#: Module attributes through which a process is started, as (module, attribute name).
_ENTRY_POINTS = (
    (subprocess, "_fork_exec"),  # subprocess binds fork_exec at import (Python >= 3.11)
    (_posixsubprocess, "fork_exec"),  # multiprocessing's spawn and forkserver look it up at each call
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
)


class ProcessSpawned(RuntimeError):
    """A fast-tier test tried to start a process."""


def _is_fast_tier(item: pytest.Item) -> bool:
    return UNIT_DIR in Path(str(item.path)).resolve().parents


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Around one test (setup, call, teardown): refuse (fast tier) or record (``SWEEPER_SPAWN_LOG``) processes."""
    log = os.environ.get("SWEEPER_SPAWN_LOG")
    if not log and not _is_fast_tier(item):
        yield
        return
    attempts: list[str] = []
    saved = [(mod, name, getattr(mod, name)) for mod, name in _ENTRY_POINTS if hasattr(mod, name)]

    def guarded(mod, name, real):
        def call(*args, **kwargs):
            what = f"{getattr(mod, '__name__', mod)}.{name}"
            attempts.append(what)
            if log:
                return real(*args, **kwargs)
            raise ProcessSpawned(
                f"{item.nodeid} starts a process ({what}): the fast tier (tests/unit) starts none; "
                "move the test to tests/integration"
            )

        return call

    for mod, name, real in saved:
        setattr(mod, name, guarded(mod, name, real))
    item.stash[_ATTEMPTS] = attempts
    try:
        yield
    finally:
        for mod, name, real in saved:
            setattr(mod, name, real)
        if log and attempts:
            with open(log, "a") as f:
                f.write(f"{item.nodeid}\t{attempts[0]}\n")


_ATTEMPTS = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A fast-tier test that tried to start a process fails, even when the code under test caught the refusal."""
    outcome = yield
    report = outcome.get_result()
    attempts = item.stash.get(_ATTEMPTS, [])
    if call.when == "teardown" and attempts and not os.environ.get("SWEEPER_SPAWN_LOG") and _is_fast_tier(item):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} tried to start a process ({', '.join(dict.fromkeys(attempts))}): the fast tier "
            "(tests/unit) starts none; move the test to tests/integration"
        )
