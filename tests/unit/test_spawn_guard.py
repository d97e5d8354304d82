"""The fast tier's guard (``tests/spawn_guard.py``) is on in every ``tests/unit`` test: each way of starting a process
is refused, and a refusal the code under test caught still fails the test."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest

from tests.spawn_guard import _ATTEMPTS, ProcessSpawned


def _spawn_context() -> None:
    process = multiprocessing.get_context("spawn").Process(target=print)
    process.start()
    process.join()


@pytest.mark.parametrize(
    "start",
    [
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
        lambda: subprocess.Popen(["true"]),
        lambda: os.system("true"),
        _spawn_context,
    ],
    ids=["subprocess.run", "Popen", "os.system", "multiprocessing-spawn"],
)
def test_every_way_of_starting_a_process_is_refused(start, request):
    with pytest.raises(ProcessSpawned, match="move the test to tests/integration"):
        start()
    attempts = request.node.stash[_ATTEMPTS]
    assert attempts, "the attempt is recorded, so a caught refusal still fails the test at teardown"
    attempts.clear()  # this test's attempt was the point: it passes
