"""Tests of ``tests/unit/test_redact.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import subprocess

from sweeper.config.spec import shell_command


def test_the_recorded_command_is_shell_quoted(tmp_path):
    """U13: pasting the sweep's command into bash runs the same arguments: no command substitution, no brace
    expansion."""
    argv = ["-m", "nodes=2", '+callbacks=[{_target_:m.Noop,note:"$(touch PWNED) é ✓"}]', "gc={a,b}"]
    command = shell_command(argv)
    shown = subprocess.run(
        ["bash", "-c", command.replace("python -m sweeper", "printf '%s\\n'", 1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.splitlines() == argv
    assert not (tmp_path / "PWNED").exists()
