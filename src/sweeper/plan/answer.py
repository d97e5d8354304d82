"""The plan's answer, first in the terminal and in ``plan.md``: for each model and cluster planned, the configuration
predicted to train ``train_tokens`` in the fewest days among those predicted to fit, or why there is none.

A row counts at its largest batch that fits (``max_per_device_batch_size``, the plan's ``... at max batch`` columns)
when the model found one, else at its own batch. Ties (equal days) go to the row with fewer predicted device bytes.
Rows whose fit is unknown are never chosen and are counted; rows that fit but whose throughput is unknown (no peak,
or offload outside the time model) are never ranked, and the answer counts them (one of them may be faster). Rows
within :data:`NEAR` of the fastest's days are named beside it. Everything here is a prediction, and says so.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sweeper import units
from sweeper.plan.rows import PLANNED
from sweeper.report.fmt import cli
from sweeper.units import missing

#: Rows within this fraction of the fastest's days are named beside it: the time model's error on this machine's
#: benchmark is 10-25 % (benchmarks/README.md, ``plan_time.py``), so such rows are not told apart by it.
NEAR = 0.05


def _known(v: Any) -> bool:
    return not missing(v) and bool(v)


def _label(row: pd.Series, keys: list[str]) -> str:
    """The row as the keys that tell it apart: ``FSDP full_shard gc=false seq_len=4096``."""
    return " ".join([str(row["engine"]), *(f"{k}={cli(row[k])}" for k in keys)])


def _at_best_batch(row: pd.Series) -> tuple[Any, Any, Any, Any, bool]:
    """(days, GPU-hours, tokens/s per device, batch, at the largest batch that fits) of a row that fits."""
    best = row["max_per_device_batch_size"]
    if _known(best) and not missing(row["predicted_train_days_at_max_batch"]):
        return (
            row["predicted_train_days_at_max_batch"],
            row["predicted_gpu_hours_at_max_batch"],
            row["predicted_tokens_per_s_per_device_at_max_batch"],
            int(best),
            True,
        )
    tps = row["predicted_tokens_per_s_per_device"]
    days, hours = row["predicted_train_days"], row["predicted_gpu_hours"]
    return days, hours, tps, int(row["per_device_batch_size"]), False


def _across(row: pd.Series) -> str:
    """The answer's warning when its throughput comes from a calibration measured on other hardware or in another
    precision (``plan.calibrate_across=true``): the efficiency source's words, so that the answer says what it
    applied; "" otherwise."""
    from sweeper.capacity.calibrate import ACROSS

    source = row.get("predicted_efficiency_source")
    if missing(source) or ACROSS not in str(source):
        return ""
    return f". Its throughput is {source}: not this hardware's efficiency"


def answer_lines(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """One line per (model, cluster) of the plan's rows ``df`` (:func:`sweeper.plan.rows.plan_frame`), plus one per
    group with rows whose fit is unknown; ``keys`` are the columns that tell rows apart besides ``engine`` (``gc``
    and the keys that vary). Plain text; GiB = 2**30 bytes."""
    planned = df[df["status"] == PLANNED]
    if not len(planned):
        return ["Answer: none: every configuration was refused before the model (the reasons are below)"]
    groups = list(planned.groupby(["model", "cluster"], sort=False))
    out = []
    for (model, cluster), rows in groups:
        where = f" ({model} on {cluster})" if len(groups) > 1 else ""
        fits = rows[[_known(v) for v in rows["fits"]]]
        unknown = int(sum(missing(v) for v in rows["fits"]))
        if not len(fits):
            known = rows[[not missing(v) for v in rows["predicted_device_bytes"]]]
            # "does not fit" only of the rows whose fit is known: an unknown fit is never a "no"
            verdict = (
                "whether any configuration fits is unknown (see the notes)"
                if unknown == len(rows)
                else "no configuration is predicted to fit"
                + (f" of the {len(rows) - unknown} whose fit is known" if unknown else "")
            )
            if len(known):
                small = known.loc[pd.to_numeric(known["predicted_device_bytes"]).idxmin()]
                out.append(
                    f"Answer{where}: {verdict}. The smallest, {_label(small, keys)}, "
                    f"needs {units.in_unit(small['predicted_device_bytes'], 'GiB')} per device"
                )
            else:
                out.append(f"Answer{where}: {verdict}")
        else:
            choices, unranked = [], 0
            for _, row in fits.iterrows():
                days, hours, tps, batch, at_max = _at_best_batch(row)
                if missing(days):
                    unranked += 1  # fits, but its time is unknown: "fastest" would not be true of the others
                else:
                    choices.append((float(days), float(row["predicted_device_bytes"]), row, hours, tps, batch, at_max))
            if not choices:
                out.append(
                    f"Answer{where}: {len(fits)} configuration(s) predicted to fit; their throughput is unknown "
                    "(see the notes), so none is ranked"
                )
            else:
                days, device, row, hours, tps, batch, at_max = min(choices, key=lambda c: (c[0], c[1]))
                # the device bytes are the planned batch's; at a larger batch the model knows only that it fits
                memory = f"{units.in_unit(device, 'GiB')} per device"
                cap, margin = row["predicted_device_mem_bytes"], row["predicted_margin"]
                if batch != int(row["per_device_batch_size"]) and not missing(cap) and not missing(margin):
                    memory = f"within the usable {units.in_unit(float(cap) * (1 - float(margin)), 'GiB')} per device"
                nodes, per_node = int(row["nodes"]), int(row["ranks_per_node"])
                devices = f"{nodes * per_node} devices ({nodes} node(s) x {per_node})"
                batch_text = f"per_device_batch_size={batch}" + (" (the largest predicted to fit)" if at_max else "")
                close = [
                    f"{_label(c[2], keys)} ({units.days(c[0])} days)"
                    for c in sorted(choices, key=lambda c: (c[0], c[1]))
                    if c[2] is not row and c[0] <= days * (1 + NEAR)
                ]
                also = f"; within {NEAR:.0%} of it: {', '.join(close)}" if close else ""
                out.append(
                    f"Answer{where}: fastest predicted to fit: {_label(row, keys)} at {batch_text}: "
                    f"{float(tps):,.0f} tokens/s per device, {units.days(days)} days and {float(hours):,.0f} GPU-hours "
                    f"on {devices} for train_tokens={float(row['train_tokens']):.3g} ({memory}){also}. "
                    "A prediction: measure it before relying on it" + _across(row)
                )
                if unranked:
                    out.append(
                        f"  {unranked} other configuration(s) predicted to fit have an unknown throughput and are not "
                        "ranked (see the notes): one of them may be faster"
                    )
        if unknown and (len(fits) or unknown < len(rows)):  # all unknown: the verdict said so
            out.append(f"  {unknown} configuration(s) with an unknown fit are not considered (see the notes)")
    return out
