"""``python -m sweeper [-m] key=value ...``: run one grid point, or a grid with ``-m`` (Hydra multirun).

Each point goes through :mod:`sweeper.point.lifecycle` (identity, gate, ranks, record); its record lands in the
sweep directory. While a point runs, :func:`sweeper.launchers.progress.announce` shows its window and step (a live
line on a terminal, plain lines in a log) and the sweep's ETA; its position and the total are Hydra's ``job.num``
and ``n_points`` of ``sweep.json``. When the run ends the report is built and its path printed as the last line.

Exit status (``docs/failures.md``):

- a single point: 0 when it is ``ok``; 1 for any other final status (oom, error, timeout, host_oom, ...);
  2 when it is refused before launch (invalid or unsupported: no directory is made, no rank starts);
- a grid (``-m``): 0 when every point has a record and the report is written, whatever the points' statuses;
  2 when the whole grid is refused before launch (an unknown key, with the nearest known ones; a ``model=`` that
  names no model file, config.json or cached hub id; ``launcher=slurm`` without a cluster or without SLURM here;
  a ``SWEEPER_RANK_START`` other than ``auto``, ``fork``, ``exec``);
  Hydra's 1 for a misspelt value it refuses for the whole grid;
- 3, a grid or a single point, when the sweep is incomplete: a point could not be recorded or the report could not
  be written (a full disk: the point's line says ``not recorded: no space left on device in <dir>``, the grid goes
  on); free space, then resume with ``hydra.sweep.dir=<sweep dir>``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sweeper.config.schema import register_configs
from sweeper.paths import conf_dir
from sweeper.point.context import SweepContext
from sweeper.redact import redact_command_line
from sweeper.results.atomic import write_error_text
from sweeper.results.incomplete import incomplete
from sweeper.results.opening import register_resolver

register_configs()
register_resolver()

#: The status of the last single point this process ran (its exit code is derived from it).
_single_status: list[str] = []


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra task function: one grid point. Returns the point's status."""
    from sweeper.config.spec import from_config
    from sweeper.launchers.local import run_point
    from sweeper.launchers.progress import announce, finished
    from sweeper.point.lifecycle import internal_error, not_recorded
    from sweeper.results.atomic import is_disk_full
    from sweeper.results.record import RecordNotWritten

    hc = HydraConfig.get()
    ctx = SweepContext.of(cfg, hc)
    multirun, sweep = ctx.multirun, ctx.sweep
    overrides = list(ctx.overrides)  # unresolved: a secret stays its reference
    spec = from_config(cfg)  # a single refused point was already stopped by ReportCallback.on_run_start
    info = sweep.info()
    index = hc.job.num if multirun else 0
    # the jobs of a grid are its points; search=frontier launches a point twice when it promotes a screen, and skips
    # others, so its job count is not known ahead: the jobs are numbered without a total (and no ETA)
    total = info.get("n_points") if spec.search.name != "frontier" else None
    cluster = None
    point = None
    try:
        with announce(index, total, overrides) as point:
            cluster = ctx.cluster
            record = run_point(spec, overrides, sweep, frozenset(ctx.launcher.rerun_statuses), cluster=cluster)
    except Exception as e:  # noqa: BLE001 - a point never ends the grid, not even through a bug of sweeper's own
        # a full disk: not a bug, and nothing to write to (a RecordNotWritten is an OSError)
        if isinstance(e, OSError) and (isinstance(e, RecordNotWritten) or is_disk_full(e)):
            record = not_recorded(spec, overrides, sweep, e)
            incomplete.append(f"{' '.join(overrides) or '(defaults)'}: {record.reason}")
        else:
            record = internal_error(spec, overrides, sweep, e, cluster=cluster)
    # the time of the point's progress lines (the record's wall_time_s starts later, at its ranks' launch)
    finished(index, total, overrides, record, elapsed_s=point.elapsed_s() if point is not None else None)
    if not multirun:
        _single_status.append(record.status)
    return record.status


def _tolerate_hydra_config_copies() -> None:
    """Hydra copies each job's config to ``<sweep dir>/hydra/<n>/.hydra/*.yaml`` before the task function runs; on a
    full disk that copy would end the whole grid with a traceback. It is for people (sweeper reads ``spec.json`` and
    ``sweep.json``), so a copy the filesystem refuses is removed (no half-written file) and said in one line on
    stderr; the point itself then says whether it was recorded. Wraps ``hydra.core.utils._save_config`` (the one
    writer of these copies in Hydra 1.3), once per process."""
    import hydra.core.utils as hydra_utils

    save = getattr(hydra_utils, "_save_config", None)
    if save is None or getattr(save, "sweeper_tolerant", False):
        return  # another Hydra: its copies stay as they are
    told: set[str] = set()

    def tolerant_save(cfg: object, filename: str, output_dir: Path) -> None:
        try:
            save(cfg, filename, output_dir)
        except OSError as e:
            try:
                (Path(output_dir) / filename).unlink(missing_ok=True)
            except OSError:
                pass
            if str(output_dir) not in told:  # one line per job, not one per file
                told.add(str(output_dir))
                e.filename = e.filename or str(Path(output_dir) / filename)
                print(f"sweeper: Hydra's copy of the job config not written: {write_error_text(e)}", file=sys.stderr)

    tolerant_save.sweeper_tolerant = True  # type: ignore[attr-defined]
    hydra_utils._save_config = tolerant_save


#: Hydra's flags that print something and run no point (``python -m sweeper --help``): no pre-flight worker then.
_NO_RUN_FLAGS = frozenset(
    {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion"}
)


def _runs_points(argv: list[str]) -> bool:
    """Whether this command line runs or submits points (not one of :data:`_NO_RUN_FLAGS`, in either spelling
    Hydra's argparse takes: ``--cfg job`` or ``--cfg=job``)."""
    return not any(arg.split("=", 1)[0] in _NO_RUN_FLAGS for arg in argv)


def cli() -> None:
    """Entry point of ``python -m sweeper`` and the ``sweeper`` script: runs :func:`main`, then exits with the
    status described in the module doc (3 and one line per cause on stderr when the sweep is incomplete)."""
    redact_command_line()  # before Hydra sees argv: a secret is a reference from here on (sweeper.redact)
    from sweeper.config.model_files import refuse_unknown_models

    sys.argv[1:] = refuse_unknown_models(sys.argv[1:], "sweeper")  # model=<config.json | folder | hub id>
    if _runs_points(sys.argv[1:]):
        from sweeper.config.keys import refuse_unknown_keys
        from sweeper.point import preflight

        refuse_unknown_keys(sys.argv[1:], "python -m sweeper")  # gcc=true, +gcc=true: exit 2, nearest keys

        # the pre-flight's worker imports torch and transformers (~3 s) while Hydra starts and composes the grid:
        # every point waits for its answer before it runs or is submitted (a 1,000-point submission's floor)
        preflight.warm_up()
    _tolerate_hydra_config_copies()
    main()
    code = 0
    if incomplete:
        print(f"sweeper: incomplete ({len(incomplete)} problem(s)); exit status 3:", file=sys.stderr)
        for line in incomplete:
            print(f"  {line}", file=sys.stderr)
        code = 3
    elif _single_status and _single_status[-1] != "ok":
        code = 1
    # Everything is written (records, report, W&B runs waited for): skip the interpreter's teardown of pandas,
    # matplotlib, plotly and Hydra (about 0.85 s of a lone point's wall time, benchmarks/harness_overhead.py).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
