"""What each point's W&B run holds, as plain data built from the records on disk (no wandb import).

One run per point with a final record, every final status included (ok, oom, error, invalid, pruned...), so W&B
shows the whole grid as it ends. A ``pending`` point (a SLURM job still queued or running) gets its run when its
record is final (the next ``python -m sweeper.report``): a submission of 1,000 pending points writes no run and
waits for nothing (issue 22).

* id: ``<sweep id>-<point id>`` (characters W&B does not allow become ``_``; too long: a hash), so writing again
  after a resume or a SLURM collection updates the same run;
* group: the sweep id; name: the point's overrides (``(defaults)`` when none); tags: the status, ``frontier`` for a
  point on the throughput/memory frontier, ``tie`` for a frontier point tied with another;
* config: the point's configuration columns of the row that have a value, nested at their dots the way the comparison
  report's panels read them (``training_args.max_grad_norm`` -> ``config["training_args"]["max_grad_norm"]``;
  :func:`config_path`), plus ``env`` (host, devices, library versions, SLURM job id);
* summary: the typed row (:mod:`sweeper.results.row`): every column of ``results.csv`` with a value, under the
  same name, failure reason and ``predicted_*`` numbers included;
* history: one entry per optimizer step from the record's ``series`` (step time in s, loss, the Trainer's logged
  learning rate and gradient norm, memory high-water mark in bytes, whether the step was timed).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.results.record import Record
from sweeper.results.row import config_columns, records_to_frame
from sweeper.results.sweepdir import SweepDir

#: W&B run ids: letters, digits, ``-`` and ``_``; longer ids are hashed.
_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")
_ID_MAX = 64
#: The tag of a run whose point is on the throughput/memory frontier (the comparison report's frontier runset).
FRONTIER_TAG = "frontier"
#: The record's per-step series keys logged as history (numbers only; ``step`` is W&B's step).
HISTORY_KEYS: tuple[str, ...] = ("step_time_s", "loss", "learning_rate", "grad_norm", "mem_high_water_bytes")


@dataclass
class RunSpec:
    """One point's W&B run.

    Attributes:
        run_id: the W&B run id (stable for a sweep id and point id).
        point_id: the point's id.
        name: the point's overrides joined by spaces.
        group: the sweep id.
        tags: status, ``frontier``, ``tie``.
        config: configuration columns (flat, CSV names) and ``env`` (dict).
        summary: the row's columns with a value (plain JSON types).
        history: ``[{"step": int, "step_time_s": float, "loss": float, "learning_rate": float, "grad_norm": float,
            "mem_high_water_bytes": int, "timed": bool,
            "window": str}]`` (``window``: ``warmup``/``timed``/``memory``/``profile``), keys without a value left out.
    """

    run_id: str
    point_id: str
    name: str
    group: str
    tags: list[str]
    config: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)

    def fingerprint(self) -> str:
        """A hash of everything the run holds: the writer skips a run whose fingerprint it already wrote."""
        data = json.dumps(
            [self.name, self.group, self.tags, self.config, self.summary, self.history], sort_keys=True, default=str
        )
        return hashlib.sha256(data.encode()).hexdigest()[:16]

    def history_fingerprint(self) -> str:
        """A hash of the history alone (an online run already holding it is not sent the same steps again)."""
        return hashlib.sha256(json.dumps(self.history, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_id(sweep_id: str, point_id: str) -> str:
    """The W&B run id of a point: ``<sweep id>-<point id>``, W&B-safe, at most 64 characters."""
    rid = _ID_BAD.sub("_", f"{sweep_id}-{point_id}")
    if len(rid) > _ID_MAX:
        rid = f"{hashlib.sha256(sweep_id.encode()).hexdigest()[:16]}-{_ID_BAD.sub('_', point_id)}"[:_ID_MAX]
    return rid


def plain(value: Any) -> Any:
    """A frame cell as plain JSON data: missing (NA, NaN, None) -> None; numpy scalars -> Python numbers;
    infinities -> None (W&B and JSON have no infinity)."""
    if value is None:
        return None
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass  # a list or dict cell
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


#: Where a configuration column that is also the prefix of others (``model`` beside ``model.config.hidden_size``)
#: keeps its own value in the nested config: ``model.name``.
LEAF_KEY = "name"


def config_path(column: str, columns: Iterable[str]) -> str:
    """The dotted path of configuration ``column`` in a run's nested config (:func:`nested_config`), as the report's
    panels address it (``wandb_workspaces``' ``Config("a.b")`` reads ``config["a"]["b"]``): the column itself,
    or ``<column>.name`` when another column of ``columns`` lies below it."""
    below = any(c.startswith(column + ".") for c in columns)
    return f"{column}.{LEAF_KEY}" if below else column


def nested_config(values: dict[str, Any], columns: Iterable[str]) -> dict[str, Any]:
    """``values`` (configuration columns, flat, CSV names: ``training_args.max_grad_norm``) as W&B's nested config
    (``{"training_args": {"max_grad_norm": ...}}``), each at :func:`config_path` for ``columns`` (every configuration
    column of the table, so that every run of a sweep nests alike)."""
    columns = list(columns)
    out: dict[str, Any] = {}
    for key, value in values.items():
        *parents, leaf = config_path(key, columns).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def history_of(record: Record) -> list[dict[str, Any]]:
    """The record's per-step series as W&B history rows (see :class:`RunSpec`); ``[]`` without a series."""
    series = getattr(record, "series", None) or {}
    steps = series.get("step") or []
    windows = series.get("window") or []
    out = []
    for i, step in enumerate(steps):
        row: dict[str, Any] = {"step": int(step)}
        for key in HISTORY_KEYS:
            values = series.get(key) or []
            v = values[i] if i < len(values) else None
            if v is not None and not (isinstance(v, float) and not math.isfinite(v)):
                row[key] = v
        if i < len(windows):
            row["timed"] = windows[i] == "timed"
            if windows[i]:
                row["window"] = windows[i]  # warmup, timed, memory or profile: why a step's time is what it is
        out.append(row)
    return out


def run_specs(sweep_dir: SweepDir | Path) -> list[RunSpec]:
    """Every finished point's run, from the records of ``sweep_dir`` (``pending`` points, point folders without a
    final record, have none yet).

    Raises:
        ValueError: a ``result.json`` is not a valid record (the message names the file).
    """
    sweep = SweepDir.of(sweep_dir)
    records = [r for r in sweep.records() if r.status != "pending"]
    if not records:
        return []
    sweep_id = sweep.sweep_id
    df = records_to_frame(records)
    config_cols = config_columns(df.columns)
    out = []
    for record, (_, row) in zip(records, df.iterrows(), strict=True):
        summary = {k: v for k, v in ((k, plain(row[k])) for k in df.columns) if v is not None}
        config = nested_config(
            {k: v for k, v in ((k, plain(row[k])) for k in config_cols) if v is not None}, config_cols
        )
        config["env"] = dict(record.env or {})
        tags = [record.status]
        if summary.get("on_frontier"):
            tags.append(FRONTIER_TAG)
            if summary.get("frontier_tie_with"):
                tags.append("tie")
        out.append(
            RunSpec(
                run_id=run_id(sweep_id, record.point_id),
                point_id=record.point_id,
                name=" ".join(record.overrides) or "(defaults)",
                group=sweep_id,
                tags=tags,
                config=config,
                summary=summary,
                history=history_of(record),
            )
        )
    return out
