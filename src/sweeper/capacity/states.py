"""Where a point's model states live and how large they are per rank: the layout (:class:`Layout`: which engine,
what it shards over how many ranks, the dtypes) and the parameters, gradients and optimizer state one rank holds
(:class:`ModelStates`), as the frameworks really store them (``../shared/notes/formulas.md``; DDP, FSDP2, DeepSpeed
ZeRO-1/2/3). All sizes in bytes. The peaks built on them are :mod:`sweeper.capacity.memory`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.capacity.arch import Arch
from sweeper.config.spec import PointSpec

#: Bytes per element of a storage dtype (``model_dtype``) and of a compute precision.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: Bytes per fp32 element (master weights, Adam moments, upcast logits).
FP32 = 4


@dataclass(frozen=True)
class Layout:
    """How a point trains, as far as memory is concerned.

    Attributes:
        strategy: ``single`` (one rank), ``ddp``, ``zero1``/``zero2``/``zero3`` (DeepSpeed), ``fsdp_full``,
            ``fsdp_grad_op``, ``fsdp_hybrid``.
        world: ranks. shards: N, the ranks that split sharded states (``hybrid_shard``: the ranks of one node).
        param_bytes: bytes per element of the weights as stored during training (DeepSpeed with bf16/fp16 casts the
            module to 16 bits; otherwise ``model_dtype``).
        compute_bytes: bytes per element of matmul inputs/outputs (autocast: 2; fp32: 4; pure bf16: 2).
        autocast: half-precision autocast over fp32 weights (HF ``bf16=True`` with ``model_dtype=float32``).
        residual_bytes: bytes per element of the residual stream (fp32 under autocast, else the weights' dtype).
        gathered_bytes: bytes per element of parameters gathered for compute (FSDP2 mixed precision gathers in the
            compute dtype; ZeRO-3 gathers its 16-bit partitions).
        device: ``cpu`` or ``cuda``.
    """

    strategy: str
    world: int
    shards: int
    param_bytes: int
    compute_bytes: int
    autocast: bool
    residual_bytes: int
    gathered_bytes: int
    device: str

    @property
    def sharded(self) -> bool:
        """Parameters, gradients and optimizer states are split over ``shards`` ranks (FSDP)."""
        return self.strategy.startswith("fsdp")

    @property
    def deepspeed(self) -> bool:
        """DeepSpeed ZeRO trains the point."""
        return self.strategy.startswith("zero")


_FSDP_STRATEGY = {"full_shard": "fsdp_full", "shard_grad_op": "fsdp_grad_op", "hybrid_shard": "fsdp_hybrid"}


def layout(spec: PointSpec, device: str) -> Layout:
    """The :class:`Layout` of ``spec`` on ``device`` (``cpu`` or ``cuda``)."""
    world = spec.ranks_per_node * spec.nodes
    store = DTYPE_BYTES[spec.model_dtype]
    autocast = spec.precision != "fp32" and spec.model_dtype == "float32"
    compute = PRECISION_BYTES[spec.precision] if spec.precision != "fp32" else store
    if spec.zero:
        strategy, shards = f"zero{spec.zero}", world
        # HF's DeepSpeed integration turns bf16/fp16 on in the DeepSpeed config; the engine casts the module to it
        # and keeps fp32 master partitions (runtime/engine.py, runtime/zero/stage_1_and_2.py, stage3.py)
        param = 2 if spec.precision != "fp32" else store
        autocast = False
    elif spec.fsdp != "none":
        strategy = _FSDP_STRATEGY[spec.fsdp]
        shards = spec.ranks_per_node if spec.fsdp == "hybrid_shard" else world
        param = store
        # accelerate's FSDP2 mixed precision (MixedPrecisionPolicy(param_dtype=bf16), cast_forward_inputs) gathers
        # 16-bit weights and casts the inputs: the layers compute in 16 bits throughout, like pure bf16, and
        # autocast has nothing left to cast
        autocast = False
    else:
        strategy, shards, param = ("ddp" if world > 1 else "single"), 1, store
    return Layout(
        strategy=strategy,
        world=world,
        shards=max(1, shards),
        param_bytes=param,
        compute_bytes=compute if not spec.zero else param,
        autocast=autocast,
        residual_bytes=FP32 if autocast else (compute if spec.fsdp != "none" else (param if spec.zero else store)),
        gathered_bytes=compute if spec.fsdp != "none" else param,
        device=device,
    )


@dataclass(frozen=True)
class ModelStates:
    """Parameter, gradient and optimizer-state bytes one rank holds, as the harness counts them
    (:func:`sweeper.job.memory.model_state_bytes`).

    Attributes:
        param_bytes: the model's parameters this rank holds (FSDP / ZeRO-3: its shard; padding not stored).
        grad_bytes: ``param.grad`` bytes this rank holds after backward; None under DeepSpeed, whose gradients live
            in its own partitions (the harness cannot observe them either).
        optimizer_state_bytes: Adam's ``exp_avg`` + ``exp_avg_sq`` (in the dtype of the parameters it steps) and one
            fp32 ``step`` scalar per parameter tensor, plus DeepSpeed's fp32 master partitions.
        master_bytes: the part of ``optimizer_state_bytes`` that is DeepSpeed's fp32 master partitions (allocated
            before training, outside what MemTracker tracks).
        step_grad_bytes: gradient bytes alive during the optimizer step (DeepSpeed: its 16-bit and fp32 partitions).
    """

    param_bytes: int
    grad_bytes: int | None
    optimizer_state_bytes: int
    master_bytes: int = 0
    step_grad_bytes: int = 0


def _deepspeed_partition(numel: int, world: int) -> int:
    """Elements of one rank's partition of a flat ZeRO-1/2 buffer: padded to a multiple of ``2·world``
    (``nccl_start_alignment_factor = 2``, runtime/zero/stage_1_and_2.py), split evenly."""
    align = 2 * world
    return -(-numel // align) * align // world


def model_states(arch: Arch, lay: Layout) -> ModelStates:
    """Model-state bytes per rank for each strategy, as the frameworks store them.

    Sources: ZeRO paper (Rajbhandari et al. 2020) for the partitioning; torch ``AdamW`` keeps ``exp_avg`` and
    ``exp_avg_sq`` in the parameter's dtype and a float32 ``step`` per tensor; HF autocast (``bf16=True`` over fp32
    weights) keeps fp32 weights and gradients (16 bytes/param with Adam, no 2-byte copy); DeepSpeed ZeRO keeps
    16-bit (or fp32) module weights, fp32 master partitions (``single_partition_of_fp32_groups``,
    ``fp32_partitioned_groups_flat``) and Adam on those (12 bytes/param / N); FSDP2 (``fully_shard``) splits every
    tensor on dim 0, so gradients and Adam states are sharded like the parameters.

    Returns:
        :class:`ModelStates` for the most loaded rank.
    """
    p, w, n = arch.total_params, lay.param_bytes, lay.shards
    steps = arch.param_tensors * FP32
    if lay.sharded:
        local = arch.sharded_params(n)
        return ModelStates(local * w, local * w, 2 * local * w + steps, step_grad_bytes=local * w)
    if lay.deepspeed:
        groups_steps = 2 * FP32  # HF builds two parameter groups (decay / no decay): one flat fp32 tensor each
        if lay.strategy == "zero3":
            part = sum(-(-rows * rest // n) for rows, rest in arch.param_shapes())
            masters = part * FP32
            return ModelStates(part * w, None, masters + 2 * part * FP32 + groups_steps, masters, part * (w + FP32))
        part = _deepspeed_partition(p, n)
        masters = part * FP32
        # ZeRO-1: full gradients until the step; ZeRO-2: gradients reduced into partitions during backward
        grads = p * w if lay.strategy == "zero1" else part * w
        return ModelStates(p * w, None, masters + 2 * part * FP32 + groups_steps, masters, grads + part * FP32)
    return ModelStates(p * w, p * w, 2 * p * w + steps, step_grad_bytes=p * w)
