"""Hydra callbacks: open the sweep directory before the first job, build the report after the last.

Registered in ``conf/config.yaml`` under ``hydra.callbacks``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from sweeper.config.compose import plain_node
from sweeper.point.context import SweepContext
from sweeper.redact import task_overrides
from sweeper.results.atomic import write_error_text
from sweeper.results.incomplete import incomplete
from sweeper.results.sweepdir import SweepDir


def grid_size(config: DictConfig) -> int | None:
    """Number of points Hydra's basic sweeper will launch (CLI sweep overrides x ``hydra.sweeper.params``), or
    None when it cannot be computed (another sweeper plugin)."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = config.hydra.sweeper.get("params")
        params = plain_node(params, resolve=False) if params else {}
        args = [f"{k}={v}" for k, v in params.items()] + task_overrides(config.hydra)
        parsed = OverridesParser.create().parse_overrides(args)
        return sum(len(b) for b in BasicSweeper.split_arguments(parsed, None))
    except Exception:  # noqa: BLE001 - progress display only
        return None


def refuse_bad_wandb_target(ctx: SweepContext) -> None:
    """Exit 2 with one line when ``wandb.project`` or ``wandb.entity`` cannot name a W&B project
    (:func:`sweeper.tracking.settings.target_problem`): before any point runs, instead of every run failing after
    the sweep trained."""
    from sweeper.tracking.settings import target_problem

    why = target_problem(ctx.wandb.project, ctx.wandb.entity) if ctx.wandb is not None else None
    if why:
        print(f"sweeper: {why}; fix it (wandb.project=<name>, wandb.entity=<team>) or leave it out", file=sys.stderr)
        sys.exit(2)


def refuse_unusable_launcher(ctx: SweepContext) -> None:
    """Exit 2 with one line, before the sweep directory is made, when ``launcher=slurm`` cannot submit from here:
    no cluster section (``cluster=local``, the default), or no SLURM client on this machine (``sbatch`` and ``srun``
    are what submitit runs; without them it raised ``Could not detect "srun"`` after the sweep folder existed)."""
    import shutil

    if ctx.launcher.name != "slurm":
        return
    why = None
    if ctx.cluster.name in (None, "local"):
        why = (
            "launcher=slurm needs the cluster it submits to: add cluster=<name> (a file of conf/cluster/; cluster=dev "
            "is the development cluster of slurm/), or leave launcher=slurm out to run the points here"
        )
    else:
        missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
        if missing:
            why = (
                f"launcher=slurm cluster={ctx.cluster.name}: {' and '.join(missing)} not found on PATH, so this "
                "machine cannot submit SLURM jobs; run the same command on a login node of the cluster (or put "
                "SLURM's bin folder on PATH), or leave launcher=slurm out to run the points here"
            )
    if why:
        print(f"sweeper: invalid sweep (launcher): {why}; nothing ran", file=sys.stderr)
        sys.exit(2)


def refuse_bad_rank_start() -> None:
    """A ``SWEEPER_RANK_START`` that is none of ``auto``, ``fork``, ``exec`` stops the sweep before any point (exit 2),
    rather than failing every point at its launch."""
    from sweeper.launchers.torchrun import asked_rank_start

    try:
        asked_rank_start()
    except ValueError as e:
        print(f"sweeper: {e} (docs/measurement.md, How the ranks start)", file=sys.stderr)
        sys.exit(2)


def refuse_single_cluster_point(launcher: str) -> None:
    """Exit 2 for a cluster launcher without ``-m``: Hydra runs a single run's task in this process, so the point
    would train here, on the submit host, under the cluster's label (docs/cases.md#u02). The message gives the
    command that submits it: the same command line with ``-m`` (a sweep of one)."""
    from sweeper.config.spec import shell_command

    argv = [a for a in sys.argv[1:] if a not in ("-m", "--multirun")]
    print(
        f"sweeper: invalid point (launcher): launcher={launcher} submits points as jobs only in a sweep; without -m "
        "the point would run here, not on the cluster, so nothing ran. Submit it as a sweep of one: "
        f"{shell_command(['-m', *argv], 'python -m sweeper')}",
        file=sys.stderr,
    )
    sys.exit(2)


class ReportCallback(Callback):
    """Opens ``sweep.json`` at the start; writes results.csv/parquet, report.md/html and frontier.png at the end,
    prints capacity planning's summary and then the report's path as the last line."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        ctx = SweepContext.of(config)
        ctx.refuse_unusable_folder()
        refuse_bad_wandb_target(ctx)
        refuse_unusable_launcher(ctx)
        refuse_bad_rank_start()
        try:
            ctx.open(grid_size(config))
        except OSError as e:  # a full disk: say where, once; every point then says whether it was recorded
            print(f"sweeper: sweep.json not written: {write_error_text(e)}", file=sys.stderr, flush=True)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single point: the gate and the pre-flight run before Hydra creates any directory; a refusal (invalid,
        unsupported, or pruned with ``prune=true``) exits 2, no rank starts."""
        from sweeper.config.spec import from_config
        from sweeper.point import preflight
        from sweeper.point.gate import InvalidPoint, check
        from sweeper.point.lifecycle import target_for

        ctx = SweepContext.of(config)
        refuse_bad_wandb_target(ctx)
        refuse_bad_rank_start()
        spec = from_config(config)
        launcher = ctx.launcher.name
        target = target_for(spec, launcher, ctx.cluster)
        try:
            check(spec, target)
            if launcher != "local":  # after the gate: a refusal naming the point's own keys comes first
                refuse_single_cluster_point(launcher)
            refused = preflight.refusal(spec, target)
            if refused is not None:
                raise refused
        except InvalidPoint as e:
            print(f"sweeper: {e.status} point ({', '.join(e.keys)}): {e}", file=sys.stderr)
            sys.exit(2)
        ctx.refuse_unusable_folder()
        ctx.open(1)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _report(SweepContext.of(config).sweep.path)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        _report(SweepContext.of(config).sweep.path)


def _report(sweep_dir: Path) -> None:
    """Start writing the W&B runs (:class:`sweeper.tracking.RunsWriter`: a child process, never fails), build the
    report meanwhile, print capacity planning's summary (the model's error over the sweep, the calibrated
    efficiency, pruned points), the W&B lines (plain text), then the report's path as the last line. A report the
    filesystem refuses (a full disk) is one line on stderr naming the folder, added to :data:`incomplete`; no
    ``Report:`` line then."""
    from sweeper.report import build_report
    from sweeper.report.build import collect
    from sweeper.report.predicted import summary_lines
    from sweeper.tracking import RunsWriter, sweep_settings

    sweep = SweepDir(sweep_dir)
    writer: RunsWriter | None = None
    try:
        writer = RunsWriter.start(sweep, sweep_settings(sweep))
    except Exception as e:  # noqa: BLE001 - W&B never fails a sweep
        tracking = [f"W&B: not written: {type(e).__name__}: {e}"]
    collected = collect(sweep)  # read once: the report and the summary lines show the same records
    try:
        path: Path | None = build_report(sweep, wandb_mode=writer.mode if writer else None, collected=collected)
    except OSError as e:  # a full disk: one line naming the folder, no traceback; the exit status says incomplete
        path = None
        why = (
            f"report not written: {write_error_text(e)} (free space, then resume with hydra.sweep.dir={sweep_dir}, "
            f"or rebuild it with python -m sweeper.report {sweep_dir})"
        )
        incomplete.append(why)
        print(f"sweeper: {why}", file=sys.stderr, flush=True)
    try:
        lines = summary_lines(collected.df, collected.records)
    except Exception as e:  # noqa: BLE001 - the summary is extra; the report's path must be printed
        lines = [f"(no prediction summary: {type(e).__name__}: {e})"]
    if writer is not None:
        tracking = writer.wait()
    for line in [*lines, *tracking]:
        print(line, flush=True)
    if path is not None:
        print(f"Report: {path}", flush=True)
