"""The W&B comparison report of a sweep, as data: which runs, which panels, which keys, which filters.

Every point of a sweep is one W&B run (group = the sweep id, name = the point's overrides, tags = its status plus
``frontier`` for frontier points, config = the row's configuration columns, summary = the whole row; see
:mod:`sweeper.results.row`). The report built here shows them in one panel grid with two run sets (every run of the
sweep; the frontier runs) and three panels: peak memory vs tokens/s per device (scatter), the grid axes ending in
throughput and peak memory (parallel coordinates), and a run comparer.

The pure part (:func:`plan_report`: the keys, the names, the paragraph) needs pandas only. The builder
(:func:`build_report`), the offline checks (:func:`check_offline`) and the JSON form (:func:`spec_document`) import
``wandb_workspaces`` inside the functions: it is the optional ``tracking`` extra.

Units: throughput in tokens/s per device (``tokens_per_s_per_device``); peak memory per device in GiB
(``peak_mem_gib`` = ``peak_mem_bytes`` / 2**30) when the row has that column, else in bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pandas as pd

from sweeper.report.axes import grid_of
from sweeper.report.fmt import cli
from sweeper.report.md import one_line
from sweeper.results.collect import collect_records
from sweeper.results.row import config_columns, records_to_frame
from sweeper.results.sweepdir import SweepDir
from sweeper.tracking.manifest import sync_command
from sweeper.tracking.runs import FRONTIER_TAG, config_path
from sweeper.tracking.settings import WandbSettings
from sweeper.units import missing, num, peak_text

if TYPE_CHECKING:
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2.interface import PanelTypes, TextLike

#: The ``format`` key of ``wandb_report.json``.
FORMAT = "sweeper.wandb_report/1"
#: The W&B project when ``sweep.json`` names none.
DEFAULT_PROJECT = WandbSettings().project
#: The throughput summary key (tokens/s per device).
THROUGHPUT = "tokens_per_s_per_device"
#: Peak memory summary keys, preferred first, with their unit.
MEMORY_COLUMNS: tuple[tuple[str, str], ...] = (("peak_mem_gib", "GiB"), ("peak_mem_bytes", "bytes"))
#: W&B limits a report title to this many characters.
TITLE_MAX = 128


@dataclass(frozen=True)
class Point:
    """One named point of the sweep, for the paragraph.

    Attributes:
        name: the run name (the point's overrides joined by spaces), else its values on the grid axes, else its
            point id.
        point_id: 12 hex digits.
        tokens_per_s_per_device: measured throughput, tokens/s per device.
        peak_mem_bytes: measured peak memory per device (max over ranks), bytes.
    """

    name: str
    point_id: str
    tokens_per_s_per_device: float
    peak_mem_bytes: float


@dataclass(frozen=True)
class ReportPlan:
    """What the report shows, decided from the sweep's rows alone (no W&B).

    Attributes:
        sweep_id: the sweep id (:attr:`sweeper.results.sweepdir.SweepDir.sweep_id`): the runs' group.
        project: W&B project (``sweep.json["wandb"]["project"]``, default ``"sweeper"``).
        entity: W&B entity, or None for the logged-in user's default entity (resolved when publishing).
        title: the report title (at most :data:`TITLE_MAX` characters, one line).
        axes: the grid axes (config keys whose value varies between points), in grid order.
        axis_paths: for each axis, its path in the runs' nested config (:func:`sweeper.tracking.runs.config_path`).
        memory_key: the peak-memory summary key on the scatter's x axis (``peak_mem_gib`` or ``peak_mem_bytes``).
        memory_unit: its unit (``GiB`` or ``bytes``).
        n_points: points in the sweep.
        counts: points per status, most frequent first.
        n_frontier: points on the frontier (``on_frontier``).
        fastest: the ``ok`` point with the highest median tokens/s per device (ties: point id), or None.
        least_memory: the ``ok`` point with the least peak memory (ties: faster, then point id), or None.
    """

    sweep_id: str
    project: str
    entity: str | None
    title: str
    axes: list[str]
    axis_paths: list[str]
    memory_key: str
    memory_unit: str
    n_points: int
    counts: dict[str, int] = field(default_factory=dict)
    n_frontier: int = 0
    fastest: Point | None = None
    least_memory: Point | None = None

    @property
    def parallel_columns(self) -> list[str]:
        """The parallel-coordinates axes, left to right: every grid axis (config), then tokens/s per device and
        peak memory (summary)."""
        return [*self.axes, THROUGHPUT, self.memory_key]

    @property
    def scatter_title(self) -> str:
        """The scatter plot's title, units included."""
        return f"Peak memory per device ({self.memory_unit}) vs throughput (tokens/s per device)"


def wandb_target(sweep: Mapping[str, Any]) -> tuple[str, str | None]:
    """(project, entity) of a sweep's runs from its ``sweep.json`` (:meth:`sweeper.results.sweepdir.SweepDir.info`),
    read as the runs writer reads it (:class:`sweeper.tracking.settings.WandbSettings`: default project
    :data:`DEFAULT_PROJECT`; entity None: the default entity of whoever publishes). A malformed ``wandb`` entry
    gives the defaults."""
    wandb = sweep.get("wandb")
    wandb = dict(wandb) if isinstance(wandb, Mapping) else {}
    wandb.pop("mode", None)  # the mode does not matter here; an unknown one must not stop the report
    try:
        settings = WandbSettings.from_dict(wandb)
    except ValueError:
        settings = WandbSettings()
    return settings.project, (str(settings.entity) if settings.entity else None)


def _number(v: Any) -> float | None:
    if missing(v) or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def point_name(row: Mapping[str, Any], axes: Sequence[str]) -> str:
    """A point's name as W&B shows it: its run name (overrides joined by spaces), else ``key=value`` on the grid
    axes, else its point id. One line."""
    overrides = row.get("overrides")
    if not missing(overrides) and str(overrides).strip():
        return one_line(str(overrides).strip())
    parts = [f"{a}={cli(row[a])}" for a in axes if a in row and not missing(row[a])]
    return one_line(" ".join(parts) or str(row.get("point_id")))


def _measured(df: pd.DataFrame, axes: Sequence[str]) -> list[Point]:
    if not len(df):
        return []
    ok = df[df["status"] == "ok"]
    points = []
    for _, row in ok.iterrows():
        tps, mem = _number(row.get(THROUGHPUT)), _number(row.get("peak_mem_bytes"))
        if tps is not None and mem is not None:
            points.append(Point(point_name(row, axes), str(row["point_id"]), tps, mem))
    return points


def plan_from_frame(df: pd.DataFrame, sweep: SweepDir) -> ReportPlan:
    """The report plan of a sweep's table ``df`` (:func:`sweeper.results.row.records_to_frame`, which marks
    ``on_frontier``), its sweep id and its ``sweep.json`` (W&B project and entity)."""
    sweep_id = sweep.sweep_id
    project, entity = wandb_target(sweep.info())
    axes = grid_of(df).axes(df.columns) if len(df) else []
    memory_key, memory_unit = next(((k, u) for k, u in MEMORY_COLUMNS if k in df.columns), MEMORY_COLUMNS[-1])
    points = _measured(df, axes)
    fastest = min(points, key=lambda p: (-p.tokens_per_s_per_device, p.point_id), default=None)
    least = min(points, key=lambda p: (p.peak_mem_bytes, -p.tokens_per_s_per_device, p.point_id), default=None)
    counts = df["status"].value_counts() if len(df) else pd.Series(dtype=int)
    title = report_title(f"Sweep {sweep_id}: throughput vs peak memory")
    return ReportPlan(
        sweep_id=sweep_id,
        project=project,
        entity=entity,
        title=title,
        axes=list(axes),
        axis_paths=[config_path(a, config_columns(df.columns)) for a in axes],
        memory_key=memory_key,
        memory_unit=memory_unit,
        n_points=len(df),
        counts={str(s): int(n) for s, n in sorted(counts.items(), key=lambda x: (-x[1], str(x[0])))},
        n_frontier=int(df["on_frontier"].sum()) if len(df) else 0,
        fastest=fastest,
        least_memory=least,
    )


def plan_report(sweep_dir: SweepDir | Path) -> ReportPlan:
    """The report plan of a sweep directory, from the records on disk (the report's code path:
    :func:`~sweeper.results.collect.collect_records`, :func:`~sweeper.results.row.records_to_frame`,
    :func:`~sweeper.report.axes.grid_of`).

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    sweep = SweepDir.of(sweep_dir)
    df = records_to_frame(collect_records(sweep))
    return plan_from_frame(df, sweep)


def paragraph(plan: ReportPlan) -> list[tuple[str, bool]]:
    """The report's paragraph as pieces ``(text, is_code)``: code pieces (names, keys, ids) become inline code,
    so no text from a user is ever read as markup. Throughput in tokens/s per device, peak memory in GiB."""
    out: list[tuple[str, bool]] = [("Sweep ", False), (plan.sweep_id, True)]
    out.append((f" compared {plan.n_points:,} point{'s' if plan.n_points != 1 else ''}", False))
    if plan.axes:
        out.append((" over ", False))
        for i, a in enumerate(plan.axes):
            out += [(", ", False)] if i else []
            out.append((a, True))
    out.append((" (one W&B run each, group = the sweep id). ", False))
    for label, p in (("Fastest", plan.fastest), ("Least peak memory", plan.least_memory)):
        if p is not None:
            out += [(f"{label}: ", False), (p.name, True)]
            out.append(
                (f" ({num(p.tokens_per_s_per_device)} tokens/s per device, {peak_text(p.peak_mem_bytes)}). ", False)
            )
    if plan.fastest is None:
        out.append(("No point finished ok with measured numbers. ", False))
    statuses = ", ".join(f"{n:,} {s}" for s, n in plan.counts.items())
    out.append((f"{plan.n_frontier:,} on the throughput/memory frontier (tag ", False))
    out += [(FRONTIER_TAG, True), (f"); statuses: {statuses or 'none'}.", False)]
    merged: list[tuple[str, bool]] = []
    for t, c in out:
        if merged and not c and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + t, False)
        else:
            merged.append((t, c))
    return [(one_line(t), c) for t, c in merged]


def publish_commands(sweep_dir: SweepDir | Path) -> list[str]:
    """The two shell commands that publish once online: sync the offline runs, then save the report."""
    path = SweepDir.of(sweep_dir).path
    return [sync_command(path), f"python -m sweeper.wandb_report {shlex.quote(str(path))} --publish"]


# ---- wandb_workspaces (the optional "tracking" extra): imported inside the functions below ----


def runset_filters(sweep_id: str) -> dict[str, Any]:
    """The two run sets' filters as ``wandb_workspaces.expr`` expressions: ``"all"`` (group == sweep id) and
    ``"frontier"`` (group == sweep id and tag ``frontier``)."""
    from wandb_workspaces import expr

    group = expr.Metric("Group") == sweep_id
    return {
        "all": expr.And(group),
        "frontier": expr.And(expr.Metric("Group") == sweep_id, expr.Tags().isin([FRONTIER_TAG])),
    }


def report_title(text: str) -> str:
    """``text`` as a W&B report title: one line, at most :data:`TITLE_MAX` characters (cut with "…")."""
    title = one_line(text)
    return title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1] + "…"


def _panels(plan: ReportPlan, axes: Iterable[tuple[str, str]]) -> list[PanelTypes]:
    """The report's three panels: peak memory (``plan.memory_key``) vs tokens/s per device, parallel coordinates
    through ``axes`` (grid axis name, its nested config path) to throughput and memory, and a run comparer."""
    import wandb_workspaces.reports.v2 as wr

    memory = wr.SummaryMetric(plan.memory_key)
    throughput = wr.SummaryMetric(THROUGHPUT)
    # the runs' nested config keys, named as in the CSV
    columns = [wr.ParallelCoordinatesPlotColumn(metric=wr.Config(path), display_name=a) for a, path in axes]
    columns += [
        wr.ParallelCoordinatesPlotColumn(metric=throughput, display_name="tokens/s per device"),
        wr.ParallelCoordinatesPlotColumn(metric=memory, display_name=f"peak memory ({plan.memory_unit})"),
    ]
    return [
        wr.ScatterPlot(title=plan.scatter_title, x=memory, y=throughput, layout=wr.Layout(x=0, y=0, w=12, h=8)),
        wr.ParallelCoordinatesPlot(
            title="Grid axes → tokens/s per device, peak memory",
            columns=columns,
            layout=wr.Layout(x=12, y=0, w=12, h=8),
        ),
        wr.RunComparer(diff_only="split", layout=wr.Layout(x=0, y=8, w=24, h=10)),
    ]


def build_report(plan: ReportPlan, entity: str | None = None) -> wr.Report:
    """The W&B report of ``plan``: a paragraph, then one panel grid (run sets: every run of the sweep, the frontier
    runs; panels: scatter, parallel coordinates, run comparer).

    Args:
        plan: :func:`plan_report`'s plan.
        entity: the W&B entity to use (default: ``plan.entity``; ``""`` when neither is known, which keeps the
            report convertible offline: the run sets then name no project to look up).
    """
    import wandb_workspaces.reports.v2 as wr

    entity = entity if entity is not None else (plan.entity or "")
    filters = runset_filters(plan.sweep_id)
    runsets = [
        wr.Runset(entity=entity, project=plan.project, name=f"Sweep {plan.sweep_id}", filters=filters["all"]),
        wr.Runset(entity=entity, project=plan.project, name="Frontier", filters=filters["frontier"]),
    ]
    panels = _panels(plan, zip(plan.axes, plan.axis_paths, strict=True))
    text: list[TextLike] = [wr.InlineCode(t) if is_code else t for t, is_code in paragraph(plan)]
    return wr.Report(
        project=plan.project,
        entity=entity,
        title=plan.title,
        description="Which configuration is fastest and still fits in memory (sweeper).",
        blocks=[wr.P(text), wr.PanelGrid(runsets=runsets, panels=panels)],
        width="fluid",
    )


def build_comparison(plans: Sequence[ReportPlan], entity: str | None = None) -> wr.Report:
    """The W&B report comparing several sweeps (the first the baseline), the same panels as the offline comparison
    page (:mod:`sweeper.report.compare_page`): one panel grid with **one run set per sweep** (group = its sweep id;
    W&B colours each run set apart) and the panels of :func:`build_report` (peak memory vs tokens/s per device, the
    grid axes of every sweep in parallel coordinates, a run comparer).

    Args:
        plans: :func:`plan_report` of each sweep, baseline first.
        entity: as for :func:`build_report` (default: the baseline's entity).
    """
    import wandb_workspaces.reports.v2 as wr

    base = plans[0]
    entity = entity if entity is not None else (base.entity or "")
    runsets = [
        wr.Runset(
            entity=entity,
            project=p.project,
            name=f"Sweep {p.sweep_id}" + (" (baseline)" if i == 0 else ""),
            filters=runset_filters(p.sweep_id)["all"],
        )
        for i, p in enumerate(plans)
    ]
    panels = _panels(base, dict.fromkeys(a for p in plans for a in zip(p.axes, p.axis_paths, strict=True)))
    text: list[TextLike] = ["Sweeps "]
    for i, p in enumerate(plans):
        text += [", " if i else "", wr.InlineCode(p.sweep_id), " (baseline)" if i == 0 else ""]
    text.append(" compared: one run set per sweep (group = the sweep id), one W&B run per point.")
    return wr.Report(
        project=base.project,
        entity=entity,
        title=report_title(f"Sweeps {', '.join(p.sweep_id for p in plans)}: throughput vs peak memory"),
        description="Which configuration got faster, slower or stopped fitting between sweeps (sweeper).",
        blocks=[wr.P([t for t in text if t != ""]), wr.PanelGrid(runsets=runsets, panels=panels)],
        width="fluid",
    )


def comparison_document(plans: Sequence[ReportPlan], report: wr.Report, dirs: Sequence[Path]) -> dict[str, Any]:
    """The content of a comparison's ``wandb_report.json``: as :func:`spec_document`, with ``sweep_ids`` (baseline
    first), one ``plan`` per sweep and the publish commands for every sweep's runs."""
    runsets = check_offline(report, [p.sweep_id for p in plans])
    quoted = " ".join(shlex.quote(str(SweepDir.of(d).path)) for d in dirs)
    return {
        "format": FORMAT,
        "sweep_ids": [p.sweep_id for p in plans],
        "wandb": {"project": plans[0].project, "entity": plans[0].entity},
        "publish": {
            "status": "not published",
            "commands": [*(sync_command(d) for d in dirs), f"python -m sweeper.wandb_report {quoted} --publish"],
            "needs": "a W&B login: WANDB_API_KEY in the environment or `wandb login` (netrc)",
            "note": "the first commands upload each sweep's offline runs; the last saves this report to W&B",
        },
        "plans": [
            {"sweep_id": p.sweep_id, "title": p.title, "axes": p.axes, "n_points": p.n_points, "counts": p.counts}
            for p in plans
        ],
        "runsets": runsets,
        "report": _tagged(report),
    }


def check_offline(report: wr.Report, sweep_id: str | Sequence[str]) -> list[dict[str, Any]]:
    """Check the parts of ``report`` that convert without W&B: each run set's filter string parses back
    (``wandb_workspaces.expr``) to a filter on exactly ``sweep_id`` (and the frontier tag) or, given one sweep id
    per run set (a comparison), on its own sweep id, and each panel and the whole report convert to W&B's internal
    model (``wandb_workspaces``' pydantic models: what ``save()`` would send).

    Returns:
        One entry per run set: ``name``, ``filters`` (the string), ``filters_v2`` (W&B's filter format).

    Raises:
        ValueError: a filter does not parse back to the sweep id (W&B's filter strings cannot hold some characters,
            e.g. a quote or ``=``, in a value), or a panel does not convert.
    """
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    out = []
    ids = itertools.repeat(sweep_id) if isinstance(sweep_id, str) else iter(sweep_id)
    for block in report.blocks:
        if not isinstance(block, wr.PanelGrid):
            continue
        for rs in block.runsets:
            expected = next(ids, None)
            # Runset.filters is annotated with what it accepts (a string, FilterExprs, Or, And), but its validator
            # (convert_filterexpr_list_to_string) stores every one as its string: the annotation is too wide
            filters = cast(str, rs.filters)
            try:
                v2 = expr.filters_tree_to_v2(expr.expr_to_filters(filters))
            except (SyntaxError, ValueError) as e:
                raise ValueError(f"run set {rs.name!r}: filter {filters!r} does not parse: {e}") from None
            groups = [f.get("value") for f in v2["filters"] if f.get("key", {}).get("name") == "group"]
            if groups != [expected]:
                raise ValueError(
                    f"sweep id {expected!r} cannot be written as a W&B run filter (it parses back as {groups!r})"
                )
            out.append({"name": rs.name, "filters": filters, "filters_v2": v2})
        for panel in block.panels:
            panel._to_model()
    report._to_model()  # the whole report against wandb-workspaces' own (pydantic) models, offline
    return out


def _tagged(obj: Any) -> Any:
    """``obj`` as JSON data, each report object with a ``type`` key (its class name) and without private fields
    (random ids)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data = {"type": type(obj).__name__}
        for f in dataclasses.fields(obj):
            if not f.name.startswith("_"):
                data[f.name] = _tagged(getattr(obj, f.name))
        return data
    if isinstance(obj, Mapping):
        return {str(k): _tagged(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_tagged(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def spec_document(plan: ReportPlan, report: wr.Report, sweep_dir: SweepDir | Path) -> dict[str, Any]:
    """The content of ``wandb_report.json``.

    Keys: ``format`` (:data:`FORMAT`), ``sweep_id``, ``wandb`` (project, entity), ``publish`` (how to publish:
    the two commands, what they need), ``plan`` (axes, keys, named points, counts), ``runsets`` (filters as
    strings and in W&B's format, :func:`check_offline`), ``report`` (the ``wandb_workspaces`` report, each object
    with its ``type`` and without its random private ids).
    """
    runsets = check_offline(report, plan.sweep_id)
    return {
        "format": FORMAT,
        "sweep_id": plan.sweep_id,
        "wandb": {"project": plan.project, "entity": plan.entity},
        "publish": {
            "status": "not published",
            "commands": publish_commands(sweep_dir),
            "needs": "a W&B login: WANDB_API_KEY in the environment or `wandb login` (netrc)",
            "note": "the first command uploads the offline runs (one per point); the second saves this report "
            "to W&B and prints its URL",
        },
        "plan": {
            "title": plan.title,
            "axes": plan.axes,
            "axis_paths": plan.axis_paths,
            "scatter": {"x": plan.memory_key, "y": THROUGHPUT, "title": plan.scatter_title},
            "parallel_coordinates": plan.parallel_columns,
            "frontier_tag": FRONTIER_TAG,
            "n_points": plan.n_points,
            "counts": plan.counts,
            "n_frontier": plan.n_frontier,
            "fastest": dataclasses.asdict(plan.fastest) if plan.fastest else None,
            "least_memory": dataclasses.asdict(plan.least_memory) if plan.least_memory else None,
        },
        "runsets": runsets,
        "report": _tagged(report),
    }
