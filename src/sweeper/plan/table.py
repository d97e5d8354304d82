"""The plan for people: the header (what was planned, on what, under which assumptions), the table printed to the
terminal and ``plan.md``, built from the plan's rows (:mod:`sweeper.plan.rows`).

Sizes are shown in binary units, labelled ``GiB`` (2**30 bytes); the device's memory is shown both as torch reports
it (``cluster.gpu_mem_gib``, GiB) and as the vendor labels it (``cluster.gpu_mem_vendor_gb``, decimal GB). Text here
is plain: :func:`markdown` escapes every piece of it (:mod:`sweeper.report.md`) and the terminal table is printed
with rich's markup off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from sweeper.config.schema import ClusterConfig, PlanConfig
from sweeper.config.spec import PointSpec
from sweeper.plan.rows import plan_axes, term_columns
from sweeper.report import md
from sweeper.report.fmt import cli, text
from sweeper.units import days, in_unit, missing, num, percent, yes_no

#: Point keys that get a table column only when they differ between rows (else the header states them once).
VARYING = (
    "model",
    "cluster",
    "seq_len",
    "per_device_batch_size",
    "precision",
    "model_dtype",
    "grad_accum",
    "nodes",
    "ranks_per_node",
)
#: What each planning assumption means (``plan.<key>``; :class:`sweeper.config.schema.PlanConfig`).
ASSUMPTIONS: dict[str, str] = {
    "efficiency": "achieved fraction of the device's dense peak FLOP/s, recompute included",
    "comm_overlap": "fraction of the compute time that hides communication",
    "memory_margin": "fraction of device memory held back when deciding fits",
    "fragmentation": "allocator reserve over the allocated peak (GPU)",
    "cuda_context_gib": "CUDA context per process, GiB (GPU, outside the allocator)",
    "nccl_gib": "NCCL buffers per rank when world size > 1, GiB (GPU)",
    "calibrate": "measured sweep directory the time model is calibrated on (per engine family, gc, precision)",
}


def varying(df: pd.DataFrame) -> list[str]:
    """The keys of :data:`VARYING` with more than one value among the rows."""
    return [k for k in VARYING if df[k].astype(str).nunique() > 1]


def _gib(v: Any) -> str:
    """Bytes as GiB, the unit in the column's header (:func:`sweeper.units.in_unit`)."""
    return in_unit(v, "GiB", label=False)


#: The main table: (header, plan column, format). Sizes in GiB, throughput in tokens/s per device.
_MAIN: tuple[tuple[str, str, Any], ...] = (
    ("fits", "fits", yes_no),
    ("max batch", "max_per_device_batch_size", text),
    ("peak GiB", "predicted_peak_bytes", _gib),
    ("on device GiB", "predicted_device_bytes", _gib),
    ("peak in", "predicted_peak_phase", text),
    ("tokens/s/device", "predicted_tokens_per_s_per_device", num),
    ("MFU", "predicted_mfu", percent),
    ("days", "predicted_train_days", days),
    ("GPU-hours", "predicted_gpu_hours", num),
    ("tokens/s/device at max batch", "predicted_tokens_per_s_per_device_at_max_batch", num),
    ("days at max batch", "predicted_train_days_at_max_batch", days),
)


def key_names(df: pd.DataFrame) -> list[str]:
    """The columns that tell the rows apart besides ``engine``: ``gc``, the :data:`VARYING` keys that vary, then the
    plan's other axis columns (:func:`sweeper.plan.rows.plan_axes`)."""
    return ["gc", *varying(df), *plan_axes(df)]


def _keys(df: pd.DataFrame) -> pd.DataFrame:
    """The columns that tell the rows apart: engine, gc, the :data:`VARYING` keys that vary, then the plan's other
    axis columns (:func:`sweeper.plan.rows.plan_axes`: ``plan.*``, passthrough and cluster keys that differ)."""
    out = pd.DataFrame({"engine": df["engine"].astype(str), "gc": [cli(bool(v)) for v in df["gc"]]}, index=df.index)
    for k in key_names(df)[1:]:
        out[k] = [cli(v) for v in df[k]]
    return out


#: Host-memory columns, shown when a row offloads states to the host (ZeRO-Offload, FSDP cpu_offload).
_HOST: tuple[tuple[str, str, Any], ...] = (
    ("host GiB/node", "predicted_host_bytes_per_node", _gib),
    ("host fits", "predicted_host_fits", yes_no),
)


def main_table(df: pd.DataFrame) -> pd.DataFrame:
    """Display strings of the predicted rows: engine, gc, the keys that vary, then :data:`_MAIN` (and
    :data:`_HOST` after ``on device GiB`` when a row keeps states in host memory)."""
    planned = df[df["status"] == "planned"]
    out = _keys(planned)
    host = (
        "predicted_host_bytes_per_node" in planned
        and (pd.to_numeric(planned["predicted_host_bytes_per_node"], errors="coerce").fillna(0) > 0).any()
    )
    for header, column, fmt in _MAIN:
        out[header] = [fmt(v) for v in planned[column]]
        if host and column == "predicted_device_bytes":
            for h, c, f in _HOST:
                out[h] = [f(v) for v in planned[c]]
    return out


def breakdown_table(df: pd.DataFrame) -> pd.DataFrame:
    """Display strings of the memory breakdown at each predicted row's peak: GiB per term (``plan.csv``'s
    ``predicted_<term>_bytes``), then their sum, the bytes that must fit on the device."""
    planned = df[df["status"] == "planned"]
    out = _keys(planned)
    for column in term_columns(df):
        out[column.removeprefix("predicted_").removesuffix("_bytes").replace("_", " ")] = [
            _gib(v) for v in planned[column]
        ]
    out["total on device"] = [_gib(v) for v in planned["predicted_device_bytes"]]
    return out


def refused_table(df: pd.DataFrame) -> pd.DataFrame:
    """The rows not predicted: refused by the gate (status, rule, reason) or where the model failed."""
    rest = df[df["status"] != "planned"]
    out = _keys(rest)
    out["status"] = rest["status"].astype(str)
    out["rule"] = [text(v) for v in rest["rule"]]
    out["reason"] = [text(v) for v in rest["reason"]]
    return out


def notes(df: pd.DataFrame) -> list[str]:
    """The model's distinct notes (why a number is missing), in order of first appearance."""
    return list(dict.fromkeys(str(v) for v in df["predicted_note"] if not missing(v)))


def header_lines(points: Sequence[tuple[PointSpec, ClusterConfig]], df: pd.DataFrame) -> list[str]:
    """Plain-text lines stating the models, the clusters (device memory as torch reports it and as the vendor
    labels it, the memory a point may use, peaks and bandwidths), the values every row shares, the training run and
    the planning assumptions."""
    from sweeper.capacity.arch import Arch, UnknownArchitecture

    lines = []
    for spec in {s.model: s for s, _ in points}.values():
        try:
            a = Arch.from_config(spec.model_type, spec.model_config)
            lines.append(
                f"Model {spec.model} ({spec.model_type}): {a.total_params / 1e9:.2f} B parameters "
                f"({a.total_params:,}), {a.layers} layers, hidden {a.hidden}, {a.heads} heads "
                f"({a.kv_heads} key/value), vocabulary {a.vocab:,}"
            )
        except (UnknownArchitecture, KeyError, TypeError, ValueError) as e:
            lines.append(f"Model {spec.model} ({spec.model_type}): no parameter count ({e})")
    planned = df[df["status"] == "planned"]
    for name, cluster in {c.name: c for _, c in points}.items():
        lines.extend(_cluster_lines(name, cluster, df[df["cluster"] == name], planned))
    fixed = [f"{k}={cli(df[k].iloc[0])}" for k in VARYING[2:] if k not in varying(df)]
    if fixed:
        lines.append("Every row: " + ", ".join(fixed))
    lines.append(f"Training run: train_tokens={_tokens(df['train_tokens'])} tokens (days and GPU-hours below)")
    for settings in {repr(s.plan): s.plan for s, _ in points}.values():
        p = settings
        lines.append(
            "Assumptions: "
            + ", ".join(f"plan.{k}={_assumption(getattr(p, k))}{_unused(p, k)}" for k in ASSUMPTIONS)
            + " (docs/planning.md; override with plan.<key>=V)"
        )
    return lines


def _unused(settings: Any, key: str) -> str:
    """`` (not used: ...)`` after an assumption the plan did not apply: ``plan.efficiency`` when ``plan.calibrate``
    gives each row's efficiency (the printed assumptions are the ones used)."""
    if key == "efficiency" and settings.calibrate:
        return " (not used: plan.calibrate gives each row's; column predicted_efficiency_source)"
    return ""


def _assumption(v: Any) -> str:
    """An assumption's value as the override spells it: numbers with ``:g``, a path as is, None as ``null``."""
    return "null" if v is None else (f"{v:g}" if isinstance(v, int | float) else md.one_line(str(v)))


def _cluster_lines(name: Any, cluster: ClusterConfig, rows: pd.DataFrame, planned: pd.DataFrame) -> list[str]:
    gpu = cluster.gpu_name or "no GPU named (cluster.gpu_name)"
    ranks = sorted({(int(n), int(r)) for n, r in zip(rows["nodes"], rows["ranks_per_node"], strict=True)})
    shapes = ", ".join(f"{n} node(s) x {r} ranks = {n * r} devices" for n, r in ranks)
    out = [f"Cluster {name}: {gpu}, {cluster.gpus_per_node} GPUs per node; planned on {shapes}"]
    gib, vendor = cluster.gpu_mem_gib, cluster.gpu_mem_vendor_gb
    if gib:
        label = f'the vendor labels it "{vendor:g} GB"' if vendor else "no vendor label given"
        margins = sorted({float(m) for m in planned["predicted_margin"].dropna()}) or [PlanConfig().memory_margin]
        usable = ", ".join(f"{gib * (1 - m):.2f} GiB (margin {m:g})" for m in margins)
        out.append(
            f"Device memory: {gib:g} GiB per device as torch reports it (total_memory, cluster.gpu_mem_gib); "
            f"{label}. A point fits when its predicted device bytes are at most {usable}"
        )
    else:
        out.append("Device memory: unknown (cluster.gpu_mem_gib is null): fits is not decided")
    host = cluster.host_mem_gib
    out.append(
        f"Host memory: {host:g} GiB per node (cluster.host_mem_gib), against which offloaded states are judged"
        if host
        else "Host memory: unknown (cluster.host_mem_gib is null): host fits of offloaded states not decided"
    )
    mine = planned[planned["cluster"] == name]
    for precision, grp in mine.groupby("precision", sort=True):
        flops, source = grp["predicted_peak_flops"].iloc[0], grp["predicted_peak_source"].iloc[0]
        peak = f"{float(flops) / 1e12:,.1f} TFLOP/s" if not missing(flops) else "unknown"
        out.append(f"Device peak {precision}: {peak} ({text(source)})")
    intra, inter = cluster.intra_node_bandwidth_gb_s, cluster.inter_node_bandwidth_gb_s
    out.append(
        f"Collective bandwidth per device (NCCL busbw, GB/s = 10^9 bytes/s): {_bw(intra)} inside a node, "
        f"{_bw(inter)} across nodes"
    )
    return out


def _bw(v: Any) -> str:
    return "unknown (communication not modelled)" if missing(v) else f"{float(v):g} GB/s"


def _tokens(series: pd.Series) -> str:
    return ", ".join(f"{float(v):.3g}" for v in dict.fromkeys(series))


def markdown(title: str, command: str, header: Sequence[str], df: pd.DataFrame, files: Sequence[str]) -> str:
    """``plan.md``: title, command, header lines, the main table, the memory breakdown, the refused rows, the
    model's notes and the files; every piece of outside text escaped."""
    parts = [
        f"# {md.escape(title)}",
        f"{md.code(command)}",
        "\n\n".join(f"**{md.escape(line)}**" if line.startswith("Answer") else md.escape(line) for line in _answer(df)),
        "Predicted before anything runs (`sweeper.plan`): nothing was launched. Sizes in binary units: "
        "GiB = 2^30 bytes. Columns and formulas: docs/planning.md.",
        "\n".join(f"- {md.escape(line)}" for line in header),
        "## Plan",
        _md_table(main_table(df)),
        "## Memory at the peak, GiB per term",
        _md_table(breakdown_table(df)),
    ]
    refused = refused_table(df)
    if len(refused):
        parts += ["## Not predicted (refused by the gate, docs/gate.md)", _md_table(refused)]
    if notes(df):
        parts += ["## Notes", "\n".join(f"- {md.escape(n)}" for n in notes(df))]
    parts += ["## Files", "\n".join(f"- {md.code(f)}" for f in files)]
    return "\n\n".join(parts) + "\n"


def _answer(df: pd.DataFrame) -> list[str]:
    from sweeper.plan.answer import answer_lines

    return answer_lines(df, key_names(df))


def _md_table(frame: pd.DataFrame) -> str:
    return md.table(frame) if len(frame) else "(none)"


def print_plan(title: str, header: Sequence[str], df: pd.DataFrame, files: Sequence[str]) -> None:
    """Print the plan to the terminal: header lines, the main table (rich, markup off: every cell is literal text),
    the refused rows with their reasons, the model's notes, then where the files are (last line: ``Plan: <dir>``)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(markup=False, highlight=False, emoji=False)
    if not console.is_terminal:  # a pipe or a file: keep the table's rows whole
        console.width = 240
    console.print(Text(title, style="bold"))
    for line in _answer(df):
        console.print(Text(line, style="bold"), soft_wrap=True)
    for line in header:
        console.print(Text(f"  {line}"), soft_wrap=True)
    frame = main_table(df)
    if len(frame):
        table = Table(show_lines=False, header_style="bold")
        for column in frame.columns:
            left = column in ("engine", "gc", "fits", "peak in") or column in VARYING or column in plan_axes(df)
            table.add_column(Text(column), justify="left" if left else "right")
        for values in frame.itertuples(index=False):
            table.add_row(*(Text(str(v)) for v in values))
        console.print(table)
    else:
        console.print(Text("No point was predicted: every point was refused before the model (below)."))
    refused = refused_table(df)
    for (status, rule, reason), grp in refused.groupby(["status", "rule", "reason"], sort=False):
        points = "; ".join(
            " ".join(f"{k}={v}" for k, v in r.items())
            for r in grp.drop(columns=["status", "rule", "reason"]).to_dict("records")
        )
        console.print(Text(f"not predicted, {status} ({rule}), {len(grp)} point(s): {reason}"), soft_wrap=True)
        console.print(Text(f"  {points}"), soft_wrap=True)
    for n in notes(df):
        console.print(Text(f"note: {n}"), soft_wrap=True)
    console.print(Text(f"Plan: {files[0]}" + (f" ({', '.join(files[1:])})" if len(files) > 1 else "")), soft_wrap=True)
