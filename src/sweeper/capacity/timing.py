"""The time model: step time, throughput, MFU and the length of a training run, before anything runs.

::

    kernel_s  = FLOPs per step per device (recompute included) / (peak FLOP/s in the compute dtype × efficiency)
    comm_s    = Σ over the step's collectives of  count × ring_time(kind, bytes)
    step_s    = overhead_s + kernel_s + comm_s − min(overlap × kernel_s, hideable comm_s)

``TimeEstimate.compute_s`` is ``overhead_s + kernel_s``; only ``kernel_s`` hides communication.

* FLOPs per token: PaLM (Chowdhery et al. 2022, Appendix B), ``6N + 12·L·a·d·s``; full checkpointing adds one
  forward (``2N + 4·L·a·d·s``, hardware FLOPs).
* Peak: the datasheet table of :mod:`sweeper.results.mfu` by device and dtype; a CPU's is measured per dtype
  (:mod:`sweeper.job.cpu_peak`). Efficiency: the achieved fraction of it, ``plan.efficiency`` or calibrated per
  engine family and checkpointing on a measured sweep (:mod:`sweeper.capacity.calibrate`).
* Each collective costs ``steps·latency + wire bytes / bandwidth`` on a ring of N ranks (all-reduce: 2(N−1) steps,
  2(N−1)/N·S on the wire; all-gather / reduce-scatter: N−1 steps, (N−1)/N·S; Patarasuk & Yuan 2009; NCCL
  ``PERFORMANCE.md``), :func:`sweeper.capacity.hostcomm.ring_time`. Latency and bandwidth: a CPU host's gloo,
  measured (:mod:`sweeper.job.gloo_probe`); a GPU cluster's ``cluster.intra_node_bandwidth_gb_s`` /
  ``inter_node_bandwidth_gb_s`` with :data:`NCCL_STEP_LATENCY_S`.
* What each engine communicates per optimizer step of A micro-batches (:func:`collectives`):

  - **DDP**: one all-reduce per gradient bucket, buckets filled in reverse parameter order up to 1 MiB for the
    first (``dist._DEFAULT_FIRST_BUCKET_BYTES``) and 25 MiB after (``bucket_cap_mb=25``,
    ``torch/nn/parallel/distributed.py``), in the gradients' dtype (fp32 under autocast). Only on the last
    micro-batch: accelerate accumulates under ``no_sync``.
  - **ZeRO-1/2** (DeepSpeed ``stage_1_and_2.py``): gradients go into buckets of ``reduce_bucket_size`` elements,
    which HF's ``"auto"`` sets to hidden² (``transformers/integrations/deepspeed.py``); a tensor larger than a bucket
    is reduced alone. Each bucket is all-reduced (``average_tensor`` with ``use_multi_rank_bucket_allreduce=True``,
    the default) in the 16-bit dtype under bf16/fp16. ZeRO-2 reduces on every micro-batch (it partitions gradients
    as they come), ZeRO-1 at the accumulation boundary. After the step each of HF's two parameter groups is
    all-gathered (``all_gather_dp_groups``, ``allgather_bucket_size`` 5·10⁸ elements), and the gradient norm is
    all-reduced once (``gradient_clipping``).
  - **ZeRO-3** (``stage3.py``): every parameter tensor above ``stage3_param_persistence_threshold`` (auto: 10·hidden)
    is all-gathered in forward and again in backward, per micro-batch; gradients are reduce-scattered in buckets of
    hidden² elements.
  - **FSDP2** (``fully_shard``, as accelerate 1.15's ``fsdp2_prepare_model`` wraps a model: each decoder layer,
    the input embedding, the tail [final norm, output head] and the root, which then holds no parameter): one
    all-gather per unit in every micro-batch's forward; ``full_shard`` all-gathers the layers and the embedding
    again in backward (``reshard_after_forward=True``; the tail is never resharded), ``shard_grad_op`` does not;
    one reduce-scatter per unit on the last micro-batch (``set_requires_gradient_sync(False)`` before). Gathers and
    reductions in the compute dtype (``MixedPrecisionPolicy(param_dtype, reduce_dtype)``).
    ``hybrid_shard``: ``full_shard`` inside the node plus an all-reduce of each unit's shard across nodes.
* Engine host work on CPU ranks (:func:`engine_host_s`), measured on this host by the gloo probe: FSDP2's DTensor
  optimizer step per parameter tensor (24 ms for 21 tensors against 1 ms on plain tensors, measured here) and its
  per-unit hooks and copies per micro-batch; DeepSpeed ZeRO-1/2's per-tensor host work (the ZeRO probe); none for
  DDP and ZeRO-3 (:func:`engine_host_s`).
* Per-step overhead (``overhead_s``): host time per step that does not grow with the batch, calibrated on measured
  points (:mod:`sweeper.capacity.calibrate`); 0 without a calibration. It hides no communication: it is host work
  outside the passes (Python dispatch, the optimizer's per-tensor loop, the Trainer's bookkeeping), while the
  collectives issued in backward overlap the backward pass's kernels only.
* Overlap (``plan.comm_overlap``, default 0.67, the backward pass's share of the FLOPs): on a GPU the collectives
  issued during backward (gradient buckets, FSDP's backward gathers and reduce-scatters) hide behind that fraction of
  the compute time. On CPU ranks nothing hides: gloo copies and reduces on the same cores the ranks compute on
  (2 ranks on 2 cores here), so every collective is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.capacity.arch import Arch
from sweeper.capacity.hostcomm import HostComm, ring_time
from sweeper.capacity.states import Layout

#: DDP's first bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``) and later buckets (``bucket_cap_mb=25``),
#: bytes (MiB, as torch computes them: ``bucket_cap_mb * 1024 * 1024``).
DDP_FIRST_BUCKET_BYTES = 1 << 20
DDP_BUCKET_BYTES = 25 << 20
#: DeepSpeed's ``allgather_bucket_size`` default (elements; ``deepspeed/runtime/zero/config.py``).
ZERO_ALLGATHER_BUCKET = 500_000_000
#: Seconds per ring step of NCCL on a GPU cluster when the cluster config gives none: NCCL's tuning model charges
#: a few microseconds per step (``src/graph/tuning.cc``: base latency 6.8 µs for the Simple protocol plus ~1 µs per
#: NVLink hop); nccl-tests' small all-reduces on 8 GPUs take 10–30 µs over 14 steps. Inter-node: an IB hop.
NCCL_STEP_LATENCY_S = {"intra": 2e-6, "inter": 8e-6}


@dataclass(frozen=True)
class Collective:
    """One kind of collective an engine issues per optimizer step.

    Attributes:
        kind: ``all_reduce``, ``all_gather``, ``reduce_scatter`` or ``all_to_all`` (``nbytes``: this rank's buffer).
        nbytes: the full buffer (bytes): the all-reduced tensor, the gathered output, the reduce-scatter input.
        count: how many per optimizer step.
        hideable: issued during backward (can overlap compute on a GPU).
        inter: the ring crosses nodes (the inter-node link bounds it).
        group: ``dp`` (the ranks holding the same parameters: the engine's gradient and parameter traffic), ``tp``
            (one tensor-parallel group: activations) or ``sp`` (one Ulysses group: q, k, v and attention outputs).
    """

    kind: str
    nbytes: float
    count: float
    hideable: bool
    inter: bool = False
    group: str = "dp"


@dataclass(frozen=True)
class TimeEstimate:
    """Predicted time of one optimizer step of one point.

    Attributes:
        flops_per_token: PaLM training FLOPs per token (MFU's numerator; no recompute).
        step_flops: FLOPs one device does per optimizer step, recompute included.
        compute_s: seconds of compute per step at ``efficiency`` of ``peak_flops``, plus the per-step overhead.
        comm_bytes: bytes each device puts on the wire per step (ring collectives).
        comm_s: seconds of communication per step before overlap (None when the link is unknown: not modelled).
        exposed_comm_s: the part of ``comm_s`` not hidden behind compute (0 when not modelled), plus the engine's
            host work on CPU ranks (:func:`engine_host_s`).
        collectives: collectives per step (count).
        step_s: predicted seconds per optimizer step.
        tokens_per_s_per_device: tokens/s per device.
        mfu: fraction of the peak (PaLM, recompute not counted).
    """

    flops_per_token: float
    step_flops: float
    compute_s: float
    comm_bytes: float
    comm_s: float | None
    exposed_comm_s: float
    collectives: float
    step_s: float
    tokens_per_s_per_device: float
    mfu: float


def step_flops(arch: Arch, *, batch: int, seq_len: int, grad_accum: int, gc: bool, tp: int = 1) -> float:
    """FLOPs one device does per optimizer step: tokens × PaLM FLOPs per token, plus one forward per token with
    full checkpointing (the recompute; hardware FLOPs, not MFU's model FLOPs). ``tp``: the ranks that share one batch
    (tensor x sequence parallel degree): each does 1/tp of its matmuls (Megatron-LM's split of the linears; Ulysses
    splits the tokens, then the heads)."""
    per_token = arch.flops_per_token(seq_len) + (arch.forward_flops_per_token(seq_len) if gc else 0.0)
    return batch * seq_len * grad_accum * per_token / tp


def _pack(sizes: list[int], cap: int, first_cap: int | None = None) -> list[int]:
    """Greedy buckets of ``sizes`` (in the order given): a bucket closes once it reaches its cap (``first_cap`` for
    the first), a size larger than the cap fills a bucket alone. Returns the bucket sizes."""
    out: list[int] = []
    cur = 0
    for s in sizes:
        limit = first_cap if (first_cap is not None and not out) else cap
        if cur and cur + s > limit:
            out.append(cur)
            cur = 0
        cur += s
        if cur >= limit:
            out.append(cur)
            cur = 0
    if cur:
        out.append(cur)
    return out


def fsdp_units(arch: Arch) -> list[tuple[int, bool]]:
    """FSDP2 units as accelerate wraps a model: ``(parameters, resharded after forward)`` for each decoder layer
    (True), the input embedding (True, untied only) and the tail = final norm + output head (False); the root ends
    with no parameter of its own (module doc)."""
    shapes = arch.param_shapes()
    per_layer = arch.layer_params
    embed = shapes[0][0] * shapes[0][1]
    rest = arch.total_params - embed - arch.layers * per_layer
    units = [(per_layer, True)] * arch.layers
    if arch.tied:
        return [*units, (rest + embed, False)]
    return [*units, (embed, True), (rest, False)]


def collectives(
    arch: Arch, lay: Layout, nodes: int = 1, grad_accum: int = 1, micro_tokens: int = 0, gc: bool = False
) -> list[Collective]:
    """The collectives one rank takes part in per optimizer step (module doc, per engine; ``micro_tokens``: tokens
    of one micro-batch, ``gc``: checkpointing, for the tensor-parallel activations): the data-parallel engine's, then
    the tensor-parallel group's (:func:`tensor_parallel_collectives`). Empty on one rank."""
    return [
        *_data_parallel(arch, lay, nodes, grad_accum),
        *tensor_parallel_collectives(arch, lay, micro_tokens, grad_accum, gc),
        *sequence_parallel_collectives(arch, lay, micro_tokens, grad_accum, gc),
    ]


def sequence_parallel_collectives(
    arch: Arch, lay: Layout, micro_tokens: int, grad_accum: int, gc: bool
) -> list[Collective]:
    """What a Ulysses group of ``lay.sp`` ranks exchanges per optimizer step: per micro-batch and layer, four
    all-to-alls in forward (q, k and v from sequence-sharded to head-sharded, the attention output back) and four in
    backward, each of this rank's ``micro_tokens / sp`` tokens at the projection's width in the compute dtype
    (Jacobs et al. 2023, arXiv:2309.14509; ``deepspeed/sequence/layer.py``); four more per layer in the recompute
    with checkpointing. An all-to-all costs ``sp − 1`` steps and ``(sp − 1)/sp`` of the rank's buffer on the wire
    (:func:`sweeper.capacity.hostcomm.ring_time`, as an all-gather of that buffer). Nothing hides."""
    if lay.sp <= 1 or micro_tokens <= 0:
        return []
    local = micro_tokens / lay.sp
    b = lay.compute_bytes
    passes = grad_accum * (3 if gc else 2)
    widths = (arch.q_width, arch.kv_width, arch.kv_width, arch.q_width)
    layers = arch.layers // lay.pp
    return [Collective("all_to_all", local * w * b, layers * passes, False, False, "sp") for w in widths]


def tensor_parallel_collectives(
    arch: Arch, lay: Layout, micro_tokens: int, grad_accum: int, gc: bool
) -> list[Collective]:
    """What a tensor-parallel group of ``lay.tp`` ranks (DeepSpeed AutoTP, inside one node) exchanges per optimizer
    step: per micro-batch and layer, the row-parallel outputs (o, down) all-reduced in forward and the
    column-parallel inputs' gradients (q/k/v, gate/up) all-reduced in backward, each ``tokens·h`` elements in the
    compute dtype (Megatron-LM, Shoeybi et al. 2019: two all-reduces forward and two backward per layer;
    ``deepspeed/module_inject/layers.py`` ``LinearAllreduce``, ``LinearLayer``), two more per layer in the recompute
    with checkpointing, and the output head's gathered logits (``gather_output=True``: an all-gather of
    ``tokens·V``). Nothing hides: each waits on the layer before it."""
    if lay.tp <= 1 or micro_tokens <= 0:
        return []
    b = lay.compute_bytes
    activation = micro_tokens * arch.hidden * b
    layers = arch.layers // lay.pp  # a pipeline stage's layers
    forward = 2 * layers * grad_accum * (2 if gc else 1)
    return [
        Collective("all_reduce", activation, forward, False, False, "tp"),
        Collective("all_reduce", activation, 2 * layers * grad_accum, False, False, "tp"),
        Collective("all_gather", micro_tokens * arch.vocab * b, grad_accum, False, False, "tp"),
    ]


def _data_parallel(arch: Arch, lay: Layout, nodes: int, grad_accum: int) -> list[Collective]:
    """The data-parallel engine's collectives (module doc), over the ``world / tp`` ranks that hold the same
    parameters (the data-parallel ranks, and the Ulysses ranks with them), on the parameters one rank holds
    (:meth:`Arch.tp_param_shapes`)."""
    if lay.world // (lay.tp * lay.pp) <= 1:
        return []
    a = grad_accum
    inter = nodes > 1
    shapes = arch.stage_param_shapes(lay.tp, lay.pp, lay.stage)
    sizes = [rows * rest for rows, rest in shapes]
    if lay.strategy == "zero0":  # DeepSpeed's own all-reduce of every gradient, in buffers of 5e8 elements
        return [
            Collective("all_reduce", x * lay.param_bytes, 1, True, inter) for x in _pack(sizes, ZERO_ALLGATHER_BUCKET)
        ]
    if lay.strategy == "ddp":
        b = lay.param_bytes
        buckets = _pack([s * b for s in reversed(sizes)], DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES)
        return [Collective("all_reduce", x, 1, True, inter) for x in buckets]
    hidden_sq = arch.hidden * arch.hidden
    if lay.strategy in ("zero1", "zero2"):
        b = lay.param_bytes
        per = a if lay.strategy == "zero2" else 1
        out = [Collective("all_reduce", x * b, per, True, inter) for x in _pack(list(reversed(sizes)), hidden_sq)]
        decay = sum(s for (rows, rest), s in zip(shapes, sizes, strict=True) if rest > 1)
        for group in (decay, sum(sizes) - decay):
            for x in _pack([group], ZERO_ALLGATHER_BUCKET):
                out.append(Collective("all_gather", x * b, 1, False, inter))
        out.append(Collective("all_reduce", 4, 1, False, inter))  # the gradient norm (fp32 scalar)
        return out
    if lay.strategy == "zero3":
        b = lay.param_bytes
        persistent = 10 * arch.hidden
        gathered = [s for s in sizes if s > persistent]
        out = [Collective("all_gather", s * b, a, False, inter) for s in gathered]  # forward
        out += [Collective("all_gather", s * b, a, True, inter) for s in gathered]  # backward
        out += [Collective("reduce_scatter", x * b, a, True, inter) for x in _pack(list(reversed(sizes)), hidden_sq)]
        return out
    g = lay.gathered_bytes
    units = fsdp_units(arch)
    hybrid = lay.strategy == "fsdp_hybrid"
    inner = inter and not hybrid
    out = [Collective("all_gather", n * g, a, False, inner) for n, _ in units]
    if lay.strategy in ("fsdp_full", "fsdp_hybrid"):
        out += [Collective("all_gather", n * g, a, True, inner) for n, resharded in units if resharded]
    out += [Collective("reduce_scatter", n * g, 1, True, inner) for n, _ in units]
    if hybrid and nodes > 1:
        out += [Collective("all_reduce", n * g / lay.shards, 1, True, True) for n, _ in units]
    return out


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """The share of a pipeline step its stages sit idle: ``(p − 1) / (m + p − 1)`` for GPipe and 1F1B alike
    (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM";
    interleaving, not modelled, divides ``p − 1`` by the chunks per stage). 0 without a pipeline. The step then takes
    ``(m + p − 1)`` micro-batch slots of one stage's compute."""
    return (pp - 1) / (micro_batches + pp - 1) if pp > 1 else 0.0


def pipeline_p2p_s(arch: Arch, lay: Layout, micro_tokens: int, grad_accum: int, link: HostComm | None) -> float | None:
    """Seconds of a pipeline step spent sending activations between stages, on the critical path: each of the
    ``m + p − 1`` slots sends one micro-batch's activations forward and their gradient backward, ``tokens·h``
    elements in the compute dtype each (point-to-point, one latency each). 0 without a pipeline; None when the link
    is unknown."""
    if lay.pp <= 1:
        return 0.0
    if link is None:
        return None
    nbytes = micro_tokens * arch.hidden * lay.compute_bytes
    one = link.latency_s + nbytes / (link.bandwidth_gb_s * 1e9)
    return 2 * (grad_accum + lay.pp - 1) * one


def comm_bytes_per_step(
    arch: Arch, lay: Layout, nodes: int, grad_accum: int = 1, micro_tokens: int = 0, gc: bool = False
) -> tuple[float, float]:
    """Bytes one device puts on the wire per optimizer step inside its node and across nodes (ring traffic of
    :func:`collectives`: all-reduce 2(N−1)/N·S, all-gather / reduce-scatter (N−1)/N·S).

    Returns:
        ``(intra_node_bytes, inter_node_bytes)``; a one-node point has no inter-node bytes.
    """
    intra = inter = 0.0
    for c in collectives(arch, lay, nodes, grad_accum, micro_tokens, gc):
        ring_n = lay.world // lay.shards if (lay.strategy == "fsdp_hybrid" and c.inter) else _ring(lay, c)
        f = (ring_n - 1) / ring_n * (2 if c.kind == "all_reduce" else 1) if ring_n > 1 else 0.0
        if c.inter:
            inter += f * c.nbytes * c.count
        else:
            intra += f * c.nbytes * c.count
    return intra, inter


def _ring(lay: Layout, c: Collective) -> int:
    """Ranks in the ring of ``c``: the tensor-parallel group for its activations, the shard group for FSDP's gathers
    and reductions, else the data-parallel ranks (the world without tensor parallelism)."""
    if c.group == "tp":
        return lay.tp
    if c.group == "sp":
        return lay.sp
    return lay.shards if lay.sharded else lay.world // (lay.tp * lay.pp)


def comm_time(
    arch: Arch,
    lay: Layout,
    nodes: int,
    grad_accum: int,
    intra: HostComm | None,
    inter: HostComm | None,
    micro_tokens: int = 0,
    gc: bool = False,
) -> tuple[float | None, float, float]:
    """``(seconds of communication per step, of which hideable, collectives per step)`` under the links given;
    seconds None when a link the point uses is unknown. ``micro_tokens`` and ``gc``: see :func:`collectives`."""
    total = hideable = count = 0.0
    for c in collectives(arch, lay, nodes, grad_accum, micro_tokens, gc):
        link = inter if c.inter else intra
        count += c.count
        if link is None:
            return None, 0.0, count
        ring_n = lay.world // lay.shards if (lay.strategy == "fsdp_hybrid" and c.inter) else _ring(lay, c)
        t = c.count * ring_time(c.kind, c.nbytes, ring_n, link)
        total += t
        hideable += t if c.hideable else 0.0
    return total, hideable, count


def engine_host_s(arch: Arch, lay: Layout, link: HostComm | None, grad_accum: int = 1) -> float:
    """Seconds per optimizer step that an engine's own host work adds on CPU ranks, beyond FLOPs and the collectives
    (each term measured on this host by :mod:`sweeper.job.gloo_probe`, cached with gloo's cost):

    * FSDP2: the optimizer step and gradient clipping on DTensor parameters (:attr:`HostComm.dtensor_step_s` × the
      model's parameter tensors), plus the per-unit hooks, copy-in/copy-out and waits of every forward and backward
      (:attr:`HostComm.fsdp_unit_s` × the units of :func:`fsdp_units` × micro-batches);
    * DeepSpeed ZeRO-1/2: its gradient hooks, bucket and partition copies and partitioned step per parameter tensor
      (:attr:`HostComm.zero_tensor_s` × the model's parameter tensors, :mod:`sweeper.job.zero_probe`, measured
      after the host's first ZeRO-1/2 point; 0 until then), on every micro-batch for ZeRO-2 (its hooks reduce on
      each), once per step for ZeRO-1 (an approximation: its hooks run on each micro-batch, its reduction and
      step once);
    * 0 for DDP, ZeRO-3 (not probed: a stated gap), one rank, and on a GPU link (no such measurement: the launches
      overlap the kernels)."""
    if link is None or lay.world <= 1:
        return 0.0
    if lay.sharded:
        units = len(fsdp_units(arch))
        return arch.param_tensors * link.dtensor_step_s + units * grad_accum * link.fsdp_unit_s
    if lay.strategy in ("zero1", "zero2") and link.zero_tensor_s:
        return arch.param_tensors * (grad_accum if lay.strategy == "zero2" else 1) * link.zero_tensor_s
    return 0.0


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
    intra: HostComm | None,
    inter: HostComm | None,
    overhead_s: float = 0.0,
) -> TimeEstimate:
    """Predict one optimizer step (see the module doc for every formula and its source).

    Args:
        batch: micro-batch per device (samples); seq_len: tokens per sample; grad_accum: micro-batches per step.
        gc: full activation checkpointing (one extra forward). nodes: nodes the ranks span.
        peak_flops: the device's dense peak in the compute dtype, FLOP/s. efficiency: achieved fraction of it.
        comm_overlap: fraction of compute time that can hide the collectives issued in backward (CPU: use 0).
        intra, inter: the link inside a node and across nodes (latency s per ring step, bandwidth GB/s); None =
            unknown (then communication is not modelled and ``comm_s`` is None).
        overhead_s: seconds per step that do not grow with the batch (calibrated, :mod:`.calibrate`; default 0).

    Raises:
        ValueError: a non-positive ``peak_flops`` or ``efficiency``.
    """
    if peak_flops <= 0 or efficiency <= 0:
        raise ValueError(f"peak_flops ({peak_flops}) and efficiency ({efficiency}) must be positive")
    # one device's share: a TP or SP group trains on one batch together, a pipeline's stages pass it along
    tokens = batch * seq_len * grad_accum / (lay.tp * lay.sp * lay.pp)
    fpt = arch.flops_per_token(seq_len)
    flops = step_flops(arch, batch=batch, seq_len=seq_len, grad_accum=grad_accum, gc=gc, tp=lay.tp * lay.sp * lay.pp)
    kernel_s = flops / (peak_flops * efficiency) / (1 - bubble_fraction(lay.pp, grad_accum))
    compute_s = overhead_s + kernel_s
    comm_s, hideable, count = comm_time(arch, lay, nodes, grad_accum, intra, inter, batch * seq_len, gc)
    exposed = 0.0 if comm_s is None else comm_s - min(comm_overlap * kernel_s, hideable)  # the overhead hides none
    exposed += engine_host_s(arch, lay, intra, grad_accum)
    p2p = pipeline_p2p_s(arch, lay, batch * seq_len, grad_accum, inter if nodes > 1 else intra)
    if p2p is not None:
        exposed += p2p
    step_s = compute_s + exposed
    tps = tokens / step_s
    wire = sum(comm_bytes_per_step(arch, lay, nodes, grad_accum, batch * seq_len, gc))
    return TimeEstimate(fpt, flops, compute_s, wire, comm_s, exposed, count, step_s, tps, tps * fpt / peak_flops)
