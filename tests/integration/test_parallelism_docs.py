"""A documented command is a test: the plans of docs/parallelism.md (the worked example, the pipeline plan) run as
printed, and each answers with the configuration the page says it chose."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, _sweeper_env

DOC = REPO / "docs" / "parallelism.md"
#: The answer each command gives, as the page's table states it.
CHOSEN = [
    "FSDP full_shard gc=true at per_device_batch_size=7",
    "ZeRO-3 gc=true sp=8 at per_device_batch_size=7",
    "ZeRO-1 + TP 8 gc=true at per_device_batch_size=3",
]


def _commands() -> list[list[str]]:
    after = DOC.read_text().split("## The plan", 1)[1]
    blocks = [part.split("```", 1)[0] for part in after.split("```sh")[1:]]
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.startswith("python -m sweeper.plan")]


def test_the_worked_example_plans_run_as_printed_and_choose_what_the_page_says(tmp_path: Path):
    commands = _commands()
    assert len(commands) == len(CHOSEN) == 3
    for argv, chosen in zip(commands, CHOSEN, strict=True):
        proc = subprocess.run(
            [sys.executable, *argv[1:]], cwd=tmp_path, env=_sweeper_env(), capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        answer = next(line for line in proc.stdout.splitlines() if line.startswith("Answer"))
        assert f"fastest predicted to fit: {chosen}" in answer, answer
        days = re.search(r"(\d[\d,]*) days", answer)
        assert days and days.group(1) in DOC.read_text(), answer
