"""``python -m sweeper.wandb_report <sweep_dir>... [--publish]``: write the W&B comparison report of a sweep, or of
several sweeps (one run set each), as a specification (``wandb_report.json``), and with ``--publish`` save it to
W&B."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.report.md import one_line
from sweeper.results.atomic import write_text_atomic
from sweeper.results.sweepdir import WANDB_REPORT_FILE, SweepDir
from sweeper.tracking.settings import api_key_available
from sweeper.units import summary
from sweeper.wandb_report.spec import ReportPlan

PROG = "python -m sweeper.wandb_report"
INSTALL = "pip install 'sweeper[tracking]'"
#: The longest error message printed (characters).
MAX_MESSAGE = 400


def _error(message: str) -> None:
    print(f"sweeper.wandb_report: error: {_redact(one_line(message))[:MAX_MESSAGE]}", file=sys.stderr)


def _redact(text: str) -> str:
    """``text`` with the W&B API key of the environment (if any) replaced by ``***``."""
    key = os.environ.get("WANDB_API_KEY", "")
    return text.replace(key, "***") if len(key) >= 4 else text


def _write_spec(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` (its folder made if missing) atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return path


def _publish(plans: Sequence[ReportPlan]) -> str:
    """Save the report (one sweep's, or the comparison of several) to W&B; its URL. The entity is the (first)
    plan's, else the logged-in user's default."""
    os.environ.setdefault("WANDB_SILENT", "true")  # no "Saved report to" banner: the URL is printed once, by us
    import wandb

    from sweeper.wandb_report.spec import build_comparison, build_report

    entity = plans[0].entity or wandb.Api().default_entity
    if not entity:
        raise RuntimeError("the W&B login has no default entity; set sweep.json's wandb.entity")
    built = build_report(plans[0], entity=entity) if len(plans) == 1 else build_comparison(plans, entity=entity)
    return str(built.save().url)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweeper.wandb_report <sweep_dir> [--publish]``: write ``<sweep_dir>/wandb_report.json`` and
    print where it is and how to publish it; with ``--publish`` also save the report to W&B and print its URL.

    Returns 0 on success; 1 if a record cannot be read, the sweep id cannot be written as a W&B filter, or
    publishing fails (no login, network, permissions: one line says why; the spec file is still written); 2 if
    the directory does not exist, has no ``points/`` folder, or ``wandb-workspaces`` is not installed.
    """
    parser = argparse.ArgumentParser(prog=PROG, description=summary(__doc__))
    parser.add_argument(
        "sweep_dir",
        nargs="+",
        help="the sweep directory (the one that holds points/); several (or a quoted glob): one report comparing "
        "them, one run set per sweep, the first the baseline",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="with several sweeps: the folder of wandb_report.json (default: ./compare-<sweep ids>, beside the "
        "offline comparison page of python -m sweeper.report)",
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also save the report to W&B (needs WANDB_API_KEY or `wandb login`; sync the runs first)",
    )
    args = parser.parse_args(argv)
    from sweeper.report.cli import sweep_dirs

    dirs = sweep_dirs(args.sweep_dir)
    if len(dirs) == 1 and args.out is not None:
        parser.error("--out is for a comparison of several sweeps: give two or more sweep directories")
    sweeps = [SweepDir(d) for d in dirs]
    for sweep in sweeps:
        why = sweep.not_a_sweep()
        if why:
            _error(why)
            return 2
    try:
        import wandb_workspaces.reports.v2  # noqa: F401
    except ImportError as e:
        _error(f"wandb-workspaces is not installed ({e}); install the tracking extra: {INSTALL}")
        return 2

    from sweeper.wandb_report.spec import (
        build_comparison,
        build_report,
        comparison_document,
        plan_report,
        spec_document,
    )

    try:
        plans = [plan_report(s) for s in sweeps]
        if len({p.sweep_id for p in plans}) != len(plans):
            raise ValueError("a sweep is given twice")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if len(plans) == 1:
                doc = spec_document(plans[0], build_report(plans[0]), sweeps[0])
            else:
                doc = comparison_document(plans, build_comparison(plans), dirs)
        folder = args.out or Path(f"compare-{'-'.join(p.sweep_id for p in plans)}")
        path = _write_spec(sweeps[0].wandb_report_file if len(plans) == 1 else folder / WANDB_REPORT_FILE, doc)
    except (ValueError, OSError) as e:
        _error(str(e))
        return 1
    print(f"W&B report specification: {path}")
    if not args.publish:
        print("Not published (offline). Once online and logged in to W&B (WANDB_API_KEY or `wandb login`), run:")
        for command in doc["publish"]["commands"]:
            print(f"  {command}")
        return 0
    if not api_key_available():
        _error("not logged in to W&B: set WANDB_API_KEY or run `wandb login`, then run this again with --publish")
        return 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            url = _publish(plans)
    except Exception as e:  # noqa: BLE001 -- network, auth and API errors of wandb: one line, never a traceback
        _error(f"publishing the report failed: {type(e).__name__}: {e}")
        return 1
    doc["publish"] |= {"status": "published", "url": url}
    try:
        _write_spec(path, doc)
    except OSError as e:
        _error(f"the report is published ({url}) but {WANDB_REPORT_FILE} could not be updated: {e}")
        return 1
    print(f"W&B report: {url}")
    return 0
