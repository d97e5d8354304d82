"""The capacity-planning model's numbers a record carries (``Record.predicted``): the one place a point's prediction
is made for its record (:mod:`sweeper.point.lifecycle`), never failing the point."""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target


def predicted_for(spec: PointSpec, target: Target, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """The capacity-planning model's numbers for ``spec`` on ``target``, as ``Record.predicted`` holds them
    (:meth:`sweeper.capacity.predict.Prediction.to_record`: flat JSON, keys without the ``predicted_`` prefix).

    Throughput needs the device's peak FLOP/s. A CPU has no datasheet peak, so when the model finds none and
    ``metrics`` (a finished point's measurements) holds the matmul peak the point measured for its MFU
    (``mfu_peak_flops``, ``mfu_peak_source``), the prediction is made again with that peak: a CPU point's
    predicted tokens/s uses its own measured matmul peak (``docs/planning.md``).

    With ``spec.prune`` and no device capacity known (``fits`` None: no ``cluster.gpu_mem_gib``), ``note`` says the
    point was not pruned and why.

    Never raises: the model itself does not, and anything unexpected (a bug in it, a value JSON cannot hold)
    becomes a dict with only a ``note`` saying so, since a prediction must never cost a point its record.
    """
    try:
        from sweeper.capacity.predict import predict

        pred = predict(spec, target)
        peak = (metrics or {}).get("mfu_peak_flops")
        if getattr(pred, "peak_flops", None) is None and _positive(peak):
            source = (metrics or {}).get("mfu_peak_source") or "measured matmul peak of this point"
            pred = predict(spec, target, measured_peak_flops=float(peak), peak_source=str(source))
        out = json.loads(json.dumps(pred.to_record(), default=str))
        if not isinstance(out, dict):
            raise TypeError(f"Prediction.to_record() gave a {type(out).__name__}, not a dict")
    except Exception as e:  # noqa: BLE001 - a bug in the model must not cost the point its record
        return {"note": f"no prediction: the capacity model failed on this point (a bug): {type(e).__name__}: {e}"}
    if spec.prune and out.get("fits") is None:
        why = (
            "no device memory is known (set cluster.gpu_mem_gib)"
            if out.get("device_mem_bytes") is None
            else "the model could not predict its memory"
        )
        note = f"prune=true but not pruned: whether it fits is unknown, {why}"
        out["note"] = f"{out['note']}; {note}" if out.get("note") else note
    return out


def _positive(x: object) -> TypeGuard[float]:
    """``x`` is a finite number above 0 (an int or a float, not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
