"""What ``python -m sweeper.plan`` does once Hydra has composed its points: expand the default planning grid
(:mod:`sweeper.plan.points`), gate and predict every point (:mod:`sweeper.plan.rows`), write ``plan.csv``, ``plan.md``
and ``plan.png`` into the output directory, and print the table.

Two entries, one per Hydra mode: :func:`plan_run` (a single run: the composed config, crossed with the default
grid) and :func:`plan_multirun` (``-m``: every point of the sweep, from ``hydra_plugins.sweeper_plan``). Nothing is
launched and nothing here imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from sweeper.config.schema import ClusterConfig
from sweeper.config.spec import shell_command
from sweeper.point.context import SweepContext

#: File names in the output directory.
CSV, MARKDOWN, PNG = "plan.csv", "plan.md", "plan.png"
#: Exit status when the command line lacks a value the plan needs (like the main app's refusal before launch).
EXIT_USAGE = 2
#: Keys every plan needs from the command line (or a named grid's ``hydra.sweeper.params``); the inverse question
#: (``plan.deadline_days``) needs no ``cluster``: it answers over the catalogue.
REQUIRED = ("model", "cluster", "seq_len")
DEADLINE = "plan.deadline_days"


def plan_run(cfg: DictConfig, overrides: Sequence[str], out_dir: Path) -> pd.DataFrame:
    """Plan one composed config crossed with the default grid on the keys ``overrides`` do not name.

    Returns:
        The plan's rows (also written to ``out_dir``).
    """
    from sweeper.plan.points import expand, named_keys

    named = named_keys(overrides)
    if cfg.plan.deadline_days is not None:
        return answer_deadline([cfg], named, out_dir)
    return make_plan(expand([with_calibration_settings(cfg, named)], named), out_dir)


def plan_multirun(
    config_loader: Any, master_config: DictConfig, points: Sequence[Sequence[str]], named: set[str]
) -> pd.DataFrame:
    """Plan every point of a multirun (``points``: one override list per point, as Hydra's basic sweeper expands
    them), each crossed with the default grid on the keys not ``named``; files go to ``hydra.sweep.dir``.

    Raises:
        hydra.errors.ConfigCompositionException: a point that does not compose.
    """
    from sweeper.config.compose import compose_points
    from sweeper.plan.points import expand

    configs = compose_points(config_loader, master_config, points)
    out_dir = SweepContext.of(master_config).sweep.path
    if any(c.plan.deadline_days is not None for c in configs):
        return answer_deadline(configs, named, out_dir)
    return make_plan(expand([with_calibration_settings(c, named) for c in configs], named), out_dir)


class RequireCallback(Callback):
    """Hydra callback (``conf/plan.yaml``): before Hydra makes any directory, :func:`require` the keys a plan
    needs from the command line (a multirun: or from ``hydra.sweeper.params``, as a named grid gives them), and
    refuse an output folder that cannot be made (exit 2,
    :meth:`~sweeper.point.context.SweepContext.refuse_unusable_folder`)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from sweeper.plan.points import named_keys

        ctx = SweepContext.of(config)
        require(named_keys(list(ctx.overrides)))
        require_calibration(config)
        ctx.refuse_unusable_folder()  # makes the folder: last

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from sweeper.plan.points import named_keys

        ctx = SweepContext.of(config)
        params = config.hydra.sweeper.get("params") or {}
        require(named_keys(list(ctx.overrides)) | set(params))
        require_calibration(config)
        ctx.refuse_unusable_folder()  # makes the folder: last


def require_calibration(config: DictConfig) -> None:
    """Exit with :data:`EXIT_USAGE` and the reason when ``plan.calibrate`` names a directory that is not a measured
    sweep with an ``ok`` point to calibrate on (:func:`sweeper.capacity.calibrate.load_calibration`), before any
    directory is made."""
    where = (config.get("plan") or {}).get("calibrate")
    if not where:
        return
    from sweeper.capacity.calibrate import calibration_mismatch, load_calibration

    try:
        cal = load_calibration(str(where))
    except (ValueError, OSError) as e:
        print(f"sweeper.plan: {e}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    if config.plan.get("calibrate_across"):
        return
    from sweeper.plan.points import named_keys
    from sweeper.redact import task_overrides

    device, gpu, precisions = plan_hardware(config)
    params = (config.get("hydra") or {}).get("sweeper", {}).get("params") or {}
    named = named_keys(task_overrides(config.hydra)) | set(params) if "hydra" in config else set()
    taken = calibration_settings(config, named)
    if "precision" in taken:
        precisions = {str(taken["precision"])}  # what the plan will take from the sweep (with_calibration_settings)
    why = calibration_mismatch(cal, device, gpu, precisions)
    if why:
        print(
            f"sweeper.plan: plan.calibrate={where} does not describe this plan: {why}, and an efficiency measured "
            "there is not this hardware's. Calibrate on a sweep measured on the plan's cluster and precision "
            "(python -m sweeper -m launcher=slurm cluster=<name> precision=<p> ...), leave plan.calibrate out (the "
            "plan then uses plan.efficiency), or apply it anyway with plan.calibrate_across=true (the answer line "
            "says so)",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)


#: The point settings a plan takes from its calibrating sweep (``plan.calibrate``) when the command line does not
#: name them, every ``ok`` point of the sweep has one value for them, and the sweep ran on the plan's kind of device:
#: the plan then predicts what was measured (the docs' calibration example planned bf16 on 0 ranks per node, the
#: plan's defaults for a GPU cluster, from a CPU sweep of fp32 on 2 ranks).
CALIBRATION_SETTINGS = ("precision", "model_dtype", "ranks_per_node", "nodes", "per_device_batch_size", "grad_accum")


def calibration_settings(config: DictConfig, named: set[str]) -> dict[str, Any]:
    """``{key: value}`` of :data:`CALIBRATION_SETTINGS` that ``config``'s plan takes from ``plan.calibrate``'s sweep
    (module rule above); ``{}`` without a calibration, across device kinds, or when every key is ``named``."""
    where = (config.get("plan") or {}).get("calibrate")
    if not where:
        return {}
    from sweeper.capacity.calibrate import load_calibration
    from sweeper.results.collect import collect_records
    from sweeper.results.sweepdir import SweepDir

    device, _, _ = plan_hardware(config)
    if (load_calibration(str(where)).device_type or "cpu") != device:
        return {}
    specs = [r.spec for r in collect_records(SweepDir.of(Path(str(where)).expanduser())) if r.status == "ok" and r.spec]
    taken = {}
    for key in CALIBRATION_SETTINGS:
        values = {str(spec.get(key)) for spec in specs}
        if key not in named and len(values) == 1 and specs[0].get(key) is not None:
            taken[key] = specs[0][key]
    return taken


def with_calibration_settings(config: DictConfig, named: set[str]) -> DictConfig:
    """``config`` with :func:`calibration_settings` set (a copy; said on the terminal), else ``config`` itself."""
    from omegaconf import OmegaConf

    taken = calibration_settings(config, named)
    if not taken:
        return config
    out = config.copy()
    for key, value in taken.items():
        OmegaConf.update(out, key, value, merge=False)
    shown = " ".join(f"{k}={v}" for k, v in taken.items())
    print(f"From plan.calibrate={config.plan.calibrate} (not named on the command line): {shown}", flush=True)
    return out


def plan_hardware(config: DictConfig) -> tuple[str, str | None, set[str]]:
    """``(device type, gpu name, precisions)`` a plan of ``config`` predicts for: a plan is gated as a SLURM sweep
    on its cluster (``cuda`` when it has GPUs per node), in the precisions of its base point and of a multirun's
    ``precision=`` values (command line and ``hydra.sweeper.params``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from sweeper.redact import task_overrides

    cluster = config.get("cluster") or {}
    device = "cuda" if cluster.get("gpus_per_node") else "cpu"
    precisions = {str(config.get("precision"))}
    params = (config.get("hydra") or {}).get("sweeper", {}).get("params") or {}
    args = [*task_overrides(config.hydra), *(f"{k}={v}" for k, v in params.items())] if "hydra" in config else []
    for override in OverridesParser.create().parse_overrides([a for a in args if a.startswith("precision=")]):
        if override.is_sweep_override():
            precisions = {str(v) for v in override.sweep_string_iterator()}
        else:
            precisions = {str(override.value())}
    return device, cluster.get("gpu_name"), precisions


def require(named: set[str]) -> None:
    """Exit with :data:`EXIT_USAGE` and a message naming what is missing when ``named`` (the keys the command line
    gives) lacks one of :data:`REQUIRED` (``conf/plan.yaml`` cannot make them mandatory: its defaults, the schema's,
    would fill them in)."""
    missing = [k for k in REQUIRED if k not in named and not (k == "cluster" and DEADLINE in named)]
    if not missing:
        return
    from sweeper.paths import conf_dir

    lines = [f"sweeper.plan: give {', '.join(f'{k}=' for k in missing)} on the command line"]
    for group in ("model", "cluster"):
        if group in missing:
            names = sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))
            lines.append(f"  {group}=<one of: {', '.join(names)}>")
    if "seq_len" in missing:
        lines.append("  seq_len=<tokens per sample>")
    lines.append("  e.g. python -m sweeper.plan model=llama-2-7b cluster=h100-80gb seq_len=4096")
    print("\n".join(lines), file=sys.stderr)
    sys.exit(EXIT_USAGE)


def make_plan(configs: Sequence[DictConfig], out_dir: Path) -> pd.DataFrame:
    """Gate and predict every config, write the files into ``out_dir`` (created) and print the plan.

    Returns:
        The plan's rows (:func:`sweeper.plan.rows.plan_frame`).
    """
    from sweeper.plan.plot import plot_png
    from sweeper.plan.points import plan_points
    from sweeper.plan.rows import plan_frame
    from sweeper.plan.table import header_lines, markdown, print_plan

    points = plan_points(configs)
    df = plan_frame(points)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [str(out_dir / name) for name in (MARKDOWN, CSV, PNG)]
    df.to_csv(out_dir / CSV, index=False)
    header = header_lines(points, df)
    title = _title(df)
    command = shell_command(sys.argv[1:], "python -m sweeper.plan")
    (out_dir / MARKDOWN).write_text(markdown(title, command, header, df, files), encoding="utf-8")
    plot_png(df, _devices(points), out_dir / PNG)
    print_plan(title, header, df, files)
    return df


def answer_deadline(configs: Sequence[DictConfig], named: set[str], out_dir: Path) -> pd.DataFrame:
    """The inverse question (:mod:`sweeper.plan.deadline`) for ``configs``: answer it, write ``deadline.csv``,
    ``deadline.md`` and ``plan.csv`` into ``out_dir`` and print the answer.

    Returns:
        The answers, one row per cluster, best first.

    Raises:
        SystemExit: :data:`EXIT_USAGE` when the question is ill-posed (``plan.deadline_days`` or ``train_tokens``
            not positive, ``plan.max_nodes`` below 1), with a message, before anything is written.
    """
    from sweeper.plan import deadline, deadline_report

    try:
        q = deadline.question(configs[0], named)
    except ValueError as e:
        print(f"sweeper.plan: {e}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    answers, rows = deadline.answer(deadline.on_clusters(configs, named), named, q)
    first = configs[0]
    title = f"Deadline plan: {first.model.name}, {q.train_tokens:.3g} tokens within {q.deadline_days:g} days"
    efficiencies = [float(c.plan.efficiency) for c in configs]
    lines = deadline_report.question_lines(q, str(first.model.name), int(first.seq_len), efficiencies)
    command = shell_command(sys.argv[1:], "python -m sweeper.plan")
    files = deadline_report.write(Path(out_dir), title, command, lines, answers, rows)
    deadline_report.print_answer(title, lines, answers, files)
    return answers


def _title(df: pd.DataFrame) -> str:
    models = ", ".join(dict.fromkeys(df["model"].astype(str)))
    clusters = ", ".join(dict.fromkeys(df["cluster"].astype(str)))
    return f"Capacity plan: {models} on {clusters}"


def _devices(points: Sequence[tuple[Any, ClusterConfig]]) -> list[tuple[str, float]]:
    """(label, GiB) of each cluster's device memory for the plot: torch's GiB and the vendor's label."""
    out = {}
    for _, c in points:
        gib = c.gpu_mem_gib
        if gib:
            vendor = f', sold as "{c.gpu_mem_vendor_gb:g} GB"' if c.gpu_mem_vendor_gb else ""
            out[(c.name, gib)] = (f"{c.name}: {gib:g} GiB{vendor}", float(gib))
    return list(out.values())
