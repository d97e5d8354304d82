"""``python -m sweeper.status <sweep_dir>``: counts per status of a sweep, asking SLURM about submitted points.

Points the scheduler has ended without a result get their record here (see
:func:`sweeper.launchers.slurm.accounting.reconcile`); points still queued or running count as ``pending``, and
each is listed (up to :data:`SHOWN_PENDING`) with what SLURM says of it: its state and reason (``Resources``,
``JobHeldUser``...), and what that means.
Exit code 0 when every point is final, 3 while some are pending, 2 for a path that is not a sweep directory.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from sweeper.results.sweepdir import SweepDir
from sweeper.units import summary

#: Pending points listed one per line with their reason (the rest are counted).
SHOWN_PENDING = 20


def main(argv: list[str] | None = None) -> int:
    """Print ``<n> <status>`` lines and a total; see the module docstring for exit codes."""
    parser = argparse.ArgumentParser(prog="python -m sweeper.status", description=summary(__doc__))
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    sweep = SweepDir(args.sweep_dir)
    why = sweep.not_a_sweep()
    if why:
        print(f"sweeper.status: error: {why}", file=sys.stderr)
        return 2
    from sweeper.results.collect import collect_records

    info = sweep.info()
    if sweep.submitted_file.exists():
        from sweeper.launchers.slurm.accounting import reconcile

        reconcile(sweep)
    records = collect_records(sweep)
    counts = Counter(r.status for r in records)
    for status, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:6d} {status}")
    pending = [r for r in records if r.status == "pending"]
    for r in pending[:SHOWN_PENDING]:  # what the scheduler says of each (its reason, queue.json)
        print(f"{'':7}{r.point_id}: {r.reason}")
    if len(pending) > SHOWN_PENDING:
        print(f"{'':7}... and {len(pending) - SHOWN_PENDING} more pending (results.csv has every reason)")
    total = sum(counts.values())
    expected = info.get("n_points")
    print(f"{total:6d} total" + (f" of {expected} points in the grid" if expected and expected != total else ""))
    return 3 if counts.get("pending") else 0


if __name__ == "__main__":
    sys.exit(main())
