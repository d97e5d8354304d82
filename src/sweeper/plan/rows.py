"""One row of the plan per point: the gate's answer, then the model's prediction (``plan.csv``'s columns).

A point the gate refuses (``fsdp`` with ``zero>0``, ``bf16`` on a V100, ...) is a row with its status (``invalid`` or
``unsupported``), the rule and the reason, and no prediction. Every other point is ``planned``: the memory and time
model's numbers (:func:`sweeper.capacity.predict.predict`), with the same ``predicted_<key>`` column names as a sweep's
``results.csv`` (:mod:`sweeper.results.row`), except the two the plan is read for first, ``fits`` and
``max_per_device_batch_size`` (``results.csv``'s ``predicted_fits`` and ``predicted_max_per_device_batch_size``).
"Does not fit" is ``fits=False``, never an error; an unknown device peak leaves the throughput columns empty and says
why in ``predicted_note``.

**Every key that tells two rows apart is a column** (:func:`axis_columns`): a point key of :data:`COLUMNS`, or, after
``world_size``, any other key whose value differs between the plan's points, named as in a sweep's
``results.csv``: ``plan.efficiency``, ``training_args.optim``,
``deepspeed_config.zero_optimization.offload_optimizer.device``, ``cluster.gpu_mem_gib``, ``model.config.<key>``
(``model.config.*`` and ``cluster.*`` only where they differ for the same ``model`` / ``cluster``).

Each point is gated as a SLURM sweep on its cluster would gate it (:func:`sweeper.point.lifecycle.target_for` with
``launcher="slurm"``: the cluster's GPU, not this machine's), with ``prune`` off: the plan shows ``fits`` instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

import pandas as pd

from sweeper.config.schema import ClusterConfig
from sweeper.config.spec import PointSpec
from sweeper.plan.points import engine_label
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.lifecycle import target_for
from sweeper.point.rules.parallelism import pipeline_check
from sweeper.report.axes import follows
from sweeper.results.row import flatten
from sweeper.units import GIB

#: ``status`` of a point the model predicted (the gate's refusals keep the gate's status).
PLANNED = "planned"
#: Prediction keys that keep their own name in the plan (the interface's columns).
_UNPREFIXED = ("fits", "max_per_device_batch_size")
#: The columns every plan has, in this order; the model's other ``predicted_*`` columns follow, in its order.
COLUMNS: tuple[str, ...] = (
    "model",
    "cluster",
    "gpu_name",
    "engine",
    "fsdp",
    "zero",
    "tp",
    "pp",
    "dp",
    "gc",
    "precision",
    "model_dtype",
    "per_device_batch_size",
    "seq_len",
    "grad_accum",
    "nodes",
    "ranks_per_node",
    "world_size",
    # the axis columns of :func:`axis_columns` go here
    "status",
    "rule",
    "reason",
    "fits",
    "max_per_device_batch_size",
    "predicted_host_bytes_per_node",
    "predicted_host_mem_bytes",
    "predicted_host_fits",
    "predicted_peak_bytes",
    "predicted_peak_gib",
    "predicted_device_bytes",
    "predicted_device_gib",
    "predicted_device_mem_bytes",
    "predicted_margin",
    "predicted_peak_phase",
    "predicted_tokens_per_s_per_device",
    "predicted_mfu",
    "predicted_step_time_s",
    "train_tokens",
    "predicted_train_days",
    "predicted_gpu_hours",
    "predicted_tokens_per_s_per_device_at_max_batch",
    "predicted_train_days_at_max_batch",
    "predicted_gpu_hours_at_max_batch",
)
#: Columns shown in GiB (2**30 bytes) beside their bytes column.
_GIB_OF = {"predicted_peak_gib": "predicted_peak_bytes", "predicted_device_gib": "predicted_device_bytes"}


#: The breakdown's terms in the order a reader adds them up (model states, working sets, activations, buffers, GPU
#: overheads); a term the model adds later goes after them, in the model's order.
TERM_ORDER: tuple[str, ...] = (
    "params",
    "fp32_master_weights",
    "grads",
    "optimizer_states",
    "gathered_working_set",
    "activations",
    "logits_loss",
    "autocast_weight_copies",
    "backward_scratch",
    "ddp_buckets",
    "deepspeed_buckets",
    "fragmentation",
    "cuda_context",
    "nccl",
)


#: A breakdown column: ``predicted_<term>_bytes``, not the peak, the device total or a capacity (device, host).
_TERM_COLUMN = re.compile(r"^predicted_(?!(?:peak|device|device_mem|host_mem)_bytes$)\w+_bytes$")


def plan_axes(df: pd.DataFrame) -> list[str]:
    """The axis columns of a plan frame (:func:`axis_columns`): those between ``world_size`` and ``status``."""
    names = list(df.columns)
    return names[names.index("world_size") + 1 : names.index("status")]


def term_columns(df: pd.DataFrame) -> list[str]:
    """The breakdown columns of a plan (``predicted_<term>_bytes``: params, activations, ...), in frame order."""
    return [c for c in df.columns if _TERM_COLUMN.match(c)]


def _term_order(column: str) -> int:
    term = column.removeprefix("predicted_").removesuffix("_bytes")
    return TERM_ORDER.index(term) if term in TERM_ORDER else len(TERM_ORDER)


def _spec_columns(spec: PointSpec, cluster: ClusterConfig) -> dict[str, Any]:
    return {
        "model": spec.model,
        "cluster": cluster.name,
        "gpu_name": cluster.gpu_name,
        "engine": engine_label(spec.fsdp, spec.zero, spec.tp, spec.pp),
        "fsdp": spec.fsdp,
        "zero": spec.zero,
        "tp": spec.tp,
        "pp": spec.pp,
        "dp": spec.dp,
        "gc": spec.gc,
        "precision": spec.precision,
        "model_dtype": spec.model_dtype,
        "per_device_batch_size": spec.per_device_batch_size,
        "seq_len": spec.seq_len,
        "grad_accum": spec.grad_accum,
        "nodes": spec.nodes,
        "ranks_per_node": spec.ranks_per_node,
        "world_size": spec.world_size,
        "train_tokens": spec.train_tokens,
    }


#: Spec sections as their dotted column prefix in a sweep's ``results.csv`` (:mod:`sweeper.results.columns`).
_SECTIONS = {
    "model_config": "model.config",
    "fsdp_config": "fsdp_config",
    "deepspeed_config": "deepspeed_config",
    "training_args": "training_args",
    "plan": "plan",
    "timing": "timing",
}
#: The keys a dotted column follows: a ``model.config.*`` or ``cluster.*`` value that only changes with ``model`` or
#: ``cluster`` is told by that column already.
_GROUPS = {"model.config.": "model", "model_type": "model", "decoder_layer": "model", "cluster.": "cluster"}


def config_leaves(spec: PointSpec, cluster: ClusterConfig) -> dict[str, Any]:
    """Every configuration value of a point as ``{dotted key: value}``, spelled as on the command line and in
    ``results.csv``: the spec's scalar keys, its sections (``training_args.optim``, ``plan.efficiency``,
    ``model.config.hidden_size``, ...) and the cluster's keys (``cluster.gpu_mem_gib``); lists as compact JSON."""
    data = spec.to_dict()
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS:
            out |= flatten(_SECTIONS[key], value)
        else:
            out |= flatten(key, value)
    out |= {k: v for k, v in flatten("cluster", asdict(cluster)).items() if k != "cluster.name"}
    return out


def axis_columns(
    points: Sequence[tuple[PointSpec, ClusterConfig]], leaves: Sequence[Mapping[str, Any]] | None = None
) -> list[str]:
    """The keys outside :data:`COLUMNS` whose value differs between ``points`` (see the module doc), in the order
    the first point lists them: the columns that tell rows apart when the point keys do not. ``leaves``: each
    point's :func:`config_leaves`, when the caller has them already."""
    if leaves is None:
        leaves = [config_leaves(spec, cluster) for spec, cluster in points]
    frame = pd.DataFrame([{k: _text(v) for k, v in row.items()} for row in leaves])
    if frame.empty:
        return []
    frame["model"] = [spec.model for spec, _ in points]
    frame["cluster"] = [cluster.name for _, cluster in points]
    out = []
    for key in frame.columns:
        if key in COLUMNS or frame[key].nunique(dropna=False) <= 1:
            continue
        group = next((g for prefix, g in _GROUPS.items() if key.startswith(prefix)), None)
        if group is None or not follows(frame, key, group):
            out.append(key)
    return out


def _text(v: Any) -> Any:
    """A value as the plan compares it: JSON for nested values, so that ``1`` and ``True`` differ."""
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list, tuple, bool)) else v


def _predicted_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k if k in _UNPREFIXED else f"predicted_{k}": v for k, v in record.items()}


def plan_row(spec: PointSpec, cluster: ClusterConfig, axes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan's row of one point (see the module doc). Never raises for a point: a refusal is a row, and so is a
    failure of the model itself (``status="error"``, the exception in ``reason``).

    ``per_device_batch_size=auto`` is planned at the largest batch predicted to fit (1 when none does), and gated
    at that batch: in a plan, ``auto`` is the model's answer, not the trial-and-error search a sweep runs.
    ``axes``: the extra configuration columns the row carries, with this point's values (:func:`axis_columns`).
    """
    from sweeper.capacity.predict import predict, resolve_auto_batch

    target = target_for(spec, "slurm", cluster)
    spec, auto = resolve_auto_batch(spec, target)
    row = _spec_columns(spec, cluster) | dict(axes or {})
    try:
        # a pipeline is planned, never swept: the gate sees the point without it (its rule T02 refuses pp > 1 in a
        # sweep), the planner's own rule T11 checks what a pipeline needs
        check(replace(spec, prune=False, pp=1), target)
        pipeline_check(spec)
    except InvalidPoint as e:
        return {**row, "status": e.status, "rule": e.rule, "reason": str(e)}
    try:
        pred = predict(spec, target)
        row.update(status=PLANNED, **_predicted_columns(pred.to_record()))
        row["predicted_note"] = "; ".join(n for n in (auto, pred.note) if n) or None
        best = pred.max_per_device_batch_size
        if best and best != spec.per_device_batch_size:
            pred = predict(spec.with_batch(best), target, with_max_batch=False)
        if best:
            row["predicted_tokens_per_s_per_device_at_max_batch"] = pred.tokens_per_s_per_device
            row["predicted_train_days_at_max_batch"] = pred.train_days
            row["predicted_gpu_hours_at_max_batch"] = pred.gpu_hours
    except Exception as e:  # noqa: BLE001 - a bug in the model must not end the plan: the row says what failed
        return {**row, "status": "error", "reason": f"the capacity model failed: {type(e).__name__}: {e}"}
    return row


def plan_frame(points: Sequence[tuple[PointSpec, ClusterConfig]]) -> pd.DataFrame:
    """The plan: one row per ``(spec, cluster)`` in order. Columns: :data:`COLUMNS` (the axis columns of
    :func:`axis_columns` after ``world_size``), the model's other
    ``predicted_*`` columns (every :class:`~sweeper.capacity.predict.Prediction` field, even when no row was predicted),
    then the breakdown's ``predicted_<term>_bytes`` in :data:`TERM_ORDER`. Byte, batch and ``zero`` columns are
    nullable integers, ``fits`` and ``gc`` nullable booleans, GiB columns = bytes / 2**30."""
    from sweeper.capacity.predict import Prediction

    leaves = [config_leaves(spec, cluster) for spec, cluster in points]
    axes = axis_columns(points, leaves)
    rows = [
        plan_row(spec, cluster, {k: mine.get(k) for k in axes})
        for (spec, cluster), mine in zip(points, leaves, strict=True)
    ]
    seen = dict.fromkeys(_predicted_columns(Prediction().to_record()))
    for row in rows:
        seen.update(dict.fromkeys(row))
    rest = [k for k in seen if k not in COLUMNS and k not in axes]
    terms = sorted((k for k in rest if _TERM_COLUMN.match(k)), key=_term_order)
    at = COLUMNS.index("status")
    df = pd.DataFrame(rows, columns=[*COLUMNS[:at], *axes, *COLUMNS[at:], *(k for k in rest if k not in terms), *terms])
    for name, source in _GIB_OF.items():
        df[name] = pd.to_numeric(df[source], errors="coerce") / GIB
    for name in df.columns:
        if name.endswith(("_bytes", "_bytes_per_rank", "_bytes_per_node")) or name in (
            "max_per_device_batch_size",
            "zero",
        ):
            df[name] = pd.to_numeric(df[name], errors="coerce").round().astype("Int64")
        elif name in ("fits", "gc", "predicted_host_fits"):
            df[name] = df[name].astype("boolean")
    return df
