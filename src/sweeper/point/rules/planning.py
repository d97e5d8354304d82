"""Capacity planning's pre-flight pruning (status ``pruned``): with ``prune=true``, a point the memory model
predicts not to fit in the device's memory is not launched.

It runs after every other rule, so a configuration error is still ``invalid`` and a label the hardware cannot run
still ``unsupported`` before anything is pruned. The prediction is :func:`sweeper.capacity.predict.predict` (formulas
and sources in ``docs/planning.md``): "fits" means the predicted device bytes (peak tensor bytes per rank, plus on a
GPU the allocator's fragmentation allowance, the CUDA context and NCCL's buffers) are at most the capacity
(``cluster.gpu_mem_gib``) less the margin (``plan.memory_margin``), and the offloaded states per node (ZeRO-Offload,
FSDP ``cpu_offload``) at most the host memory (``cluster.host_mem_gib``) less the same margin. A point whose fit is
unknown (no capacity, an architecture or an optimizer the model does not know) is never pruned; its record's
``predicted.note`` says why. The advice of a pruned point never names a setting it already has (:func:`advice`).
"""

from __future__ import annotations

from typing import Any

from sweeper.capacity.offload import NONE, offload_of
from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.units import size_text

#: The keys a pruned point names: the switch, the capacity, the margin and the batch that sets the size.
KEYS = ("prune", "cluster.gpu_mem_gib", "plan.memory_margin", "per_device_batch_size")
#: The keys the rule concerns (``docs/gate.md``): :data:`KEYS` and the host memory offloaded states are judged against.
RULE_KEYS = (*KEYS, "cluster.host_mem_gib")


def size(n: float | None) -> str:
    """Bytes for a reason: GiB (2**30 bytes) from 1 GiB up, else MiB (2**20 bytes), binary units labelled."""
    return "unknown" if n is None else size_text(n)


def _prediction(spec: PointSpec, target: Target) -> Any | None:
    """The model's prediction, or None when it failed (a bug there must not refuse a point)."""
    try:
        from sweeper.capacity.predict import predict

        return predict(spec, target)
    except Exception:  # noqa: BLE001 - not pruned; lifecycle.predicted_for records the failure in predicted.note
        return None


def advice(spec: PointSpec, target: Target) -> list[str]:
    """What could make ``spec`` fit in device memory, naming only settings the point does not already have.

    Sharding: ``fsdp=full_shard or zero=3`` for an unsharded point, ``zero=3`` from ZeRO-1/2, ``fsdp=full_shard``
    from ``shard_grad_op`` (and from ``hybrid_shard`` on more than one node); checkpointing when ``gc=false``;
    offload of what is still on the device (ZeRO: the optimizer, and at stage 3 the parameters; FSDP:
    ``cpu_offload``); more ranks only where states are sharded (DDP replicates them) and the node has GPUs left.
    """
    off = offload_of(spec.fsdp, spec.zero, spec.fsdp_config, spec.deepspeed_config)
    out = []
    if spec.fsdp == "none" and spec.zero == 0:
        out.append("shard (fsdp=full_shard or zero=3)")
    elif spec.zero in (1, 2):
        out.append("shard more (zero=3)")
    elif spec.fsdp == "shard_grad_op" or (spec.fsdp == "hybrid_shard" and spec.nodes > 1):
        out.append("shard more (fsdp=full_shard)")
    if not spec.gc:
        out.append("gc=true")
    ds_offload = "+deepspeed_config.zero_optimization"
    if spec.zero and off.optimizer == NONE:
        out.append(f"offload the optimizer ({ds_offload}.offload_optimizer.device=cpu)")
    if spec.zero == 3 and off.params == NONE:
        out.append(f"offload the parameters ({ds_offload}.offload_param.device=cpu)")
    if spec.fsdp != "none" and not off.any:
        out.append("offload to the host (+fsdp_config.cpu_offload=true)")
    gpus = target.cluster.gpus_per_node
    sharded = spec.zero > 0 or spec.fsdp != "none"
    if sharded:
        out.append("more ranks" if gpus and spec.ranks_per_node < gpus else "more nodes")
    out.append("a device with more memory")
    return out


def pruned_reason(spec: PointSpec, pred: Any, target: Target | None = None) -> str:
    """The reason of a pruned point: predicted device bytes, the capacity, the margin used, the usable bytes and
    the largest per-device batch predicted to fit (or what to change when none does, :func:`advice`); or, for a
    point whose offloaded states do not fit the node's host memory, the host bytes against ``cluster.host_mem_gib``.
    Sizes in binary units."""
    margin = pred.margin or 0.0
    if pred.fits is not False and pred.host_fits is False:
        host_cap = pred.host_mem_bytes
        return (
            f"predicted not to fit in host memory (prune=true): {size(pred.host_bytes_per_node)} of offloaded states "
            f"per node > {size(host_cap * (1 - margin))} usable: {size(host_cap)} (cluster.host_mem_gib) less the "
            f"{margin * 100:g} % margin (plan.memory_margin); offload less, fewer ranks_per_node, or nodes with more "
            "memory; prune=false runs it anyway"
        )
    cap = pred.device_mem_bytes
    usable = cap * (1 - margin)
    extra = pred.device_bytes - (pred.peak_bytes or 0)
    peak = f"peak tensor bytes {size(pred.peak_bytes)}" + (f" at {pred.peak_phase}" if pred.peak_phase else "")
    over = f" + {size(extra)} allocator reserve, CUDA context and NCCL" if extra > 0 else ""
    best = pred.max_per_device_batch_size
    if best:
        tip = f"the largest per_device_batch_size predicted to fit is {best}"
    else:
        tip = "no per_device_batch_size is predicted to fit: " + ", ".join(advice(spec, target or Target()))
    return (
        f"predicted not to fit (prune=true): {size(pred.device_bytes)} per device ({peak}{over}) at "
        f"per_device_batch_size={spec.per_device_batch_size} > {size(usable)} usable: {size(cap)} capacity "
        f"(cluster.gpu_mem_gib) less the {margin * 100:g} % margin (plan.memory_margin); {tip}; "
        "prune=false runs it anyway"
    )


@rule(
    "C01",
    RULE_KEYS,
    "with prune=true, a point predicted not to fit in cluster.gpu_mem_gib (or its offloaded states in "
    "cluster.host_mem_gib) less plan.memory_margin is not launched; a point whose fit is unknown is never pruned",
    "sweeper.capacity.predict (memory model, docs/planning.md); runs after every other rule",
    status="pruned",
)
def _predicted_not_to_fit(spec: PointSpec, target: Target):
    if not spec.prune:
        return None
    pred = _prediction(spec, target)
    if pred is None:
        return None
    if pred.fits is False and pred.device_bytes is not None and pred.device_mem_bytes:
        return pruned_reason(spec, pred, target), KEYS
    if pred.host_fits is False and pred.host_bytes_per_node is not None and pred.host_mem_bytes:
        return pruned_reason(spec, pred, target), (*KEYS[:1], "cluster.host_mem_gib", *KEYS[2:])
    return None
