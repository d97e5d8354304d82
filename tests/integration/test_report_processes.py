"""Tests of ``tests/unit/test_report.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sweeper.report import main
from tests.unit.test_report import sweep  # noqa: F401  (a fixture)


def test_main_prints_the_report_path_last(sweep: Path, capsys):  # noqa: F811  (the fixture)
    assert main([str(sweep), "--device-mem", "A100 40 GiB=40"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(sweep / "report.md")


def test_cli_on_a_missing_directory_names_the_path(tmp_path: Path):
    missing = tmp_path / "no-such-sweep"
    env = {"PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper.report", str(missing)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    assert str(missing) in proc.stderr


def test_importing_the_report_does_not_import_torch_or_the_plotting_libraries():
    code = "import sys, sweeper.report; print(sorted({'torch', 'transformers', 'matplotlib', 'plotly'} & set(sys.modules)))"
    env = {"PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[]"
