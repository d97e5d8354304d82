"""A point's folder before its ranks start (:func:`sweeper.point.lifecycle.begin_many`): its ``spec.json``, written
while the pre-flight's worker still answers, and the files an interrupted attempt left."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.results.atomic import write_json_atomic_many
from sweeper.results.jitlocks import FINDINGS_FILE
from sweeper.results.sweepdir import SPEC_FILE

#: Files of an interrupted attempt (a killed driver or rank, a full disk) removed before a point runs again.
STALE = ("rank*.json", "rank*.step", ".*.tmp", FINDINGS_FILE.format(rank="*"))


def write_new_specs(points: Sequence[tuple[Path, dict[str, Any]]]) -> tuple[set[Path], OSError | None]:
    """For each ``(point folder, spec data)`` whose folder has no ``spec.json`` yet: the folder made and the file
    written (concurrently, :func:`~sweeper.results.atomic.write_json_atomic_many`). A folder that has one (an earlier
    attempt's) is left as it is, for :func:`ready_folders` once the point is known to run.

    Returns:
        The folders written, and the first error the filesystem gave (None without one): the caller records the
        points it refuses meanwhile, then raises it.
    """
    new = [(pdir, data) for pdir, data in points if not (pdir / SPEC_FILE).exists()]
    try:
        for pdir, _ in new:
            pdir.mkdir(parents=True, exist_ok=True)
        write_json_atomic_many([(pdir / SPEC_FILE, data) for pdir, data in new])
    except OSError as e:
        return {pdir for pdir, _ in new}, e
    return {pdir for pdir, _ in new}, None


def unwrite_spec(pdir: Path) -> None:
    """Remove the ``spec.json`` :func:`write_new_specs` wrote for a point that does not run after all."""
    (pdir / SPEC_FILE).unlink(missing_ok=True)


def ready_folders(points: Sequence[tuple[Path, dict[str, Any]]], written: set[Path]) -> None:
    """Make each ``(point folder, spec data)`` ready for its ranks: the folder there, the files of an interrupted
    attempt (:data:`STALE`) removed, ``spec.json`` written unless it is in ``written`` (concurrently).

    Raises:
        OSError: a ``spec.json`` the filesystem refused (the first in ``points``' order).
    """
    for pdir, _ in points:
        pdir.mkdir(parents=True, exist_ok=True)
        for stale in [f for pattern in STALE for f in pdir.glob(pattern)]:
            stale.unlink(missing_ok=True)
    write_json_atomic_many([(pdir / SPEC_FILE, data) for pdir, data in points if pdir not in written])
