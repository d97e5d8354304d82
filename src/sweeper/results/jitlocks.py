"""The DeepSpeed JIT-build locks a point's ranks found before their build (:mod:`sweeper.job.jit_locks`), as files
beside the rank files and as the record's ``env["jit_locks"]``.

A rank writes ``jit_locks.rank<r>.json`` (:data:`FINDINGS_FILE`: a JSON list of findings, each ``path``,
``action`` = ``removed`` | ``left``, ``verdict``, ``age_s``, ``message``) right after its check, before the build,
and only when it found a lock: the file is there even when the rank then waits until the point's timeout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweeper.results.atomic import write_json_atomic

#: One rank's findings, in the point directory.
FINDINGS_FILE = "jit_locks.rank{rank}.json"


def write_findings(pdir: Path, rank: int, findings: list[dict[str, Any]]) -> None:
    """Write rank ``rank``'s findings atomically (nothing when there are none).

    Raises:
        OSError: the point directory cannot be written.
    """
    if findings:
        write_json_atomic(Path(pdir) / FINDINGS_FILE.format(rank=rank), findings)


def read_findings(pdir: Path) -> list[dict[str, Any]]:
    """Every rank's findings in ``pdir``, one per lock path (a ``removed`` one first: the rank that removed it; the
    others found it gone); an unreadable file is skipped."""
    by_path: dict[str, dict[str, Any]] = {}
    for f in sorted(Path(pdir).glob(FINDINGS_FILE.format(rank="*"))):
        try:
            items = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                kept = by_path.get(item["path"])
                if kept is None or (item.get("action") == "removed" and kept.get("action") != "removed"):
                    by_path[item["path"]] = item
    return list(by_path.values())


def amend(result: dict[str, Any], env: dict[str, Any], pdir: Path) -> None:
    """Put the findings of ``pdir`` into the record being made: ``env["jit_locks"]``, and for a ``timeout`` each
    lock left in place appended to its ``reason`` (the ranks may have waited on it: the lock's path and the fix)."""
    findings = read_findings(pdir)
    if not findings:
        return
    env["jit_locks"] = findings
    left = [str(f.get("message")) for f in findings if f.get("action") == "left"]
    if result.get("status") == "timeout" and left:
        result["reason"] = f"{result.get('reason')}; before the build, {'; '.join(left)}"
