"""``python -m sweeper.report <sweep_dir>``: rebuild the report of a sweep directory (SLURM jobs that ended
without a record are recorded first)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sweeper.report.build import build_report
from sweeper.results.sweepdir import SweepDir
from sweeper.tracking import RunsWriter, sweep_settings
from sweeper.tracking.settings import MODES
from sweeper.units import summary


def device_mem(text: str) -> tuple[str, float]:
    """``LABEL=GIB`` (e.g. ``"H100 80 GiB=80"``) as (label, GiB); a bare number is labelled "<n> GiB".

    Raises:
        argparse.ArgumentTypeError: the GiB part is not a number.
    """
    label, sep, gib = text.rpartition("=")
    try:
        return (label if sep else f"{gib} GiB"), float(gib)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LABEL=GIB (e.g. 'H100 80 GiB=80'), got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweeper.report <sweep_dir> [--device-mem LABEL=GIB ...] [--wandb MODE]``: write or update the
    sweep's W&B runs (:func:`sweeper.tracking.log_runs`; a W&B problem is printed, never fatal), rebuild the report;
    prints the path of report.md last.

    Returns 0 on success, 2 if the directory does not exist or has no ``points/`` folder, 1 if a record on disk
    cannot be read (the message names the file).
    """
    parser = argparse.ArgumentParser(prog="python -m sweeper.report", description=summary(__doc__))
    parser.add_argument("sweep_dir", type=Path, help="the sweep directory (the one that holds points/)")
    parser.add_argument(
        "--device-mem",
        type=device_mem,
        action="append",
        default=[],
        metavar="LABEL=GIB",
        help="draw a device-memory line, e.g. 'H100 80 GiB=80' (repeatable)",
    )
    parser.add_argument(
        "--wandb",
        choices=MODES,
        default=None,
        help="write/update the W&B runs in this mode (default: the mode the sweep ran with; docs/wandb.md)",
    )
    args = parser.parse_args(argv)
    sweep_dir: Path = args.sweep_dir
    sweep = SweepDir(sweep_dir)
    why = sweep.not_a_sweep()
    if why:
        print(f"sweeper.report: error: {why}", file=sys.stderr)
        return 2
    try:
        if _submitted(sweep):  # learn from SLURM how ended jobs ended before reporting
            from sweeper.launchers.slurm.accounting import reconcile

            reconcile(sweep)
        writer = RunsWriter.start(sweep, sweep_settings(sweep, args.wandb))  # meanwhile, the report
        path = build_report(sweep, args.device_mem, wandb_mode=writer.mode)
        tracking = writer.wait()
    except ValueError as e:
        print(f"sweeper.report: error: {e}", file=sys.stderr)
        return 1
    for line in tracking:
        print(line)
    print(path)
    return 0


def _submitted(sweep: SweepDir) -> bool:
    """Whether points of the sweep were submitted to SLURM; a ``submitted.json`` that cannot be read counts as none
    (the report is built from the records alone)."""
    try:
        return bool(sweep.submitted())
    except (OSError, ValueError):
        return False
