"""Capacity planning's pre-flight pruning (status ``pruned``): with ``prune=true``, a point the memory model
predicts not to fit in the device's memory is not launched.

It runs after every other rule, so a configuration error is still ``invalid`` and a label the hardware cannot run
still ``unsupported`` before anything is pruned. The prediction is :func:`sweeper.capacity.predict.predict` (formulas
and sources in ``docs/planning.md``): "fits" means the predicted device bytes (peak tensor bytes per rank, plus on a
GPU the allocator's fragmentation allowance, the CUDA context and NCCL's buffers) are at most the capacity
(``cluster.gpu_mem_gib``) less the margin (``plan.memory_margin``). A point whose fit is unknown (no capacity, an
architecture the model does not know) is never pruned; its record's ``predicted.note`` says why.
"""

from __future__ import annotations

from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.units import GIB, MIB

#: The keys a pruned point names: the switch, the capacity, the margin and the batch that sets the size.
KEYS = ("prune", "cluster.gpu_mem_gib", "plan.memory_margin", "per_device_batch_size")


def size(n: float | None) -> str:
    """Bytes for a reason: GiB (2**30 bytes) from 1 GiB up, else MiB (2**20 bytes), binary units labelled."""
    if n is None:
        return "unknown"
    return f"{n / GIB:,.2f} GiB" if abs(n) >= GIB else f"{n / MIB:,.2f} MiB"


def _prediction(spec: PointSpec, target: Target) -> Any | None:
    """The model's prediction, or None when it failed (a bug there must not refuse a point)."""
    try:
        from sweeper.capacity.predict import predict

        return predict(spec, target)
    except Exception:  # noqa: BLE001 - not pruned; lifecycle.predicted_for records the failure in predicted.note
        return None


def pruned_reason(spec: PointSpec, pred: Any) -> str:
    """The reason of a pruned point: predicted device bytes, the capacity, the margin used, the usable bytes and
    the largest per-device batch predicted to fit (or what to change when none does). Sizes in binary units."""
    cap, margin = pred.device_mem_bytes, pred.margin or 0.0
    usable = cap * (1 - margin)
    extra = pred.device_bytes - (pred.peak_bytes or 0)
    peak = f"peak tensor bytes {size(pred.peak_bytes)}" + (f" at {pred.peak_phase}" if pred.peak_phase else "")
    over = f" + {size(extra)} allocator reserve, CUDA context and NCCL" if extra > 0 else ""
    best = pred.max_per_device_batch_size
    if best:
        advice = f"the largest per_device_batch_size predicted to fit is {best}"
    else:
        advice = (
            "no per_device_batch_size is predicted to fit: shard more (fsdp=full_shard or zero=3), gc=true, "
            "more ranks, or a device with more memory"
        )
    return (
        f"predicted not to fit (prune=true): {size(pred.device_bytes)} per device ({peak}{over}) at "
        f"per_device_batch_size={spec.per_device_batch_size} > {size(usable)} usable: {size(cap)} capacity "
        f"(cluster.gpu_mem_gib) less the {margin * 100:g} % margin (plan.memory_margin); {advice}; "
        "prune=false runs it anyway"
    )


@rule(
    "C01",
    KEYS,
    "with prune=true, a point predicted not to fit in cluster.gpu_mem_gib less plan.memory_margin is not launched",
    "sweeper.capacity.predict (memory model, docs/planning.md); runs after every other rule",
    status="pruned",
)
def _predicted_not_to_fit(spec: PointSpec, target: Target):
    if not spec.prune:
        return None
    pred = _prediction(spec, target)
    if pred is None or pred.fits is not False or pred.device_bytes is None or not pred.device_mem_bytes:
        return None
    return pruned_reason(spec, pred), KEYS
