"""The time model: step time, throughput, MFU and the length of a training run, before anything runs.

::

    compute_s = tokens per step per device × (6N + 12·L·a·d·s  [+ one forward, 2N + 4·L·a·d·s, with gc])
                / (peak FLOP/s in the compute dtype × efficiency)
    comm_s    = bytes each device sends per step / bandwidth
    step_s    = compute_s + max(0, comm_s − comm_overlap × compute_s)

* FLOPs per token: PaLM (Chowdhery et al. 2022, Appendix B); checkpointing adds one forward (about a third).
* Peak: the datasheet table of :mod:`sweeper.results.mfu` (the same one MFU uses), by device name and dtype.
* Efficiency: the achieved fraction of that peak, recompute included (hardware FLOP utilisation). It defaults to a
  stated value (``plan.efficiency``, 0.4: well-tuned dense LLM training reaches an MFU of 0.4–0.55 on A100/H100,
  PaLM Table 3, Megatron-LM's published runs) and is calibrated on a sweep's ``ok`` points
  (:mod:`sweeper.capacity.calibrate`).
* Communication per optimizer step, per device, with N ranks in the ring: ring all-reduce moves ``2(N−1)/N · S``
  (S = gradient bytes; Patarasuk & Yuan 2009, NCCL docs); ZeRO-1/2 do a reduce-scatter of gradients plus an
  all-gather of parameters (the same volume, ZeRO paper §7); ZeRO-3 and FSDP ``full_shard`` gather the parameters
  in forward and again in backward and reduce-scatter the gradients: ``3(N−1)/N · S`` (1.5 × DDP); ``shard_grad_op``
  gathers once: ``2(N−1)/N · S``; ``hybrid_shard`` does full_shard inside a node and an all-reduce of each shard
  across nodes. Bandwidths are per device, ``cluster.intra_node_bandwidth_gb_s`` on one node and
  ``inter_node_bandwidth_gb_s`` once the ring crosses nodes.
* Overlap assumption (stated, configurable as ``plan.comm_overlap``): communication hides behind that fraction of
  the compute time (default 0.67, the backward pass's share of the FLOPs, where DDP's bucketed all-reduce and
  FSDP's prefetching overlap); the rest is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.capacity.arch import Arch
from sweeper.capacity.states import Layout


@dataclass(frozen=True)
class TimeEstimate:
    """Predicted time of one optimizer step of one point.

    Attributes:
        flops_per_token: PaLM training FLOPs per token (MFU's numerator; no recompute).
        step_flops: FLOPs one device does per optimizer step, recompute included.
        compute_s: seconds of compute per step at ``efficiency`` of ``peak_flops``.
        comm_bytes: bytes each device sends per step (ring collectives).
        comm_s: seconds of communication per step (None when the bandwidth is unknown: not modelled).
        step_s: predicted seconds per optimizer step.
        tokens_per_s_per_device: tokens/s per device.
        mfu: fraction of the peak (PaLM, recompute not counted).
    """

    flops_per_token: float
    step_flops: float
    compute_s: float
    comm_bytes: float
    comm_s: float | None
    step_s: float
    tokens_per_s_per_device: float
    mfu: float


def step_flops(arch: Arch, *, batch: int, seq_len: int, grad_accum: int, gc: bool) -> float:
    """FLOPs one device does per optimizer step: tokens × PaLM FLOPs per token, plus one forward per token with
    full checkpointing (the recompute; hardware FLOPs, not MFU's model FLOPs)."""
    per_token = arch.flops_per_token(seq_len) + (arch.forward_flops_per_token(seq_len) if gc else 0.0)
    return batch * seq_len * grad_accum * per_token


def comm_bytes_per_step(arch: Arch, lay: Layout, nodes: int, grad_accum: int = 1) -> tuple[float, float]:
    """Bytes one device sends per optimizer step inside its node and across nodes (see the module doc).

    Returns:
        ``(intra_node_bytes, inter_node_bytes)``; a one-node point has no inter-node bytes.
    """
    n = lay.world
    if n <= 1:
        return 0.0, 0.0
    grads = arch.total_params * (lay.compute_bytes if lay.deepspeed else lay.param_bytes)
    gathered = arch.total_params * lay.gathered_bytes
    ring = (n - 1) / n
    if lay.strategy in ("ddp", "zero1", "zero2"):
        volume = 2 * ring * grads
    elif lay.strategy in ("zero3", "fsdp_full"):
        volume = 2 * ring * gathered * grad_accum + ring * grads
    elif lay.strategy == "fsdp_grad_op":
        volume = ring * gathered * grad_accum + ring * grads
    else:  # fsdp_hybrid: full_shard over the node's ranks, then an all-reduce of each shard across nodes
        k = lay.shards
        inner = (k - 1) / k
        intra = 2 * inner * gathered * grad_accum + inner * grads
        m = max(1, n // k)
        return intra, (2 * (m - 1) / m * grads / k if m > 1 else 0.0)
    return (volume, 0.0) if nodes <= 1 else (0.0, volume)


def estimate_time(
    arch: Arch,
    lay: Layout,
    *,
    batch: int,
    seq_len: int,
    grad_accum: int,
    gc: bool,
    nodes: int,
    peak_flops: float,
    efficiency: float,
    comm_overlap: float,
    intra_bw_gb_s: float | None,
    inter_bw_gb_s: float | None,
) -> TimeEstimate:
    """Predict one optimizer step (see the module doc for every formula and its source).

    Args:
        batch: micro-batch per device (samples); seq_len: tokens per sample; grad_accum: micro-batches per step.
        gc: full activation checkpointing (one extra forward). nodes: nodes the ranks span.
        peak_flops: the device's dense peak in the compute dtype, FLOP/s. efficiency: achieved fraction of it.
        comm_overlap: fraction of compute time that hides communication.
        intra_bw_gb_s, inter_bw_gb_s: per-device collective bandwidth, GB/s (10**9 bytes/s); None = unknown (then
            communication is not modelled and ``comm_s`` is None).

    Raises:
        ValueError: a non-positive ``peak_flops`` or ``efficiency``.
    """
    if peak_flops <= 0 or efficiency <= 0:
        raise ValueError(f"peak_flops ({peak_flops}) and efficiency ({efficiency}) must be positive")
    tokens = batch * seq_len * grad_accum
    fpt = arch.flops_per_token(seq_len)
    flops = step_flops(arch, batch=batch, seq_len=seq_len, grad_accum=grad_accum, gc=gc)
    compute_s = flops / (peak_flops * efficiency)
    intra, inter = comm_bytes_per_step(arch, lay, nodes, grad_accum)
    comm_s: float | None = 0.0
    for volume, bw in ((intra, intra_bw_gb_s), (inter, inter_bw_gb_s)):
        if volume:
            comm_s = None if bw is None or comm_s is None else comm_s + volume / (bw * 1e9)
    exposed = max(0.0, (comm_s or 0.0) - comm_overlap * compute_s)
    step_s = compute_s + exposed
    tps = tokens / step_s
    return TimeEstimate(fpt, flops, compute_s, intra + inter, comm_s, step_s, tps, tps * fpt / peak_flops)
