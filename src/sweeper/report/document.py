"""The report's content as a structure: a title and sections of blocks (:mod:`sweeper.report.blocks`), rendered
to Markdown and HTML by :mod:`sweeper.report.render`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from sweeper.redact import referenced_variables
from sweeper.report.axes import DERIVED, Grid, grid_of, grid_values
from sweeper.report.blocks import (
    PNG_MIN_OK,
    Block,
    Bullets,
    Code,
    Document,
    Fold,
    Para,
    Plot,
    Section,
    Table,
    interactive_plot,
)
from sweeper.report.fmt import cli, cli_overrides, mem_unit, text
from sweeper.report.headline import answer
from sweeper.report.md import code, escape, one_line, strong
from sweeper.report.notes import (
    contention_notes,
    measurement_notes,
    mem_kind_note,
    mem_kinds,
    method_notes,
    skipped_steps_notes,
    zero_loss_notes,
)
from sweeper.report.predicted import CPU_EFFICIENCY, has_predictions, prediction_blocks, uncalibrated_efficiency
from sweeper.report.tables import (
    FRONTIER_DEFINITION,
    FRONTIER_MARK,
    failure_details_table,
    failures_table,
    pending_table,
    prediction_table,
    pruned_table,
    results_details_table,
    results_table,
    shown_failures,
    shown_ok,
    shown_replays,
    skipped_table,
)
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.tracking.settings import WandbSettings

_ALL_ROWS = "`results.csv` / `results.parquet` (next to this file) hold all of them."


def build_document(
    sweep_dir: SweepDir | Path,
    records: Sequence[Record],
    df: pd.DataFrame,
    max_rows: int | None = None,
    grid: Grid | None = None,
    device_mem_gib: Sequence[tuple[str, float]] = (),
    wandb_mode: str | None = None,
) -> Document:
    """The report of a sweep, the answer first and the metadata last: the answer (fastest, least memory, fastest
    that fits each known device capacity, counts per status: :mod:`sweeper.report.headline`), results (plot, table,
    the points measured under CPU contention, details, notes), predicted vs measured (when capacity planning
    predicted anything: the model's error, the calibrated efficiency), pruned points (when any), failures (table,
    details), replay commands, how each number was measured, then the grid, the environment and the sweep's own
    record (``sweep.json``: command, start time).

    Args:
        sweep_dir: the sweep directory, or its path (for ``sweep.json`` and the sweep id,
            :attr:`SweepDir.sweep_id`).
        records: its records; ``df``: their table (:func:`sweeper.results.row.records_to_frame`).
        max_rows: the most rows each table (and the replay section) shows; None: all
            (see :func:`sweeper.report.tables.shown_ok`, ``shown_failures``, ``shown_replays``).
        grid: :func:`sweeper.report.axes.grid_of` of ``df`` when the caller already has it.
        device_mem_gib: device capacities as (label, GiB) pairs (``--device-mem``), for "the fastest that fits";
            none: the ``cluster.gpu_mem_gib`` capacity planning judged the points against, if any.
        wandb_mode: the mode the W&B runs are being written in now (``off``, ``offline``, ``online``), for the W&B
            section; None: the section describes what the last write left (``<sweep dir>/wandb/sweeper-runs.json``).
    """
    sweep = SweepDir.of(sweep_dir)
    info = sweep.info()
    grid = grid if grid is not None else grid_of(df)
    axes = grid.axes(df.columns)
    unit = mem_unit(df)
    sections = [
        Section("", [*_search(sweep, df), *[Para(p) for p in answer(df, axes, unit, device_mem_gib)]]),
        Section("Results", _results(df, axes, unit, max_rows)),
    ]
    numerics = _numerics(records, df, axes)
    if numerics:
        sections.append(Section("Numerics", numerics))
    if has_predictions(df):
        sections.append(Section("Predicted vs measured", _predicted(df, records, axes, unit, max_rows)))
    if len(df) and (df["status"] == "pruned").any():
        sections.append(Section("Pruned before launch", _pruned(df, axes)))
    if len(df) and (df["status"] == "skipped").any():
        sections.append(Section("Skipped by the search", _skipped(df, axes)))
    if len(df) and (df["status"] == "pending").any():
        sections.append(Section("Pending", _pending(df, sweep)))
    sections += [
        Section("Failures", _failures(df, axes, max_rows)),
        Section("Replay", _replays(records, df, max_rows)),
        *_wandb(sweep, wandb_mode, WandbSettings.from_dict(info.get("wandb")).project),
        Section("How each number was measured", [Bullets(method_notes(df, unit[0]))]),
        Section("Grid", _grid(grid, records)),
        Section("Environment", _environment(records)),
    ]
    if info:
        sections.append(Section("Sweep", [Bullets([f"{strong(k)}: {code(cli(v))}" for k, v in info.items()])]))
    return Document(title=f"Sweep {sweep.sweep_id}", sections=sections)


def _numerics(records: Sequence[Record], df: pd.DataFrame, axes: Sequence[str]) -> list[Block]:
    """The per-step loss comparison of the points that train the same numbers (:mod:`sweeper.report.numerics`):
    a sentence first (how many compared, which depart), then the table; nothing when no group has two points."""
    from sweeper.report.numerics import departure_frame, departures
    from sweeper.report.plot_data import labels

    found = departures(records)
    if not found:
        return []
    label_of = dict(zip(df["point_id"], labels(df, axes), strict=True))
    bad = [d for d in found if d.flagged]
    if bad:
        names = ", ".join(code(label_of.get(d.point_id, d.point_id)) for d in bad)
        head = (
            f"{strong(f'{len(bad)} of {len(found)} point(s) train other numerics')} than the point of the same model, "
            f"seed and global batch they are compared with, by more than their precision explains: {names}. Their "
            "label runs something else (a sharding, mesh or library difference): check them before comparing speed."
        )
    else:
        head = (
            f"Every one of the {len(found)} point(s) compared trains the same per-step losses as the point of the same "
            "model, seed and global batch (within what its precision explains)."
        )
    return [Para(head), Table(departure_frame(found, label_of))]


def _wandb(sweep: SweepDir, mode: str | None, project: str) -> list[Section]:
    """The W&B section (where the runs go, the sync command): from ``mode`` when the runs are being written now
    (:func:`sweeper.tracking.manifest.planned_lines`), else (``mode`` None or ``off``: nothing written now) from what
    the last write left; none without runs."""
    from sweeper.tracking.manifest import planned_lines, summary_lines

    lines = summary_lines(sweep) if mode in (None, "off") else planned_lines(sweep, mode, project)
    if not lines:
        return []
    bullets = [escape(line) for line in lines if not line.startswith("Sync")]
    bullets += [f"Sync them once online: {code(line.partition(': ')[2])}" for line in lines if line.startswith("Sync")]
    bullets.append(f"Comparison report: {code(f'python -m sweeper.wandb_report {shlex.quote(str(sweep.path))}')}")
    return [Section("W&B", [Bullets(bullets)])]


def _environment(records: Sequence[Record]) -> list[Block]:
    env_rec = next((r for r in records if r.env), None)
    if env_rec is None:
        return [Para("No environment recorded.")]
    return [
        Para(f"From point {code(env_rec.point_id)}."),
        Bullets([f"{strong(k)}: {escape(cli(v))}" for k, v in env_rec.env.items() if k != "jit_locks"]),
        *_jit_locks(records),  # per point, below
    ]


def _jit_locks(records: Sequence[Record]) -> list[Block]:
    """What the points' ranks found of DeepSpeed's JIT-build locks before building (``env["jit_locks"]``,
    :mod:`sweeper.job.jit_locks`): one bullet per lock and point, what was done and why; none when nothing was found."""
    found = [
        (r.point_id, f)
        for r in records
        for f in (r.env or {}).get("jit_locks") or []
        if isinstance(f, dict) and f.get("message")
    ]
    if not found:
        return []
    return [
        Para(f"{strong('DeepSpeed JIT-build locks')} found before a build (a build killed mid-way leaves one):"),
        Bullets([f"point {code(pid)}: {escape(str(f['message']))}" for pid, f in found]),
    ]


def _grid(grid: Grid, records: Sequence[Record]) -> list[Block]:
    blocks: list[Block] = []
    if grid.varying:
        blocks.append(Bullets([f"{strong(k)}: {grid_values(vs)}" for k, vs in grid.varying.items()]))
    given = given_keys(records)
    chosen = {k: v for k, v in grid.fixed.items() if _given(k, given)}
    defaults = {k: v for k, v in grid.fixed.items() if k not in chosen}
    if chosen:
        blocks.append(Para("Fixed on the command line: " + ", ".join(code(f"{k}={cli(v)}") for k, v in chosen.items())))
    derived = grid.derived.get(DERIVED, [])
    if len(derived) == 1:
        blocks.append(
            Para(
                f"Derived: {code(f'{DERIVED}={cli(derived[0])}')} for every point "
                "(see How each number was measured, above)."
            )
        )
    if defaults:  # last: report.md's fold is a heading, and what follows it would read as part of it
        listed = Para(", ".join(code(f"{k}={cli(v)}") for k, v in defaults.items()))
        blocks.append(Fold(f"The same for every point, from the defaults ({len(defaults):,} settings)", [listed]))
    return blocks or [Para("No point specs recorded.")]


def _results(df: pd.DataFrame, axes: list[str], unit: tuple[str, int], max_rows: int | None) -> list[Block]:
    ok_rows, n_ok = shown_ok(df, max_rows)
    blocks: list[Block] = [Plot(png=n_ok >= PNG_MIN_OK, interactive=interactive_plot(df))]
    table = results_table(ok_rows, axes, unit, predicted_values=False, errors=False)  # measurements only
    if not len(table):
        return [*blocks, Para("No point finished with status ok, so there is no frontier.")]
    blocks.append(Table(table))
    if len(table) < n_ok:
        blocks.append(
            Para(
                f"Showing {len(table):,} of {n_ok:,} ok points: every frontier point, then the fastest by "
                f"tokens/s per device. **{n_ok - len(table):,} rows left out**: {_ALL_ROWS}"
            )
        )
    blocks.append(
        Para(
            f"{FRONTIER_MARK} = on the Pareto frontier: {FRONTIER_DEFINITION}. {FRONTIER_MARK} tie = on the frontier "
            "and tied with another frontier point (same peak memory, overlapping step-time intervals): the "
            "measurement cannot tell them apart."
        )
    )
    blocks += [Para(n) for n in contention_notes(df, axes)]  # every contended ok point, shown in the table or not
    blocks += [Para(n) for n in zero_loss_notes(df, axes)]  # every ok point that trained on no signal
    blocks += [Para(n) for n in skipped_steps_notes(df, axes)]  # every ok point with skipped timed steps
    blocks += [Para(n) for n in measurement_notes(df, axes)]  # every ok point a harness fault left a number out of
    kinds = mem_kinds(df)
    blocks.append(Bullets([f"peak mem kind {code(k)}: {mem_kind_note(k)}" for k in kinds] or ["peak mem kind: —"]))
    blocks.append(Fold("More numbers of the ok points", [Table(results_details_table(ok_rows, unit))]))
    return blocks


def _predicted(
    df: pd.DataFrame, records: Sequence[Record], axes: list[str], unit: tuple[str, int], max_rows: int | None
) -> list[Block]:
    bullets, calibration, notes = prediction_blocks(df, records)
    blocks: list[Block] = [
        Para(
            "How far capacity planning's model (`python -m sweeper.plan`) was from each ok point: relative error = "
            "(predicted - measured) / measured, positive when the model over-predicts; peak memory compares the "
            "predicted peak tensor bytes per rank with the measured peak (also in `results.csv`: "
            "`peak_mem_rel_error`, `tokens_per_s_per_device_rel_error`)."
        ),
        Bullets(bullets),
    ]
    table = prediction_table(shown_ok(df, max_rows)[0], axes, unit)
    if len(table):
        blocks.append(Table(table))
    uncalibrated = uncalibrated_efficiency(df)
    if calibration and uncalibrated is not None:
        blocks.append(
            Para(
                f"The tokens/s predictions used {code(f'plan.efficiency={uncalibrated:g}')} with no "
                f"{code('plan.calibrate')}: the model's guess before any measurement on this host, so a large "
                "tokens/s error here is expected; the efficiency this sweep measured follows."
            )
        )
    if calibration:
        efficiency, command = calibration
        if command:
            blocks.append(Para(f"Calibrated on this sweep: {code(efficiency)}. To reuse it:"))
            blocks.append(Code(command))
        else:  # measured on CPUs: no command to run, the reason instead
            blocks.append(Para(f"Calibrated on this sweep: {code(efficiency)}; {CPU_EFFICIENCY}."))
    blocks += [Para(n) for n in notes]
    return blocks


def given_keys(records: Sequence[Record]) -> set[str]:
    """The keys every point's overrides set (``timed_steps=3``, ``+training_args.optim=sgd`` gives
    ``training_args.optim``): what the command line fixed for the whole grid, as opposed to the defaults."""
    sets = [{o.lstrip("+~").partition("=")[0] for o in r.overrides or []} for r in records if r.spec]
    return set.intersection(*sets) if sets else set()


def _given(column: str, given: set[str]) -> bool:
    """Whether the grid column ``column`` is, or is inside, or holds, a key in ``given``."""
    return any(column == k or column.startswith(k + ".") or k.startswith(column + ".") for k in given)


def _search(sweep: SweepDir, df: pd.DataFrame) -> list[Block]:
    """``search=frontier``: how much of the grid ran and what all of it would have cost by the model, first; and,
    when a later ``search=grid`` in the same directory measured points the search had skipped, how many (the
    search's figures are of the search)."""
    if not sweep.search_file.exists():
        return []  # before the imports: the search's modules bring Hydra (0.2 s) into every plain report
    from sweeper.search.decide import cost_line
    from sweeper.search.state import Log

    log = Log.read(sweep)
    stop = f" It stopped because {escape(log.stop)}." if log.stop else " It has not finished (resume it)."
    line = escape(cost_line(log.cost)) if log.cost else f"a grid of {log.grid:,} point(s), cost not known yet"
    skipped_now = int((df["status"] == "skipped").sum()) if "status" in df else 0
    later = int((log.cost or {}).get("skipped") or 0) - skipped_now
    since = (f" Since then, {later:,} of the points it skipped were run ({code('search=grid')} in this "
             "directory): the tables below show what they recorded." if later > 0 else "")  # fmt: skip
    return [Para(f"{strong('Frontier search')} ({code('search=frontier')}, docs/search.md): {line}.{stop}{since}")]


def _skipped(df: pd.DataFrame, axes: list[str]) -> list[Block]:
    table = skipped_table(df, axes)
    return [
        Para(
            f"{len(table):,} point(s) were not measured in full by {code('search=frontier')}: predicted not to fit "
            "or dominated by a measured point with the model's margins, screened with a short window and dominated, "
            f"or left when the search stopped. {_promise(df)}{code('search=grid')} with the same "
            f"{code('hydra.sweep.dir')} measures them."
        ),
        Table(table),
    ]


def _promise(df: pd.DataFrame) -> str:
    """What a skip promises (docs/search.md, "Limits"): each margin covers the model's error on one point with
    probability about ``search.coverage``, not every skip at once; a point left by ``search.patience`` has no
    bound at all. "" when the records do not say the coverage."""
    cov = pd.to_numeric(df.get("search.coverage", pd.Series(dtype=float)), errors="coerce").dropna()
    if cov.empty:
        return ""
    patience = pd.to_numeric(df.get("search.patience", pd.Series(dtype=float)), errors="coerce").dropna()
    left = (
        f" A point left when the search stopped ({code('search.patience')}) has no such bound." if len(patience) else ""
    )
    return (f"Each skip on a margin holds for its point with a probability of about {float(cov.max()) * 100:.0f} % "
            f"({code('search.coverage')}, the share of the model's errors on this sweep its margins cover), not "
            "for all of them at once: among many skipped points, one may now and then be on the frontier."
            f"{left} ")  # fmt: skip


def _pending(df: pd.DataFrame, sweep: SweepDir) -> list[Block]:
    table = pending_table(df)
    n = int((df["status"] == "pending").sum())
    where = shlex.quote(str(sweep.path))
    return [
        Para(
            f"{n:,} point(s) have no result yet, counted here by what is known of them. "
            f"{code(f'python -m sweeper.status {where}')} asks the scheduler again and lists each; "
            f"{code(f'python -m sweeper.report {where}')} rebuilds this report from the results so far; "
            "every point's reason is in `results.csv`."
        ),
        Table(table),
    ]


def _pruned(df: pd.DataFrame, axes: list[str]) -> list[Block]:
    table = pruned_table(df, axes)
    return [
        Para(
            f"{len(table):,} point(s) predicted not to fit were not launched (`prune=true`, gate rule C01): "
            "the predicted bytes per device exceed the capacity (`cluster.gpu_mem_gib`) less the margin "
            "(`plan.memory_margin`). `prune=false` runs them anyway; each reason is in `results.csv`."
        ),
        Table(table),
    ]


def _failures(df: pd.DataFrame, axes: list[str], max_rows: int | None) -> list[Block]:
    bad_rows, n_bad = shown_failures(df, max_rows)
    table = failures_table(bad_rows, axes)
    if not len(table):
        return [Para("None.")]
    blocks: list[Block] = [Table(table)]
    if len(table) < n_bad:
        blocks.append(
            Para(
                f"Showing {len(table):,} of {n_bad:,} points that did not finish ok (every status, the first point "
                f"ids of each). **{n_bad - len(table):,} rows left out**: {_ALL_ROWS}"
            )
        )
    details = failure_details_table(bad_rows)
    if len(details):
        blocks.append(Fold("Failure details (OOM numbers, rank, step, SLURM job)", [Table(details)]))
    return blocks


def _replays(records: Sequence[Record], df: pd.DataFrame, max_rows: int | None) -> list[Block]:
    ok_rows, _ = shown_ok(df, max_rows)
    bad_rows, _ = shown_failures(df, max_rows)
    keep = shown_replays([r.point_id for r in records], df, ok_rows, bad_rows, max_rows)
    shown = [r for r in records if r.point_id in keep]
    if not shown:
        if not records:
            return [Para("No points.")]
        return [
            Para(
                f"None shown: no point is on the frontier or failed. **{len(records):,} commands left out**: the "
                "`replay` column of `results.csv` / `results.parquet` holds every point's."
            )
        ]
    commands = [
        one_line(f"# {r.point_id} ({r.status}) {' '.join(cli_overrides(' '.join(r.overrides or [])))}").rstrip()
        + "\n"
        + (text(r.replay) if r.replay else "# no replay command recorded")
        for r in shown
    ]
    blocks: list[Block] = [Code("\n\n".join(commands))]
    secrets = referenced_variables(" ".join(r.replay or "" for r in shown))
    if secrets:
        blocks.append(
            Para(
                "These commands read secrets from the environment (sweeper never writes one down): set "
                + ", ".join(code(v) for v in secrets)
                + " in the shell to the values given to the sweep before running one."
            )
        )
    if len(shown) < len(records):
        blocks.append(
            Para(
                f"Showing the replay commands of {len(shown):,} of {len(records):,} points: every frontier "
                f"point, then the failures and the ok points shown above. **{len(records) - len(shown):,} "
                "commands left out**: the `replay` column of `results.csv` / `results.parquet` holds every point's."
            )
        )
    return blocks
