"""``python -m sweeper.tracking <sweep dir> --mode offline|online``: write the sweep's W&B runs (the child process
of :func:`sweeper.tracking.log_runs`; also usable by hand). Prints plain lines; exit 0 unless the arguments or the
records are bad."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sweeper.results.sweepdir import SweepDir
from sweeper.tracking.settings import WandbSettings
from sweeper.tracking.writer import write_runs
from sweeper.units import summary


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, write the runs, print :meth:`~sweeper.tracking.writer.WriteResult.lines`.

    Returns 0 (W&B problems are reported, not failed), 2 for a directory without ``points/``, 1 for an unreadable
    record.
    """
    parser = argparse.ArgumentParser(prog="python -m sweeper.tracking", description=summary(__doc__))
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--mode", choices=("offline", "online"), default="offline")
    parser.add_argument("--project", default="sweeper")
    parser.add_argument("--entity", default=None)
    args = parser.parse_args(argv)
    sweep = SweepDir(args.sweep_dir)
    why = sweep.not_a_sweep()
    if why:
        print(f"sweeper.tracking: error: {why}", file=sys.stderr)
        return 2
    try:
        result = write_runs(sweep, WandbSettings(args.mode, args.project, args.entity), args.mode)
    except ValueError as e:
        print(f"W&B: not written: {e}")
        return 1
    for line in result.lines():
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
