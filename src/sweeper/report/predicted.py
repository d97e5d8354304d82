"""Predicted beside measured: how far capacity planning's model (:mod:`sweeper.capacity.predict`) was from each ``ok``
point of the sweep, the efficiency calibrated on them, and the points pruned before launch.

The relative errors are the row's (:mod:`sweeper.results.row`): ``(predicted - measured) / measured``, positive when
the model over-predicts, for peak memory (``peak_mem_rel_error``: predicted peak tensor bytes per rank against
``peak_mem_bytes``) and throughput (``tokens_per_s_per_device_rel_error``). The calibrated efficiency is
:func:`sweeper.capacity.calibrate.calibrated_efficiency` of the records, printed as the ``plan.efficiency=`` override to
pass back to ``python -m sweeper.plan``.

Text here is plain (the terminal); :func:`prediction_blocks` returns Markdown in which outside text went through
:mod:`sweeper.report.md`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from sweeper.report.fmt import capped, text
from sweeper.report.md import code, escape, one_line
from sweeper.report.tables import APART
from sweeper.results.record import Record
from sweeper.units import missing, percent

if TYPE_CHECKING:
    from sweeper.capacity.calibrate import Calibration

#: (what, relative-error column) of each prediction compared with a measurement.
ERROR_COLUMNS = (
    ("peak memory", "peak_mem_rel_error"),
    ("tokens/s per device", "tokens_per_s_per_device_rel_error"),
)


@dataclass(frozen=True)
class ErrorStat:
    """The model's error on one quantity over the ``ok`` points that have both numbers.

    Attributes:
        what: the quantity ("peak memory", "tokens/s per device").
        n: points compared.
        median_abs, max_abs: median and largest ``|relative error|`` (fractions: 0.05 = 5 %); None when ``n`` is 0.
        worst: (point id, signed relative error) of the largest one; None when ``n`` is 0.
    """

    what: str
    n: int
    median_abs: float | None = None
    max_abs: float | None = None
    worst: tuple[str, float] | None = None

    def line(self) -> str:
        """One line of plain text: ``peak memory: median |error| 4.1 %, max 12.0 % (+12.0 % on abcdef012345), 3 ok
        points``; or that nothing was compared."""
        if not self.n or self.worst is None:
            return f"{self.what}: no ok point has both a prediction and a measurement"
        pid, signed = self.worst
        return (
            f"{self.what}: median |error| {percent(self.median_abs)}, max {percent(self.max_abs)} "
            f"({signed * 100:+.1f} % on {pid}), {self.n:,} ok point{'s' if self.n != 1 else ''}"
        )


def error_stats(df: pd.DataFrame) -> list[ErrorStat]:
    """:class:`ErrorStat` of each :data:`ERROR_COLUMNS` entry over the ``ok`` rows of ``df`` (a results frame)."""
    ok = df[df["status"] == "ok"] if len(df) else df
    out = []
    for what, column in ERROR_COLUMNS:
        errors = pd.to_numeric(ok[column], errors="coerce").dropna() if column in ok else pd.Series(dtype=float)
        if not len(errors):
            out.append(ErrorStat(what, 0))
            continue
        worst = errors.abs().idxmax()
        out.append(
            ErrorStat(
                what,
                len(errors),
                float(errors.abs().median()),
                float(errors.abs().max()),
                (str(ok.loc[worst, "point_id"]), float(errors[worst])),
            )
        )
    return out


def uncalibrated_efficiency(df: pd.DataFrame) -> float | None:
    """The one ``plan.efficiency`` every point was predicted with when none had ``plan.calibrate`` (the predictions
    are then the uncalibrated guess); None otherwise (several values, a calibration, or no such column)."""
    if "plan.efficiency" not in df.columns:
        return None
    if "plan.calibrate" in df.columns and df["plan.calibrate"].map(lambda v: not missing(v) and str(v) != "").any():
        return None
    values = pd.to_numeric(df["plan.efficiency"], errors="coerce").dropna().unique()
    return float(values[0]) if len(values) == 1 else None


def has_predictions(df: pd.DataFrame) -> bool:
    """Whether any row carries a predicted number (peak bytes or tokens/s)."""
    cols = [c for c in ("predicted_peak_bytes", "predicted_tokens_per_s_per_device") if c in df]
    return bool(len(df)) and any(df[c].notna().any() for c in cols)


def calibration(records: Sequence[Record]) -> Calibration | None:
    """:func:`sweeper.capacity.calibrate.calibrated_efficiency` of ``records`` (efficiency, n, p10, p90, ...), or None
    when there is nothing to calibrate on or the calibration cannot run (never raises: the report must be written)."""
    try:
        from sweeper.capacity.calibrate import calibrated_efficiency

        return calibrated_efficiency(list(records))
    except Exception:  # noqa: BLE001 - a report without the calibration line beats no report
        return None


def efficiency_value(x: float) -> str:
    """An efficiency as the override spells it: two significant digits (``0.37``, ``0.0043``)."""
    return f"{x:.2g}"


#: What the calibration says instead of a reuse command when every point ran on CPUs (:func:`reuse_command`).
CPU_EFFICIENCY = (
    "an efficiency measured against this CPU's matmul peak plans CPU hosts like this one, not a GPU cluster "
    "(measure a few points there: launcher=slurm cluster=<name>)"
)


def reuse_command(df: pd.DataFrame, efficiency: float) -> str | None:
    """``python -m sweeper.plan cluster=<name> [model=M] [seq_len=S] plan.efficiency=E``: the model and sequence
    length when the whole sweep has one value of each; ``cluster=<name>`` is the placeholder the reader fills in
    (the planner requires it), a cluster of the devices these points ran on: an efficiency is a fraction of the
    measured device's peak. None when every point ran on CPUs (:data:`CPU_EFFICIENCY` says why)."""
    kinds = {str(v) for v in df.get("device_type", pd.Series(dtype=object)) if not missing(v)}
    if kinds == {"cpu"}:
        return None
    parts = ["python -m sweeper.plan", "cluster=<name>"]
    for key in ("model", "seq_len"):
        values = {str(v) for v in df.get(key, pd.Series(dtype=object)) if not missing(v)}
        if len(values) == 1:
            parts.append(f"{key}={values.pop()}")
    parts.append(f"plan.efficiency={efficiency_value(efficiency)}")
    return " ".join(parts)


def calibration_parts(cal: Calibration | None, df: pd.DataFrame) -> tuple[str, str | None] | None:
    """(``plan.efficiency=0.NN calibrated on N ok points (p10-p90 a-b; peak: <source>)``, the
    ``python -m sweeper.plan`` command that reuses it or None: :func:`reuse_command`), plain text; None without a
    calibration."""
    if cal is None:
        return None
    from sweeper.capacity.calibrate import group_label

    e = float(cal.efficiency)
    about = []
    if not missing(cal.p10) and not missing(cal.p90):
        about.append(f"p10-p90 {efficiency_value(cal.p10)}-{efficiency_value(cal.p90)}")
    if cal.peak_source:
        about.append(f"peak: {one_line(cal.peak_source)}")
    span = f" ({'; '.join(about)})" if about else ""
    plural = "s" if cal.n != 1 else ""
    groups = getattr(cal, "groups", None) or {}
    per = "; ".join(
        f"{group_label(k)} {efficiency_value(g.efficiency)}"
        + (f" + {g.overhead_s * 1e3:.3g} ms/step" if g.overhead_s else "")
        + (ABOVE_PEAK if g.efficiency > 1 else "")
        for k, g in groups.items()
    )
    # the overall figure is of the whole step; a group's is of its compute alone (its communication and per-step
    # overhead taken out), so a group may stand above the overall p90 (a newcomer read that as a contradiction)
    per = (
        f"; per group, compute alone (communication and per-step overhead taken out; plan.calibrate=<this sweep dir>): "
        f"{per}"
        if len(groups) > 1
        else ""
    )
    line = f"plan.efficiency={efficiency_value(e)} calibrated on {cal.n:,} ok point{plural}{span}{per}"
    return line, reuse_command(df, e)


#: A group's compute efficiency above 1 is no measurement: the model took more communication and host time out of
#: its steps than they leave room for (the compute it implies runs faster than the peak), so it says so.
ABOVE_PEAK = (
    " (above the peak: the model takes more communication and host time out of these steps than they leave room for, "
    "so this is not a measured efficiency)"
)


def calibration_line(cal: Calibration | None, df: pd.DataFrame) -> str | None:
    """``plan.efficiency=0.NN calibrated on N ok points (p10-p90 a-b); reuse: python -m sweeper.plan ...``, plain
    text; None without a calibration."""
    parts = calibration_parts(cal, df)
    if parts is None:
        return None
    line, command = parts
    return f"{line}; reuse: {command}" if command else f"{line}; {CPU_EFFICIENCY}"


def pruned_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows listed apart (:data:`APART`), by point id."""
    return df[df["status"].isin(APART)].sort_values("point_id", kind="stable") if len(df) else df


def summary_lines(df: pd.DataFrame, records: Sequence[Record]) -> list[str]:
    """Plain-text lines for the terminal at the end of a sweep: the model's error on each quantity (with why the
    tokens/s error is large when the predictions were the uncalibrated guess), the calibrated efficiency with the
    command that reuses it, and how many points were pruned. Empty when nothing was predicted."""
    lines = []
    if has_predictions(df):
        lines.append("Predicted vs measured: " + "; ".join(s.line() for s in error_stats(df)))
        cal = calibration_line(calibration(records), df)
        uncalibrated = uncalibrated_efficiency(df)
        if cal and uncalibrated is not None:  # the report's sentence, said where the error is printed
            lines.append(
                f"  (tokens/s predicted with plan.efficiency={uncalibrated:g} and no plan.calibrate: the model's guess "
                "before any measurement on this host, so a large tokens/s error is expected; the efficiency this "
                "sweep measured follows)"
            )
        if cal:
            lines.append(cal)
    # the search's skipped points are listed apart too, but said by its own cost line: "pruned" is prune=true's
    n_pruned = int(df["status"].eq("pruned").sum()) if len(df) else 0
    if n_pruned:
        lines.append(f"Pruned: {n_pruned:,} point(s) predicted not to fit were not launched (see the report)")
    return lines


def prediction_blocks(
    df: pd.DataFrame, records: Sequence[Record]
) -> tuple[list[str], tuple[str, str | None] | None, list[str]]:
    """The report's "Predicted vs measured" content: (error bullets as Markdown, :func:`calibration_parts` as plain
    text or None, notes as Markdown). Outside text (the model's notes) is escaped."""
    bullets = [escape(s.line()) for s in error_stats(df)]
    cal = calibration_parts(calibration(records), df)
    ok = df[df["status"] == "ok"] if len(df) else df
    notes = sorted({text(n) for n in ok.get("predicted_note", pd.Series(dtype=object)) if not missing(n)})
    extra = []
    if notes:
        extra.append(f"Model notes on ok points: {capped([escape(n) for n in notes], 3)}.")
    cpu = ok.get("device_type", pd.Series(dtype=object)).astype(str).eq("cpu")
    if cpu.any():
        extra.append(
            "On CPU ranks there is no datasheet peak: the predicted tokens/s of a CPU point uses the host's measured "
            f"matmul peak, the one its MFU divides by ({code('mfu_peak_flop_per_s')}), so its error tests the FLOP "
            "count and the efficiency, not a device's peak."
        )
    return bullets, cal, extra
