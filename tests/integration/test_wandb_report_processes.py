"""Tests of ``tests/unit/test_wandb_report.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.unit.test_wandb_report import FAKE_KEY, sweep  # noqa: F401  (sweep: a fixture)


def test_spec_module_imports_without_wandb_workspaces():
    code = (
        "import sys; sys.modules['wandb_workspaces'] = None; sys.modules['wandb'] = None\n"
        "import sweeper.wandb_report.spec, sweeper.wandb_report\n"
        "print(sweeper.wandb_report.spec.wandb_target({}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "('sweeper', None)" in r.stdout


def test_api_key_never_written_or_printed(sweep, tmp_path):  # noqa: F811  (the fixture)
    """The CLI in a subprocess, both modes, with a fake key: the key shows in no output and no file written."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "WANDB_API_KEY": FAKE_KEY,  # too short for wandb: publishing fails fast, offline
        "WANDB_BASE_URL": "http://127.0.0.1:9",
        "HOME": str(home),
        "WANDB_DIR": str(home),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "NETRC": str(home / "netrc"),
    }
    for extra, rc in (([], 0), (["--publish"], 1)):
        r = subprocess.run(
            [sys.executable, "-m", "sweeper.wandb_report", str(sweep), *extra],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert r.returncode == rc, r.stderr
        assert FAKE_KEY not in r.stdout + r.stderr
        assert "Traceback" not in r.stderr
    for root in (sweep, home):
        for path in root.rglob("*"):
            if path.is_file():
                assert FAKE_KEY.encode() not in path.read_bytes(), path
