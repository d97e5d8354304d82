"""``<sweep dir>/wandb/sweeper-runs.json``: which W&B run the writer wrote for each point, and how (no wandb import).

A JSON object ``{"runs": {run_id: entry}, "mode": str, "written_at": str}``; each entry: ``point_id``, ``mode``
(``offline``/``online``), ``fingerprint`` and ``history`` (hashes of what was written, see
:class:`sweeper.tracking.runs.RunSpec`), ``dir`` (the offline run folder, relative to the sweep directory, or
None online). Written atomically after every run, so a writer stopped half-way keeps what it did.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from sweeper.results.atomic import write_json_atomic
from sweeper.results.sweepdir import WANDB_MANIFEST, SweepDir


def manifest_path(sweep_dir: SweepDir | Path) -> Path:
    """``<sweep dir>/wandb/sweeper-runs.json``."""
    return SweepDir.of(sweep_dir).wandb_dir / WANDB_MANIFEST


def read_manifest(sweep_dir: SweepDir | Path) -> dict[str, Any]:
    """The manifest, or ``{"runs": {}}`` when there is none or it cannot be read."""
    try:
        data = json.loads(manifest_path(sweep_dir).read_text())
    except (OSError, ValueError):
        return {"runs": {}}
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
        return {"runs": {}}
    return data


def write_manifest(sweep_dir: SweepDir | Path, data: dict[str, Any]) -> None:
    """Write the manifest atomically.

    Raises:
        OSError: the ``wandb/`` folder cannot be written.
    """
    write_json_atomic(manifest_path(sweep_dir), data)


def sync_command(sweep_dir: SweepDir | Path) -> str:
    """The shell command that uploads a sweep's offline runs: ``wandb sync <sweep dir>/wandb/offline-run-*``."""
    return f"wandb sync {shlex.quote(str(SweepDir.of(sweep_dir).wandb_dir))}/offline-run-*"


def planned_lines(sweep_dir: SweepDir | Path, mode: str, project: str = "sweeper") -> list[str]:
    """What the report says about W&B while the runs are being written in ``mode`` (``off``, ``offline``,
    ``online``; :func:`sweeper.tracking.settings.effective_mode`): plain sentences, the sync command last when
    offline. ``[]`` for ``off``. The terminal says how the writing went."""
    wandb_dir = SweepDir.of(sweep_dir).wandb_dir
    if mode == "offline":
        return [
            f"One W&B run per point was being written offline under {wandb_dir}/ when this report was made (beside "
            "it): the terminal's W&B line says how many were written; once they are, python -m sweeper.report "
            "--wandb off on this sweep directory rewrites this section with the count.",
            f"Sync them once online: {sync_command(sweep_dir)}",
        ]
    if mode == "online":
        return [
            f"One W&B run per point was being sent to the W&B project {project} (group = the sweep id) when this "
            f"report was made (the terminal says how many were written); written offline under "
            f"{wandb_dir}/ instead if the server cannot be reached (the terminal says so)."
        ]
    return []


def summary_lines(sweep_dir: SweepDir | Path) -> list[str]:
    """What the last W&B write left, for the report (Markdown-free plain sentences; the caller formats them):
    how many runs, offline or online, where, and the command that syncs offline runs. ``[]`` when no run was
    written."""
    runs = read_manifest(sweep_dir).get("runs", {})
    if not runs:
        return []
    offline = [e for e in runs.values() if e.get("mode") == "offline"]
    online = len(runs) - len(offline)
    lines = []
    if online:
        lines.append(f"{online} W&B runs sent online (group = the sweep id).")
    if offline:
        lines.append(f"{len(offline)} W&B runs written offline under {SweepDir.of(sweep_dir).wandb_dir}/.")
        lines.append(f"Sync them once online: {sync_command(sweep_dir)}")
    return lines
