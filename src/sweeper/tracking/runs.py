"""What each point's W&B run holds, as plain data built from the records on disk (no wandb import).

One run per point with a final record, every final status included (ok, oom, error, invalid, pruned...), so W&B
shows the whole grid as it ends. A ``pending`` point (a SLURM job still queued or running) gets its run when its
record is final (the next ``python -m sweeper.report``): a submission of 1,000 pending points writes no run and
waits for nothing (issue 22).

The layout is Hugging Face's ``WandbCallback``'s (what a W&B user of the Trainer knows), with sweeper's own part
beside it under ``sweeper``:

* id: ``<sweep id>-<point id>`` (characters W&B does not allow become ``_``; too long: a hash), so writing again
  after a resume or a SLURM collection updates the same run;
* group: the sweep id; name: the point's overrides (``(defaults)`` when none); tags: the status, ``frontier`` for a
  point on the throughput/memory frontier, ``tie`` for a frontier point tied with another;
* config: what ``WandbCallback`` logs for the point's run, read from rank 0's ``trainer_run.json``
  (:mod:`sweeper.results.trainer_run`: ``{**model.config.to_dict(), **TrainingArguments.to_dict()}``, tokens
  redacted, and ``model/num_parameters``; absent for a point that never began training), and under ``sweeper``
  the point's configuration columns of the row that have a value, nested at their dots the way the comparison
  report's panels read them (``training_args.max_grad_norm`` -> ``config["sweeper"]["training_args"]
  ["max_grad_norm"]``; :func:`config_path`), plus ``sweeper.env`` (host, devices, library versions, SLURM job id).
  sweeper's names stay apart: its ``fsdp`` (``none``/``full_shard``...) is not the Trainer's ``fsdp`` list;
* summary: the typed row (:mod:`sweeper.results.row`): every column of ``results.csv`` with a value, under the
  same name, failure reason and ``predicted_*`` numbers included, plus the Trainer's final metrics that
  ``WandbCallback`` puts there (``train_runtime`` s, ``train_samples_per_second``, ``train_steps_per_second``,
  ``train_loss``, ``total_flos``);
* history: one entry per optimizer step from the record's ``series``, under the Trainer's names where the Trainer
  logs the value (``train/global_step``, the x axis; ``train/loss``, ``train/learning_rate``, ``train/grad_norm``)
  and under ``sweeper/`` for sweeper's own per-step series (``sweeper/step_time_s`` s, ``sweeper/mem_high_water_bytes``
  bytes, ``sweeper/optimizer_step_skipped``, ``sweeper/window`` and ``sweeper/timed``: which window the step was in);
  each entry's ``_timestamp`` is the wall-clock time rank 0's step ended (``trainer_run.json``), so W&B's time axis
  is the point's own. W&B's run start time and runtime are set by wandb when the run is written (wandb 0.31 has no
  way to set them): the point's are ``train_runtime`` and the history's timestamps.
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
from sweeper.results.trainer_run import FINAL_METRICS, read_trainer_run

#: W&B run ids: letters, digits, ``-`` and ``_``; longer ids are hashed.
_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")
_ID_MAX = 64
#: The tag of a run whose point is on the throughput/memory frontier (the comparison report's frontier runset).
FRONTIER_TAG = "frontier"
#: The record's per-step series keys logged as history -> their W&B names (the Trainer's where the Trainer logs the
#: value, ``sweeper/`` for sweeper's own); ``step`` is also W&B's step.
HISTORY_NAMES: dict[str, str] = {
    "step": "train/global_step",
    "loss": "train/loss",
    "learning_rate": "train/learning_rate",
    "grad_norm": "train/grad_norm",
    "step_time_s": "sweeper/step_time_s",
    "mem_high_water_bytes": "sweeper/mem_high_water_bytes",
    "optimizer_step_skipped": "sweeper/optimizer_step_skipped",
    "window": "sweeper/window",
}
#: The history's x axis (``WandbCallback``'s ``define_metric`` step metric).
STEP_METRIC = HISTORY_NAMES["step"]
#: The history entry that says whether the step was in the timed window.
TIMED = "sweeper/timed"
#: The key under which sweeper's own configuration sits in a run's config (beside the Trainer's).
SWEEPER_KEY = "sweeper"


@dataclass
class RunSpec:
    """One point's W&B run.

    Attributes:
        run_id: the W&B run id (stable for a sweep id and point id).
        point_id: the point's id.
        name: the point's overrides joined by spaces.
        group: the sweep id.
        tags: status, ``frontier``, ``tie``.
        config: the Trainer's config (``WandbCallback``'s keys, flat at the top) and, under ``sweeper``, the
            configuration columns nested at their dots and ``env`` (dict).
        summary: the row's columns with a value (plain JSON types) and the Trainer's final metrics.
        history: ``[{"step": int, "train/global_step": int, "train/loss": float, "train/learning_rate": float,
            "train/grad_norm": float, "sweeper/step_time_s": float, "sweeper/mem_high_water_bytes": int,
            "sweeper/optimizer_step_skipped": bool, "sweeper/window": str, "sweeper/timed": bool,
            "_timestamp": float}]`` (``step``: W&B's step, the same number; ``sweeper/window``:
            ``warmup``/``timed``/``memory``/``profile``; ``_timestamp``: Unix s), keys without a value left out.
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
    """The dotted path of configuration ``column`` in a run's config (:func:`nested_config` under
    :data:`SWEEPER_KEY`), as the report's panels address it (``wandb_workspaces``' ``Config("a.b")`` reads
    ``config["a"]["b"]``): ``sweeper.<column>``, or ``sweeper.<column>.name`` when another column of ``columns``
    lies below it."""
    below = any(c.startswith(column + ".") for c in columns)
    return f"{SWEEPER_KEY}.{column}.{LEAF_KEY}" if below else f"{SWEEPER_KEY}.{column}"


def nested_config(values: dict[str, Any], columns: Iterable[str]) -> dict[str, Any]:
    """``values`` (configuration columns, flat, CSV names: ``training_args.max_grad_norm``) as W&B's nested config
    (``{"sweeper": {"training_args": {"max_grad_norm": ...}}}``), each at :func:`config_path` for ``columns`` (every
    configuration column of the table, so that every run of a sweep nests alike)."""
    columns = list(columns)
    out: dict[str, Any] = {}
    for key, value in values.items():
        *parents, leaf = config_path(key, columns).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def history_of(record: Record, step_ended_at: list[Any] | None = None) -> list[dict[str, Any]]:
    """The record's per-step series as W&B history rows (see :class:`RunSpec`); ``[]`` without a series.

    Args:
        record: the point's record.
        step_ended_at: rank 0's wall-clock end of each optimizer step (Unix s, ``trainer_run.json``), or None;
            used as each row's ``_timestamp`` only when it has one entry per step of the series.
    """
    series = getattr(record, "series", None) or {}
    steps = series.get("step") or []
    stamps = step_ended_at if step_ended_at is not None and len(step_ended_at) == len(steps) else None
    out = []
    for i, step in enumerate(steps):
        row: dict[str, Any] = {"step": int(step)}
        for key, name in HISTORY_NAMES.items():
            values = series.get(key) or []
            v = values[i] if i < len(values) else None
            if v is not None and not (isinstance(v, float) and not math.isfinite(v)) and v != "":
                row[name] = int(v) if key == "step" else v
        if "sweeper/window" in row:
            row[TIMED] = row["sweeper/window"] == "timed"
        if stamps is not None and isinstance(stamps[i], (int, float)) and math.isfinite(stamps[i]):
            row["_timestamp"] = float(stamps[i])
        out.append(row)
    return out


def _part(data: dict[str, Any], key: str, kind: type) -> Any:
    """``data[key]`` when it is a ``kind`` (a file written by another version may hold anything), else None."""
    value = data.get(key)
    return value if isinstance(value, kind) else None


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
        trainer = read_trainer_run(sweep.point(record.point_id)) or {}
        summary = {k: v for k, v in ((k, plain(row[k])) for k in df.columns) if v is not None}
        final: dict[str, Any] = _part(trainer, "final", dict) or {}
        summary.update({k: final[k] for k in FINAL_METRICS if isinstance(final.get(k), (int, float))})
        ours = nested_config(
            {k: v for k, v in ((k, plain(row[k])) for k in config_cols) if v is not None}, config_cols
        ).get(SWEEPER_KEY, {})
        ours["env"] = dict(record.env or {})
        config: dict[str, Any] = dict(_part(trainer, "config", dict) or {})
        config[SWEEPER_KEY] = ours
        tags = [record.status]
        if summary.get("on_frontier"):
            tags.append(FRONTIER_TAG)
            if summary.get("frontier_tie_with"):
                tags.append("tie")
        stamps = _part(trainer, "step_ended_at", list)
        out.append(
            RunSpec(
                run_id=run_id(sweep_id, record.point_id),
                point_id=record.point_id,
                name=" ".join(record.overrides) or "(defaults)",
                group=sweep_id,
                tags=tags,
                config=config,
                summary=summary,
                history=history_of(record, stamps),
            )
        )
    return out
