"""``python -m sweeper.report <sweep_dir>``: rebuild the report of a sweep directory (SLURM jobs that ended
without a record are recorded first); ``python -m sweeper.report <sweep_dir> <sweep_dir>...``: compare sweeps."""

from __future__ import annotations

import argparse
import glob
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
    parser = argparse.ArgumentParser(
        prog="python -m sweeper.report",
        description=summary(__doc__),
        epilog=f"exit status: 0 written; {REGRESSION_EXIT} a regression with --fail-on-regression; 2 not a sweep "
        "directory (or one given twice); 1 a record cannot be read. docs/report.md, docs/compare.md",
    )
    parser.add_argument(
        "sweep_dir",
        nargs="+",
        help="the sweep directory (the one that holds points/); several (or a quoted glob): compare them, the "
        "first as the baseline (docs/compare.md)",
    )
    parser.add_argument(
        "--device-mem",
        type=device_mem,
        action="append",
        default=[],
        metavar="LABEL=GIB",
        help="one sweep: draw a device-memory line, e.g. 'H100 80 GiB=80' (repeatable)",
    )
    parser.add_argument(
        "--wandb",
        choices=MODES,
        default=None,
        help="one sweep: write/update the W&B runs in this mode (default: the mode the sweep ran with; docs/wandb.md)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="with several sweeps: the folder of the comparison page (default: ./compare-<sweep ids>)",
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=f"with several sweeps: exit {REGRESSION_EXIT} when a like-for-like sweep has a regression "
        "(slower or more memory beyond the noise, stopped fitting, newly failing)",
    )
    parser.add_argument(
        "--min-change",
        type=float,
        default=None,
        metavar="FRACTION",
        help="with several sweeps: the smallest tokens/s change called a change even when the intervals do not "
        "overlap (default 0.05: the drift between two runs on one machine, which no interval sees)",
    )
    args = parser.parse_args(argv)
    dirs = sweep_dirs(args.sweep_dir)
    if len(dirs) != 1:
        if args.wandb:
            parser.error("--wandb writes one sweep's runs: give one sweep directory")
        if args.min_change is not None and not 0 <= args.min_change < 1:
            parser.error(f"--min-change {args.min_change}: expected a fraction from 0 to 1 (0.05 is 5 %)")
        return compare_main(dirs, args.out, args.fail_on_regression, args.device_mem, args.min_change)
    if args.out is not None or args.fail_on_regression or args.min_change is not None:
        parser.error(
            "--out, --fail-on-regression and --min-change compare several sweeps: give two or more sweep directories"
        )
    sweep_dir = dirs[0]
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


#: The exit status of ``--fail-on-regression`` when there is a regression.
REGRESSION_EXIT = 4


def sweep_dirs(args: Sequence[str]) -> list[Path]:
    """The sweep directories named by ``args``, in order: a path as given, or a glob pattern (``*``, ``?``, ``[``)
    that names no existing path, expanded and sorted (a pattern that matches nothing stays as given, so that its
    error names it)."""
    out: list[Path] = []
    for a in args:
        matches = sorted(glob.glob(a)) if glob.has_magic(a) and not Path(a).exists() else []
        out += [Path(m) for m in matches] or [Path(a)]
    return out


def compare_main(dirs: Sequence[Path], out: Path | None, fail_on_regression: bool,
                 device_mem: Sequence[tuple[str, float]] = (), min_change: float | None = None) -> int:  # fmt: skip
    """Compare several sweeps (:mod:`sweeper.report.compare`) and write the page (:mod:`sweeper.report.compare_page`)
    into ``out`` (default ``./compare-<sweep ids>``); prints the headline, then the page's path last.

    Returns 0; :data:`REGRESSION_EXIT` with ``fail_on_regression`` when a like-for-like sweep has a regression; 2
    when a directory is not a sweep or one is given twice; 1 when a record on disk cannot be read.
    """
    from sweeper.report.compare import MIN_CHANGE, Side, compare_all
    from sweeper.report.compare_page import headline, write_comparison

    if device_mem:
        print("sweeper.report: note: --device-mem is drawn in single-sweep reports only", file=sys.stderr)
    sides = []
    for d in dirs:
        why = SweepDir(d).not_a_sweep()
        if why:
            print(f"sweeper.report: error: {why}", file=sys.stderr)
            return 2
        try:
            sides.append(Side.load(d))
        except ValueError as e:
            print(f"sweeper.report: error: {e}", file=sys.stderr)
            return 1
    try:
        comparisons = compare_all(sides, MIN_CHANGE if min_change is None else min_change)
    except ValueError as e:
        print(f"sweeper.report: error: {e}", file=sys.stderr)
        return 2
    folder = out or Path(f"compare-{'-'.join(s.sweep_id for s in sides)}")
    path = write_comparison(sides, comparisons, folder, MIN_CHANGE if min_change is None else min_change)
    for line in headline(comparisons, markdown=False):
        print(line)
    print(path)
    regressions = sum(len(c.regressions) for c in comparisons)
    return REGRESSION_EXIT if fail_on_regression and regressions else 0


def _submitted(sweep: SweepDir) -> bool:
    """Whether points of the sweep were submitted to SLURM; a ``submitted.json`` that cannot be read counts as none
    (the report is built from the records alone)."""
    try:
        return bool(sweep.submitted())
    except (OSError, ValueError):
        return False
