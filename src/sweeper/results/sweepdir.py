"""The sweep directory: unique per sweep (case P09), described by ``sweep.json``, never reused by accident.

``hydra.sweep.dir`` defaults to ``multirun/<date>_<time>_${sweeper_id:}``: the time is for people, the id (6 random
hex digits, fixed for the process and its children) keeps two sweeps started in the same second apart. Pointing
``hydra.sweep.dir`` at an existing sweep directory resumes it: its ``sweep.json`` (and so its sweep id) is kept and
points that already have a final result are not run again.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from sweeper.results.atomic import write_json_atomic

SWEEP_FILE = "sweep.json"
#: the points submitted to SLURM and their job ids (written by :mod:`sweeper.launchers.slurm.accounting`)
SUBMITTED_FILE = "submitted.json"
_ENV = "SWEEPER_SWEEP_ID"


def new_sweep_id() -> str:
    """This process's sweep id: ``$SWEEPER_SWEEP_ID`` if set (children inherit it), else 6 random hex digits."""
    if not os.environ.get(_ENV):
        os.environ[_ENV] = secrets.token_hex(3)
    return os.environ[_ENV]


def shell_command(argv: list[str], program: str = "python -m sweeper") -> str:
    """The command line that ran, each argument shell-quoted (``shlex.quote``): pasted into a shell it runs the
    same arguments, never a ``$(...)`` or a brace expansion inside one. Secrets are references already
    (:func:`sweeper.redact.redact_command_line` rewrote ``sys.argv``)."""
    return " ".join([program, *(shlex.quote(a) for a in argv)])


def register_resolver() -> None:
    """Register the ``${sweeper_id:}`` OmegaConf resolver (cached, like Hydra's ``${now:}``)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("sweeper_id"):
        OmegaConf.register_new_resolver("sweeper_id", lambda: new_sweep_id(), use_cache=True)


def open_sweep(
    sweep_dir: Path,
    mode: str,
    n_points: int | None,
    overrides: list[str],
    wandb: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create ``sweep.json`` in a new sweep directory, or read it back when resuming an existing one.

    Args:
        wandb: the sweep's W&B settings (``mode``, ``project``, ``entity``; :mod:`sweeper.tracking`), stored as
            ``wandb`` (a resume stores the settings it ran with).

    Returns:
        The sweep description: ``sweep_id``, ``created_at`` (ISO time), ``mode`` (``run``/``multirun``),
        ``n_points``, ``command`` (argv), ``overrides``, ``resumed`` (how many times it was reopened), ``wandb``.
    """
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / SWEEP_FILE
    if path.exists():
        info = json.loads(path.read_text())
        info["resumed"] = info.get("resumed", 0) + 1
        if n_points is not None:
            info["n_points"] = max(n_points, info.get("n_points") or 0)
        os.environ[_ENV] = info["sweep_id"]
    else:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        info = {
            "sweep_id": new_sweep_id(),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "mode": mode,
            "n_points": n_points,
            "command": shell_command(sys.argv[1:]),
            "overrides": overrides,
            "resumed": 0,
        }
    if wandb is not None:
        info["wandb"] = dict(wandb)
    write_json_atomic(path, info)
    return info


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    """``sweep.json`` of a sweep directory, or ``{}`` when it has none."""
    path = Path(sweep_dir) / SWEEP_FILE
    return json.loads(path.read_text()) if path.exists() else {}
