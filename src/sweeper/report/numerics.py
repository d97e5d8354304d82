"""Do the points that should train the same numbers train them? The report's per-step loss comparison.

Points of one model (its name and numbers), seed, sequence length and **global batch** (samples per optimizer step:
``per_device_batch_size × grad_accum × dp``) see the same samples in the same order (the harness builds one batch
per data-parallel rank and step, whatever the engine, ``tp`` or ``sp``), start from the same weights and take the
same optimizer steps: their per-step training losses (``series.loss``) must agree up to what their precision explains.
A point that departs further computes different numerics under its label (a sharding bug, a wrong mesh, a library
regression): a finding the reader must see, whatever the axis.

The reference of a group is its first point in fp32 (else its first point); the tolerance is the larger of the two
points' precisions' (:data:`TOLERANCE`). A model with dropout is not compared: dropout draws masks from each rank's
random state, which depends on the layout, so equal losses are not expected.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sweeper.results.record import Record

#: Largest |loss - reference loss| at any common step that a precision explains (absolute, nats). fp32: reduction
#: order only (DDP, ZeRO, FSDP, AutoTP and Ulysses agree within 1e-4 on the CPU points); 16-bit formats: their
#: rounding (bf16 keeps 8 bits of mantissa: about 4e-3 relative on a loss of ~7).
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 2e-2}


@dataclass(frozen=True)
class Departure:
    """One point compared with its group's reference.

    Attributes:
        point_id, reference_id: the two points. steps: common logged steps compared.
        max_abs: the largest |loss - reference loss| over them (nats). tolerance: what the precisions explain.
        group: a person's description of the group (model, seed, sequence length, global batch).
    """

    point_id: str
    reference_id: str
    steps: int
    max_abs: float
    tolerance: float
    group: str

    @property
    def flagged(self) -> bool:
        """The departure is larger than the precisions explain."""
        return self.max_abs > self.tolerance


def _tolerance(r: Record) -> float:
    return TOLERANCE.get(str((r.spec or {}).get("precision")), max(TOLERANCE.values()))


def _has_dropout(config: dict[str, Any]) -> bool:
    return any(("dropout" in k or "pdrop" in k) and isinstance(v, (int, float)) and v > 0 for k, v in config.items())


def _key(r: Record) -> tuple[str, ...] | None:
    """The group a record compares within, or None (not comparable: no spec, no losses, dropout)."""
    s = r.spec or {}
    losses = (r.series or {}).get("loss") or []
    if r.status != "ok" or not s or len(losses) < 2:
        return None
    config = dict(s.get("model_config") or {})
    if _has_dropout(config) or (s.get("model_type") == "gpt2" and not config):  # gpt2's defaults drop out 0.1
        return None
    ws = int(s.get("ranks_per_node", 1)) * int(s.get("nodes", 1))
    dp = max(1, ws // (int(s.get("tp", 1)) * int(s.get("sp", 1)) * int(s.get("pp", 1))))  # as PointSpec.dp
    micro = s.get("per_device_batch_size")  # a searched point's record holds the batch it ran
    if not isinstance(micro, int) or isinstance(micro, bool):
        return None
    samples = micro * int(s.get("grad_accum", 1)) * dp
    return (
        str(s.get("model")),
        json.dumps(config, sort_keys=True, default=str),
        str(s.get("seed")),
        str(s.get("seq_len")),
        str(samples),
    )


def departures(records: Sequence[Record]) -> list[Departure]:
    """Every comparable point against its group's reference (groups of two or more points), in record order."""
    groups: dict[tuple[str, ...], list[Record]] = {}
    for r in records:
        k = _key(r)
        if k is not None:
            groups.setdefault(k, []).append(r)
    out = []
    for (model, _, seed, seq_len, samples), members in groups.items():
        if len(members) < 2:
            continue
        ref = next((r for r in members if (r.spec or {}).get("precision") == "fp32"), members[0])
        ref_losses = (ref.series or {})["loss"]
        what = f"model={model} seed={seed} seq_len={seq_len}, {samples} samples per step"
        for r in members:
            if r is ref:
                continue
            losses = (r.series or {})["loss"]
            n = min(len(losses), len(ref_losses))
            # a step without a logged loss (None) on either side is not compared
            pairs = [(a, b) for a, b in zip(losses[:n], ref_losses[:n], strict=True) if a is not None and b is not None]
            if not pairs:
                continue
            n = len(pairs)
            gap = max(abs(float(a) - float(b)) for a, b in pairs)
            tol = max(
                TOLERANCE.get(str(r.spec.get("precision")), 5e-2), TOLERANCE.get(str(ref.spec.get("precision")), 5e-2)
            )
            out.append(Departure(r.point_id, ref.point_id, n, gap, tol, what))
    return out


def departure_frame(found: Sequence[Departure], label_of: dict[str, str]) -> pd.DataFrame:
    """The comparison as the report's table: one row per compared point."""
    rows = [
        {
            "point": label_of.get(d.point_id, d.point_id),
            "reference": label_of.get(d.reference_id, d.reference_id),
            "group": d.group,
            "steps": d.steps,
            "max |Δ loss|": f"{d.max_abs:.2e}",
            "tolerance": f"{d.tolerance:.0e}",
            "numerics": "DIFFER" if d.flagged else "same",
        }
        for d in found
    ]
    return pd.DataFrame(rows)
