"""The report's tables, as frames of display strings (plain text; :func:`sweeper.report.md.table` escapes them).

Each table has few columns so that it fits the page: the swept axes (the columns whose value varies across the
sweep, so rows are told apart by their configuration) and the main numbers. Secondary numbers go to a *details*
table keyed by point id, which report.html folds away; every column of every point is in ``results.csv`` /
``results.parquet``.

Units: throughput in tokens/s, times in seconds, MFU in percent of the peak, TFLOP/s = 1e12 FLOP/s, peak memory in
the report's unit (:func:`sweeper.report.fmt.mem_unit`: GiB = 2**30 bytes or MiB = 2**20 bytes), optimizer state in
MiB, OOM requested/free in MiB and in use/capacity in GiB, relative errors of predictions in percent (signed:
positive when the model over-predicts). Pruned points (predicted not to fit, never launched) have a table of their
own, not a row among the failures.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sweeper.report.fmt import cli, mem_unit, text
from sweeper.units import GIB, MIB, MISSING, missing, num, percent

FRONTIER_MARK = "★"
FRONTIER_DEFINITION = (
    "built from the least peak memory up, a point is on it unless a frontier point with less peak memory is faster "
    "(its tokens/s per device range, from the 95 % confidence interval of its median step time, p10-p90 for records "
    "without one, lies entirely above this one's) or tied with it (the ranges overlap), or an ok point with the same "
    "peak memory is faster; a point dominated only by points off the frontier stays on it (docs/report.md)"
)
#: Statuses the failures table leaves out: listed apart (:func:`pruned_table`, :func:`skipped_table`).
APART = ("pruned", "skipped")
#: Statuses that are not failures: :data:`APART`, and ``pending`` (no result yet), counted by reason
#: (:func:`pending_table`).
NOT_FAILURES = (*APART, "pending")
#: Display headers of columns whose name is not self-explaining.
AXIS_HEADERS = {"fp32_master_weights": "fp32 master weights"}


def axis_columns(df: pd.DataFrame, axes: Sequence[str]) -> dict[str, list[str]]:
    """``{header: values}`` of the swept axes ``axes`` that ``df`` has, values spelled as on the command line."""
    return {AXIS_HEADERS.get(a, a): [MISSING if missing(v) else cli(v) for v in df[a]] for a in axes if a in df}


def sort_ok(df: pd.DataFrame) -> pd.DataFrame:
    """The ``ok`` rows, fastest (tokens/s per device) first, rows without a number last."""
    ok = df[df["status"] == "ok"]
    return ok.sort_values("tokens_per_s_per_device", ascending=False, na_position="last", kind="stable")


def results_table(
    df: pd.DataFrame,
    axes: Sequence[str] = (),
    unit: tuple[str, int] | None = None,
    predicted_values: bool = True,
    errors: bool = True,
) -> pd.DataFrame:
    """The ``ok`` points, fastest first, frontier marked ★: the axes, tokens/s per device, median step time (s),
    MFU (% of peak), peak memory in ``unit`` (a (name, bytes) pair; by default :func:`mem_unit` of ``df``),
    optimizer state per rank (MiB), and the point id. When capacity planning predicted them: the predicted peak
    (same unit) and tokens/s per device, each followed by its relative error in percent; with
    ``predicted_values`` False only the errors, with ``errors`` False neither (the report's first table holds the
    measurements alone: the model's errors read as failures there; they are :func:`prediction_table`'s)."""
    name, scale = unit or mem_unit(df)
    ok = sort_ok(df)
    out: dict[str, list[str]] = {
        "frontier": frontier_marks(ok),
        **axis_columns(ok, axes),
        "tokens/s/device": [num(v) for v in ok["tokens_per_s_per_device"]],
        "step time median (s)": [num(v) for v in ok["step_time_s_median"]],
        "MFU (%)": [num(v, 0.01, 3, zeros=True) for v in ok["mfu"]],
        f"peak mem ({name})": [num(v, scale, 3, zeros=True) for v in ok["peak_mem_bytes"]],
        "opt state/rank (MiB)": [num(v, MIB, 4, zeros=True) for v in ok["optimizer_state_bytes_per_rank"]],
    }
    if _any(ok, "predicted_peak_bytes"):
        if predicted_values:
            out[f"predicted peak ({name})"] = [num(v, scale, 3, zeros=True) for v in ok["predicted_peak_bytes"]]
        if errors:
            out["peak error (%)"] = [percent(v, sign=True, unit="") for v in ok["peak_mem_rel_error"]]
    if _any(ok, "predicted_tokens_per_s_per_device"):
        if predicted_values:
            out["predicted tokens/s/device"] = [num(v) for v in ok["predicted_tokens_per_s_per_device"]]
        if errors:
            out["tokens/s error (%)"] = [
                percent(v, sign=True, unit="") for v in ok["tokens_per_s_per_device_rel_error"]
            ]
    out["point"] = ok["point_id"].astype(str).tolist()
    return pd.DataFrame(out, dtype=object)


def prediction_table(df: pd.DataFrame, axes: Sequence[str] = (), unit: tuple[str, int] | None = None) -> pd.DataFrame:
    """Predicted beside measured for the ``ok`` points that capacity planning predicted, in :func:`results_table`'s
    order: the axes, peak memory predicted / measured (in ``unit``) and its relative error, tokens/s per device
    predicted / measured and its relative error (percent, positive when the model over-predicts), the point id.
    Empty when nothing was predicted."""
    name, scale = unit or mem_unit(df)
    ok = sort_ok(df)
    if not (_any(ok, "predicted_peak_bytes") or _any(ok, "predicted_tokens_per_s_per_device")):
        return pd.DataFrame()
    out: dict[str, list[str]] = {**axis_columns(ok, axes)}
    if _any(ok, "predicted_peak_bytes"):
        out[f"peak predicted ({name})"] = [num(v, scale, 3, zeros=True) for v in ok["predicted_peak_bytes"]]
        out[f"peak measured ({name})"] = [num(v, scale, 3, zeros=True) for v in ok["peak_mem_bytes"]]
        out["peak error (%)"] = [percent(v, sign=True, unit="") for v in ok["peak_mem_rel_error"]]
    if _any(ok, "predicted_tokens_per_s_per_device"):
        out["tokens/s/device predicted"] = [num(v) for v in ok["predicted_tokens_per_s_per_device"]]
        out["tokens/s/device measured"] = [num(v) for v in ok["tokens_per_s_per_device"]]
        out["tokens/s error (%)"] = [percent(v, sign=True, unit="") for v in ok["tokens_per_s_per_device_rel_error"]]
    out["point"] = ok["point_id"].astype(str).tolist()
    return pd.DataFrame(out, dtype=object)


def frontier_marks(ok: pd.DataFrame) -> list[str]:
    """The frontier cell of each row: ★ on the frontier, "★ tie" when tied on throughput with another frontier
    point (the same peak memory, overlapping ranges: ``frontier_tie_with``), else empty."""
    front = set(ok.loc[ok["on_frontier"].astype(bool), "point_id"].astype(str))
    ties = ok["frontier_tie_with"] if "frontier_tie_with" in ok.columns else pd.Series(None, index=ok.index)
    return [
        (f"{FRONTIER_MARK} tie" if not missing(t) and front & set(str(t).split()) else FRONTIER_MARK) if f else ""
        for f, t in zip(ok["on_frontier"].astype(bool), ties, strict=True)
    ]


def _any(df: pd.DataFrame, column: str) -> bool:
    return column in df.columns and bool(df[column].notna().any())


def results_details_table(df: pd.DataFrame, unit: tuple[str, int] | None = None) -> pd.DataFrame:
    """Secondary numbers of the ``ok`` points, in :func:`results_table`'s order: point, tokens/s over all devices,
    step time p10-p90 (s), the 95 % confidence interval of the median step time (s) and the timed steps (when the
    records have them), the CPU run-queue wait (``runqueue_wait_frac`` in percent of the timed window, "contended"
    above ``timing.contention_warn_frac``; when the records have it), TFLOP/s per device, the MFU peak (TFLOP/s;
    only when the peaks of these points differ by more than 1 %), the peak-memory counter, the points a frontier
    point is tied with on throughput (when any is: ``frontier_tie_with``), the predicted peak (in ``unit``, by
    default :func:`mem_unit` of ``df``) and tokens/s per device when capacity planning predicted them, and the
    SLURM job when there is one."""
    ok = sort_ok(df)
    out: dict[str, list[str]] = {
        "point": ok["point_id"].astype(str).tolist(),
        "tokens/s (all devices)": [num(v) for v in ok["tokens_per_s"]],
        "step time p10-p90 (s)": [
            f"{num(a)}-{num(b)}" for a, b in zip(ok["step_time_s_p10"], ok["step_time_s_p90"], strict=True)
        ],
    }
    if "step_time_s_ci95_low" in ok.columns and ok["step_time_s_ci95_low"].notna().any():
        out["median step time 95 % CI (s)"] = [
            f"{num(a)}-{num(b)}" for a, b in zip(ok["step_time_s_ci95_low"], ok["step_time_s_ci95_high"], strict=True)
        ]
        out["timed steps"] = [
            num(n) + ("" if missing(s) or s in ("fixed", "ci") else f" ({text(s)})")
            for n, s in zip(
                ok["timed_steps_measured"], ok.get("timed_stop", pd.Series(None, index=ok.index)), strict=True
            )
        ]
    if _any(ok, "runqueue_wait_frac"):
        flags = ok["contended"] if "contended" in ok.columns else pd.Series(None, index=ok.index)
        out["CPU run-queue wait (%)"] = [
            num(v, 0.01, 3) + (" contended" if not missing(c) and bool(c) else "")
            for v, c in zip(ok["runqueue_wait_frac"], flags, strict=True)
        ]
    if "steal_frac" in ok.columns and (pd.to_numeric(ok["steal_frac"], errors="coerce") >= 0.005).any():
        out["hypervisor steal (%)"] = [num(v, 0.01, 3) for v in ok["steal_frac"]]  # a VM's stolen CPU time
    out["TFLOP/s/device"] = [num(v, digits=3) for v in ok["tflops_per_device"]]
    peaks = pd.to_numeric(ok["mfu_peak_flop_per_s"], errors="coerce").dropna()
    if len(peaks) and peaks.max() > 1.01 * peaks.min():
        out["MFU peak (TFLOP/s)"] = [num(v, 1e12, 3) for v in ok["mfu_peak_flop_per_s"]]
    out["peak mem kind"] = [text(v) for v in ok["peak_mem_kind"]]
    if "frontier_tie_with" in ok.columns and ok["frontier_tie_with"].notna().any():
        out["tied on tokens/s with (frontier rows)"] = [text(v) for v in ok["frontier_tie_with"]]
    name, scale = unit or mem_unit(df)
    if _any(ok, "predicted_peak_bytes"):
        out[f"predicted peak ({name})"] = [num(v, scale, 3, zeros=True) for v in ok["predicted_peak_bytes"]]
    if _any(ok, "predicted_tokens_per_s_per_device"):
        out["predicted tokens/s/device"] = [num(v) for v in ok["predicted_tokens_per_s_per_device"]]
    if ok["slurm_job_id"].notna().any():
        out["SLURM job"] = [text(v) for v in ok["slurm_job_id"]]
    return pd.DataFrame(out, dtype=object)


def sort_failures(df: pd.DataFrame) -> pd.DataFrame:
    """The non-``ok`` rows but those that are not failures (:data:`NOT_FAILURES`), by status then point id."""
    bad = (df["status"] != "ok") & ~df["status"].isin(NOT_FAILURES)
    return df[bad].sort_values(["status", "point_id"], kind="stable")


def pending_table(df: pd.DataFrame, first: int = 3) -> pd.DataFrame:
    """The ``pending`` points counted by what is known of them (their reason without the job id and time,
    :func:`sweeper.results.collect.pending_kind`), most points first: the reason, the number of points, their SLURM
    jobs (an array's tasks as ``12_[0-9,11]``), when the scheduler was last asked (the latest ``as of``), and the
    ``first`` point ids. No pending point: an empty frame."""
    from sweeper.results.collect import pending_as_of, pending_kind

    rows = df[df["status"] == "pending"].sort_values("point_id", kind="stable")
    reasons = [text(v) for v in rows["reason"]]
    groups: dict[str, list[int]] = {}
    for i, reason in enumerate(reasons):
        groups.setdefault(pending_kind(reason), []).append(i)
    ids, jobs = rows["point_id"].astype(str).tolist(), rows["slurm_job_id"].tolist()
    out: dict[str, list[str]] = {"what is known": [], "points": [], "SLURM jobs": [], "as of": [], "first points": []}
    for kind, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        times = [t for t in (pending_as_of(reasons[i]) for i in members) if t]
        out["what is known"].append(kind)
        out["points"].append(f"{len(members):,}")
        out["SLURM jobs"].append(job_ranges([str(jobs[i]) for i in members if not missing(jobs[i])]) or MISSING)
        out["as of"].append(max(times) if times else MISSING)
        out["first points"].append(
            ", ".join(ids[i] for i in members[:first]) + (", ..." if len(members) > first else "")
        )
    return _drop_empty(out, keep={"what is known", "points", "first points"})


def job_ranges(job_ids: Sequence[str]) -> str:
    """SLURM job ids written the way ``squeue`` writes an array: ``12_[0-3,7], 15`` for tasks 0-3 and 7 of array
    job 12 and job 15 (array tasks ``<array>_<task>``); ids of another form are listed as they are. Empty: ``""``."""
    tasks: dict[str, list[int]] = {}
    for job in dict.fromkeys(job_ids):
        array, _, task = job.partition("_")
        if task.isdigit():
            tasks.setdefault(array, []).append(int(task))
        else:
            tasks.setdefault(job, [])
    parts = []
    for array, numbers in tasks.items():
        if not numbers:
            parts.append(array)
            continue
        spans: list[list[int]] = []
        for n in sorted(numbers):
            if spans and n == spans[-1][1] + 1:
                spans[-1][1] = n
            else:
                spans.append([n, n])
        parts.append(f"{array}_[" + ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans) + "]")
    return ", ".join(parts)


def pruned_table(df: pd.DataFrame, axes: Sequence[str] = ()) -> pd.DataFrame:
    """The points pruned before launch (predicted not to fit), by point id: the axes, the per-device batch, the
    predicted bytes per device, the capacity and the usable memory (capacity less the margin) in MiB or GiB (GiB
    from 1 GiB up, the unit in the header), the margin (%), the largest batch predicted to fit, and the point id."""
    rows = df[df["status"] == "pruned"].sort_values("point_id", kind="stable")
    need = pd.to_numeric(rows["predicted_device_bytes"], errors="coerce")
    cap = pd.to_numeric(rows["predicted_device_mem_bytes"], errors="coerce")
    margin = pd.to_numeric(rows["predicted_margin"], errors="coerce")
    usable = cap * (1 - margin.fillna(0))
    biggest = pd.concat([need, cap]).max()
    name, scale = ("GiB", GIB) if missing(biggest) or biggest >= GIB else ("MiB", MIB)
    out: dict[str, list[str]] = {**axis_columns(rows, axes)}
    if "per_device_batch_size" not in axes:
        out["per_device_batch_size"] = [text(v) for v in rows["per_device_batch_size"]]
    out |= {
        f"predicted ({name})": [num(v, scale, 3, zeros=True) for v in need],
        f"capacity ({name})": [num(v, scale, 3, zeros=True) for v in cap],
        "margin (%)": [num(v, 0.01, 3) for v in margin],
        f"usable ({name})": [num(v, scale, 3, zeros=True) for v in usable],
        "largest batch predicted to fit": [text(v) for v in rows["predicted_max_per_device_batch_size"]],
        "point": rows["point_id"].astype(str).tolist(),
    }
    return pd.DataFrame(out, dtype=object)


def skipped_table(df: pd.DataFrame, axes: Sequence[str] = ()) -> pd.DataFrame:
    """The points ``search=frontier`` did not measure in full (status ``skipped``), by point id: the axes, the
    reason (the decision, the dominating point and the numbers compared), the point id."""
    rows = df[df["status"] == "skipped"].sort_values("point_id", kind="stable")
    return pd.DataFrame(
        {
            **axis_columns(rows, axes),
            "reason": [text(v) for v in rows["reason"]],
            "point": rows["point_id"].astype(str).tolist(),
        }
    )


def failures_table(df: pd.DataFrame, axes: Sequence[str] = ()) -> pd.DataFrame:
    """The non-``ok`` points: status, the axes, error kind, phase (setup/train/eval), reason, point id. Error kind
    and phase are left out when empty for every row."""
    bad = sort_failures(df)
    out: dict[str, list[str]] = {
        "status": bad["status"].astype(str).tolist(),
        **axis_columns(bad, axes),
        "error kind": [text(v) for v in bad["error_kind"]],
        "phase": [text(v) for v in bad["failure_phase"]],
        "reason": [text(v) for v in bad["reason"]],
        "point": bad["point_id"].astype(str).tolist(),
    }
    return _drop_empty(out, keep={"status", "reason", "point", *(AXIS_HEADERS.get(a, a) for a in axes)})


def failure_details_table(df: pd.DataFrame) -> pd.DataFrame:
    """Secondary facts of the non-``ok`` points that have any: the parsed OOM numbers (requested and free in MiB,
    in use and capacity in GiB), the failing rank and step, and the SLURM job, state, elapsed and limit (s).
    Columns empty for every row and rows with nothing to add are left out; no rows: an empty frame."""
    bad = sort_failures(df)
    out: dict[str, list[str]] = {
        "point": bad["point_id"].astype(str).tolist(),
        "OOM requested (MiB)": [num(v, MIB) for v in bad["oom_requested_bytes"]],
        "OOM free (MiB)": [num(v, MIB) for v in bad["oom_free_bytes"]],
        "OOM in use (GiB)": [num(v, GIB) for v in bad["oom_in_use_bytes"]],
        "device capacity (GiB)": [num(v, GIB) for v in bad["oom_capacity_bytes"]],
        "rank": [text(v) for v in bad["failure_rank"]],
        "step": [text(v) for v in bad["failure_step"]],
        "SLURM job": [text(v) for v in bad["slurm_job_id"]],
        "SLURM state": [text(v) for v in bad["slurm_state"]],
        "SLURM elapsed / limit (s)": [
            MISSING if missing(a) and missing(b) else f"{num(a)} / {num(b)}"
            for a, b in zip(bad["slurm_elapsed_s"], bad["slurm_time_limit_s"], strict=True)
        ],
    }
    table = _drop_empty(out, keep={"point"})
    if len(table.columns) == 1:
        return table.iloc[0:0]
    return table[(table.drop(columns="point") != MISSING).any(axis=1)].reset_index(drop=True)


def _drop_empty(columns: dict[str, list[str]], keep: set[str]) -> pd.DataFrame:
    return pd.DataFrame({k: v for k, v in columns.items() if k in keep or any(x != MISSING for x in v)}, dtype=object)


def shown_ok(df: pd.DataFrame, max_rows: int | None) -> tuple[pd.DataFrame, int]:
    """(the rows of ``df`` whose ``ok`` points the results table shows, how many ``ok`` points there are).

    At most ``max_rows`` ``ok`` points: every frontier point (even when there are more than ``max_rows``), then the
    fastest of the others by tokens/s per device. With ``max_rows`` None or no more ``ok`` points than that, ``df``
    itself."""
    is_ok = df["status"] == "ok"
    n_ok = int(is_ok.sum())
    if max_rows is None or n_ok <= max_rows:
        return df, n_ok
    ranked = sort_ok(df)
    front = ranked["on_frontier"].astype(bool)
    room = max(max_rows - int(front.sum()), 0)
    keep = front | (~front & ((~front).cumsum() <= room))
    return ranked[keep], n_ok


def shown_failures(df: pd.DataFrame, max_rows: int | None) -> tuple[pd.DataFrame, int]:
    """(the non-``ok`` rows the failures table shows, how many there are; pruned, skipped and pending points are
    listed apart and not counted): at most ``max_rows``, taken in turn from each status (lowest point ids first) so
    that every status shows. With ``max_rows`` None or no more rows than that, ``df`` itself."""
    is_bad = (df["status"] != "ok") & ~df["status"].isin(NOT_FAILURES)
    n_bad = int(is_bad.sum())
    if max_rows is None or n_bad <= max_rows:
        return df, n_bad
    bad = sort_failures(df)
    turn = bad.groupby("status", sort=False).cumcount()
    order = pd.DataFrame({"turn": turn, "status": bad["status"]}).sort_values(["turn", "status"], kind="stable")
    return bad.loc[order.index[:max_rows]], n_bad


def shown_replays(
    point_ids: Sequence[str],
    df: pd.DataFrame,
    ok_shown: pd.DataFrame,
    bad_shown: pd.DataFrame,
    max_rows: int | None,
) -> set[str]:
    """The point ids whose replay commands the report shows: every one when ``max_rows`` is None or there are no
    more than that, else at most ``max_rows`` (more only when there are more frontier points): every frontier
    point, then the failures shown, then the other ``ok`` points shown (fastest first)."""
    if max_rows is None or len(point_ids) <= max_rows:
        return set(point_ids)
    front = df.loc[df["on_frontier"].astype(bool), "point_id"].tolist()
    failed = (bad_shown["status"] != "ok") & ~bad_shown["status"].isin(NOT_FAILURES)
    bad = bad_shown.loc[failed, "point_id"].tolist()
    ok = sort_ok(ok_shown)["point_id"].tolist()
    wanted = list(dict.fromkeys([*front, *bad, *ok]))
    return set(wanted[: max(max_rows, len(front))])
