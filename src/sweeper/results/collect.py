"""Collecting a sweep directory: every point's record, and a ``pending`` record for each point without one yet.

A point folder without ``result.json`` is a point that was launched (locally: its ranks are running or were
killed; on SLURM: its job is queued or running). Its spec comes from ``submitted.json`` (SLURM submissions, see
:mod:`sweeper.launchers.slurm.accounting`) or from the folder's ``spec.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sweeper.results.record import POINTS_DIR, RESULT_FILE, Record, iter_records
from sweeper.results.sweepdir import SUBMITTED_FILE, SWEEP_FILE

SPEC_FILE = "spec.json"  # written by sweeper.point.lifecycle.begin


def collect_records(sweep_dir: Path) -> list[Record]:
    """All records of a sweep, sorted by point id: the ``result.json`` files (via
    :func:`~sweeper.results.record.iter_records`) plus a ``pending`` record for every point folder without one,
    with the SLURM job id in its reason and ``env`` when the point was submitted to SLURM.

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    sweep_dir = Path(sweep_dir)
    records = iter_records(sweep_dir)
    sweep_id = sweep_info(sweep_dir).get("sweep_id") or (records[0].sweep_id if records else sweep_dir.name)
    root = sweep_dir / POINTS_DIR
    folders = sorted(pending_folders(root))
    submitted = read_submitted(sweep_dir) if folders else {}
    for name in folders:
        entry = submitted.get(name) or {}
        job = entry.get("job_id")
        records.append(
            Record(
                sweep_id=sweep_id,
                point_id=name,
                status="pending",
                reason=f"no result yet (SLURM job {job})" if job else "no result yet",
                spec=entry.get("spec") or _read_json(root / name / SPEC_FILE),
                overrides=entry.get("overrides", []),
                replay=entry.get("replay", ""),
                env={"slurm_job_id": job} if job else {},
            )
        )
    return sorted(records, key=lambda r: r.point_id)


def pending_folders(root: Path) -> list[str]:
    """Names of the point folders under ``root`` (``<sweep_dir>/points``) that hold no ``result.json`` (yet);
    [] when ``root`` is missing. Hidden folders are skipped."""
    try:
        with os.scandir(root) as it:
            dirs = [e.name for e in it if not e.name.startswith(".") and e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [n for n in dirs if not os.path.exists(os.path.join(root, n, RESULT_FILE))]


def read_submitted(sweep_dir: Path) -> dict[str, Any]:
    """``submitted.json`` (points submitted to SLURM: ``{point_id: {"job_id", "overrides", "spec", ...}}``), or
    ``{}`` when there is none or it cannot be read (collection must not fail on it; SLURM accounting reads it
    strictly)."""
    return _read_json(Path(sweep_dir) / SUBMITTED_FILE)


def sweep_info(sweep_dir: Path) -> dict[str, Any]:
    """``sweep.json`` (sweep id, start time, command line, ...), or ``{}`` when there is none or it cannot be read."""
    return _read_json(Path(sweep_dir) / SWEEP_FILE)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
