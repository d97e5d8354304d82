"""Opening a sweep: ``sweep.json`` created in a new sweep directory, or read back (and counted) on a resume."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from sweeper.config.spec import shell_command
from sweeper.results.atomic import write_json_atomic
from sweeper.results.sweepdir import SWEEP_ID_ENV, SweepDir


def open_sweep(
    sweep_dir: SweepDir | Path,
    mode: str,
    n_points: int | None,
    overrides: list[str],
    wandb: dict[str, Any] | None = None,
    search_path: list[str] | None = None,
) -> dict[str, Any]:
    """Create ``sweep.json`` in a new sweep directory, or read it back when resuming an existing one (strictly: a
    ``sweep.json`` that is not valid JSON raises, it is never replaced by a new sweep id).

    Args:
        wandb: the sweep's W&B settings (``mode``, ``project``, ``entity``; :mod:`sweeper.tracking`), stored as
            ``wandb`` (a resume stores the settings it ran with).
        search_path: the config folders the command line added (absolute ``file://`` entries), stored as
            ``search_path`` when there are any: every replay command of the sweep carries them.

    Returns:
        The sweep description: ``sweep_id``, ``created_at`` (ISO time), ``mode`` (``run``/``multirun``),
        ``n_points``, ``command`` (argv), ``overrides``, ``resumed`` (how many times it was reopened), ``wandb``.
    """
    sweep = SweepDir.of(sweep_dir)
    path = sweep.sweep_file
    if path.exists():
        info = json.loads(path.read_text())
        info["resumed"] = info.get("resumed", 0) + 1
        if n_points is not None:
            info["n_points"] = max(n_points, info.get("n_points") or 0)
        os.environ[SWEEP_ID_ENV] = info["sweep_id"]
    else:
        sweep.path.mkdir(parents=True, exist_ok=True)
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
    if search_path:
        info["search_path"] = list(search_path)
    write_json_atomic(path, info)
    return info


def new_sweep_id() -> str:
    """This process's sweep id: ``$SWEEPER_SWEEP_ID`` if set (children inherit it), else 6 random hex digits."""
    if not os.environ.get(SWEEP_ID_ENV):
        os.environ[SWEEP_ID_ENV] = secrets.token_hex(3)
    return os.environ[SWEEP_ID_ENV]


def register_resolver() -> None:
    """Register the ``${sweeper_id:}`` OmegaConf resolver (cached, like Hydra's ``${now:}``)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("sweeper_id"):
        OmegaConf.register_new_resolver("sweeper_id", lambda: new_sweep_id(), use_cache=True)
