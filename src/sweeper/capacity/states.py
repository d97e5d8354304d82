"""Where a point's model states live and how large they are per rank: the layout (:class:`Layout`: which engine,
what it shards over how many ranks, the dtypes) and the parameters, gradients and optimizer state one rank holds
(:class:`ModelStates`), as the frameworks really store them (``../shared/notes/formulas.md``; DDP, FSDP2, DeepSpeed
ZeRO-1/2/3). All sizes in bytes. The peaks built on them are :mod:`sweeper.capacity.memory`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.capacity.arch import Arch
from sweeper.capacity.offload import CPU, NONE, NVME, Offload, offload_of
from sweeper.capacity.optimizers import ADAMW_TORCH, OptimizerModel, UnknownOptimizer, resolve_optimizer
from sweeper.config.spec import PointSpec

#: No state offloaded.
NO_OFFLOAD = Offload()

#: Bytes per element of a storage dtype (``model_dtype``) and of a compute precision.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: Bytes per fp32 element (master weights, Adam moments, upcast logits).
FP32 = 4


@dataclass(frozen=True)
class Layout:
    """How a point trains, as far as memory is concerned.

    Attributes:
        strategy: ``single`` (one rank), ``ddp``, ``zero0``/``zero1``/``zero2``/``zero3`` (DeepSpeed; stage 0 only
            under AutoTP, ``tp > 1``), ``fsdp_full``,
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
        tp: the tensor-parallel degree (DeepSpeed AutoTP): each rank holds :meth:`Arch.tp_param_shapes` and the
            ZeRO shards divide by ``world / tp``, not by ``world``. sp: the Ulysses degree: each rank holds
            ``seq_len / sp`` tokens of every sample, and ZeRO shards over the sequence ranks as well. pp, stage: the
            pipeline degree and which stage this rank is (``first``, ``last``, ``only``; planned only): its layers
            (:meth:`Arch.stage_param_shapes`), ZeRO within the stage's ``world / (tp x pp)`` ranks.
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
    tp: int = 1
    sp: int = 1
    pp: int = 1
    stage: str = "only"

    @property
    def sharded(self) -> bool:
        """Parameters, gradients and optimizer states are split over ``shards`` ranks (FSDP)."""
        return self.strategy.startswith("fsdp")

    @property
    def deepspeed(self) -> bool:
        """DeepSpeed trains the point (ZeRO stages 1-3, or stage 0 under AutoTP: ``zero0``)."""
        return self.strategy.startswith("zero")


_FSDP_STRATEGY = {"full_shard": "fsdp_full", "shard_grad_op": "fsdp_grad_op", "hybrid_shard": "fsdp_hybrid"}


def layout(spec: PointSpec, device: str, stage: str = "first") -> Layout:
    """The :class:`Layout` of ``spec`` on ``device`` (``cpu`` or ``cuda``); with ``pp > 1``, of one rank of pipeline
    ``stage`` (``first``, the default, or ``last``; planned only)."""
    world = spec.ranks_per_node * spec.nodes
    # ZeRO and FSDP shard over the ranks that hold the same parameters: world / tp (the data-parallel ranks and, under
    # Ulysses, the sequence ranks with them: DeepSpeed's sequence-data-parallel group), not over the world
    dp = spec.world_size // (spec.tp * spec.pp)  # a pipeline's stages hold different layers: ZeRO within a stage
    store = DTYPE_BYTES[spec.model_dtype]
    autocast = spec.precision != "fp32" and spec.model_dtype == "float32"
    compute = PRECISION_BYTES[spec.precision] if spec.precision != "fp32" else store
    if spec.deepspeed:
        strategy, shards = f"zero{spec.zero}", dp
        # HF's DeepSpeed integration turns bf16/fp16 on in the DeepSpeed config; the engine casts the module to it
        # and keeps fp32 master partitions (runtime/engine.py, runtime/zero/stage_1_and_2.py, stage3.py)
        param = 2 if spec.precision != "fp32" else store
        autocast = False
    elif spec.fsdp != "none":
        strategy = _FSDP_STRATEGY[spec.fsdp]
        shards = spec.ranks_per_node if spec.fsdp == "hybrid_shard" else dp
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
        compute_bytes=compute if not spec.deepspeed else param,
        autocast=autocast,
        residual_bytes=FP32 if autocast else (compute if spec.fsdp != "none" else (param if spec.deepspeed else store)),
        gathered_bytes=compute if spec.fsdp != "none" else param,
        device=device,
        tp=spec.tp,
        sp=spec.sp,
        pp=spec.pp,
        stage=stage if spec.pp > 1 else "only",
    )


@dataclass(frozen=True)
class ModelStates:
    """Parameter, gradient and optimizer-state bytes one rank holds, as the harness counts them
    (:func:`sweeper.job.memory.model_state_bytes`: every local tensor, wherever it lives), and which of them are
    offloaded (:mod:`sweeper.capacity.offload`).

    Attributes:
        param_bytes: the model's parameters this rank holds (FSDP / ZeRO-3: its shard; padding not stored).
        grad_bytes: ``param.grad`` bytes this rank holds after backward; None under DeepSpeed, whose gradients live
            in its own partitions (the harness cannot observe them either).
        optimizer_state_bytes: the optimizer's state tensors (:mod:`sweeper.capacity.optimizers`: AdamW's
            ``exp_avg`` + ``exp_avg_sq`` and a ``step`` scalar per tensor, SGD's momentum buffer, Adafactor's
            factored moments, ...), plus DeepSpeed's fp32 master partitions.
        master_bytes: the part of ``optimizer_state_bytes`` that is DeepSpeed's fp32 master partitions (allocated
            before training, outside what MemTracker tracks).
        step_grad_bytes: gradient bytes alive **on the device** during the optimizer step (DeepSpeed: its 16-bit and
            fp32 partitions; 0 where offloading moved them to the host).
        optimizer: the optimizer's model (its name and the source of its layout).
        params_offload, optimizer_offload: ``none``, ``cpu`` or ``nvme``: where the parameters at rest and the
            optimizer's states (with the masters) live.
        host_param_bytes, host_grad_bytes, host_optimizer_bytes: bytes of this rank's states in host memory
            (offloaded parameters; DeepSpeed's fp32 and 16-bit gradient partitions or FSDP's sharded gradients;
            optimizer states with the fp32 masters).
        pinned: the host copies are page-locked (DeepSpeed's and FSDP2's default).
    """

    param_bytes: int
    grad_bytes: int | None
    optimizer_state_bytes: int
    master_bytes: int = 0
    step_grad_bytes: int = 0
    optimizer: OptimizerModel = ADAMW_TORCH
    params_offload: str = NONE
    optimizer_offload: str = NONE
    host_param_bytes: int = 0
    host_grad_bytes: int = 0
    host_optimizer_bytes: int = 0
    pinned: bool = False

    @property
    def host_bytes(self) -> int:
        """Bytes of this rank's states in host memory."""
        return self.host_param_bytes + self.host_grad_bytes + self.host_optimizer_bytes

    @property
    def on_nvme(self) -> bool:
        """Some state is on NVMe (neither device nor host memory; DeepSpeed's swap buffers are not modelled)."""
        return NVME in (self.params_offload, self.optimizer_offload)


def _deepspeed_partition(numel: int, world: int) -> int:
    """Elements of one rank's partition of a flat ZeRO-1/2 buffer: padded to a multiple of ``2·world``
    (``nccl_start_alignment_factor = 2``, runtime/zero/stage_1_and_2.py), split evenly."""
    align = 2 * world
    return -(-numel // align) * align // world


def model_states(
    arch: Arch, lay: Layout, opt: OptimizerModel = ADAMW_TORCH, off: Offload = NO_OFFLOAD, grad_accum: int = 1
) -> ModelStates:
    """Model-state bytes per rank for each strategy, as the frameworks store them, for the optimizer ``opt`` and the
    offload ``off`` (applied on a GPU only: on a CPU device the host is the device).

    Sources: ZeRO paper (Rajbhandari et al. 2020) for the partitioning; the optimizer's state per tensor from
    :class:`~sweeper.capacity.optimizers.OptimizerModel` (torch ``AdamW``: ``exp_avg`` and ``exp_avg_sq`` in the
    parameter's dtype and a float32 ``step`` per tensor); HF autocast (``bf16=True`` over fp32 weights) keeps fp32
    weights and gradients (16 bytes/param with Adam, no 2-byte copy); DeepSpeed ZeRO keeps 16-bit (or fp32) module
    weights, fp32 master partitions (``single_partition_of_fp32_groups``, ``fp32_partitioned_groups_flat``) and the
    optimizer's state on those flat fp32 partitions (two flat groups: HF's decay / no-decay), so Adafactor is not
    factored there; FSDP2 (``fully_shard``) splits every tensor on dim 0, so gradients and optimizer states are
    sharded like the parameters. Offload (:mod:`sweeper.capacity.offload`): ZeRO-Offload of the optimizer moves the
    masters, the states and the fp32 gradient partitions (ZeRO-3: also its 16-bit gradient partitions) to the host;
    of the parameters (ZeRO-3) the 16-bit partitions; FSDP ``cpu_offload`` the sharded parameters, gradients and
    states. With ``grad_accum`` > 1, ZeRO-1/2 offload also accumulates each of its partition's parameters' gradients
    in a host buffer of the parameter's dtype (``accumulated_grads_in_cpu``, ``stage_1_and_2.py``
    ``async_accumulate_grad_in_cpu_via_gpu``): one more partition in 16 bits.

    Returns:
        :class:`ModelStates` for the most loaded rank.

    Raises:
        UnknownOptimizer: Adafactor under FSDP (its factored states of a DTensor were not measured).
    """
    shapes = arch.stage_param_shapes(lay.tp, lay.pp, lay.stage)
    p, w, n = sum(r * c for r, c in shapes), lay.param_bytes, lay.shards
    if lay.device != "cuda":
        off = NO_OFFLOAD
    on_host = CPU
    if lay.sharded:
        if opt.kind == "adafactor":
            raise UnknownOptimizer(
                "optim=adafactor under FSDP: Adafactor's factored states of sharded (DTensor) parameters are not "
                "modelled"
            )
        shards = [(-(-rows // n), rest) for rows, rest in shapes]
        local = sum(r * c for r, c in shards)
        states = opt.state_bytes(shards, w)
        if off.any:  # FSDP cpu_offload: sharded params, grads and the optimizer on the host
            return ModelStates(
                local * w, local * w, states, 0, 0, opt, off.params, off.optimizer,
                local * w, local * w, states, off.pinned,
            )  # fmt: skip
        return ModelStates(local * w, local * w, states, step_grad_bytes=local * w, optimizer=opt)
    if lay.strategy == "zero0":
        # DeepSpeed at stage 0 (AutoTP with plain data parallelism): in fp32 the engine steps the Trainer's own
        # optimizer on the module's parameters, no master copy (measured: 8 bytes/param of AdamW state at tp=2);
        # its gradients are cleared inside the engine's step (None, as under ZeRO). In 16 bits it wraps its
        # BF16_Optimizer / FP16 optimizer with fp32 masters, which was not measured: unknown, not guessed
        if w != FP32 and opt.name != "unknown":  # "unknown": the caller asks for the parameters alone
            raise UnknownOptimizer(
                "DeepSpeed at ZeRO stage 0 in 16-bit precision (its BF16_Optimizer / FP16 master copies) "
                "is not modelled"
            )
        return ModelStates(p * w, None, opt.state_bytes(shapes, w), step_grad_bytes=p * w, optimizer=opt)
    if lay.deepspeed:
        if lay.strategy == "zero3":
            part = sum(-(-rows * rest // n) for rows, rest in shapes)
            params, grads16 = part * w, part * w
        else:
            part = _deepspeed_partition(p, n)
            # ZeRO-1: full gradients until the step; ZeRO-2: gradients reduced into partitions during backward
            params, grads16 = p * w, (p * w if lay.strategy == "zero1" else part * w)
        masters = part * FP32
        # HF builds two parameter groups (decay / no decay): one flat fp32 tensor each (the small one counted empty)
        opt_bytes = masters + opt.state_bytes([(part, 1), (0, 1)], FP32)
        step_grads = grads16 + part * FP32
        host_grads = host_opt = host_params = 0
        if off.optimizer != NONE:
            # the fp32 gradient partitions go to the host with the step; ZeRO-3 also keeps its 16-bit gradient
            # partitions there (grad_partitions_flat_buffer on self.device = cpu); ZeRO-1 accumulates full 16-bit
            # gradients in param.grad on the device, ZeRO-2 only its buckets
            offloaded_grads = part * FP32 + (grads16 if lay.strategy == "zero3" else 0)
            if grad_accum > 1 and lay.strategy != "zero3":
                offloaded_grads += part * w  # accumulated_grads_in_cpu
            step_grads = grads16 if lay.strategy == "zero1" else 0
            if off.optimizer == on_host:
                host_grads, host_opt = offloaded_grads, opt_bytes
        if off.params == on_host:
            host_params = params
        return ModelStates(
            params, None, opt_bytes, masters, step_grads, opt, off.params, off.optimizer,
            host_params, host_grads, host_opt, off.pinned,
        )  # fmt: skip
    return ModelStates(p * w, p * w, opt.state_bytes(shapes, w), step_grad_bytes=p * w, optimizer=opt)


def states_for(spec: PointSpec, arch: Arch, lay: Layout) -> ModelStates:
    """:func:`model_states` for ``spec``: its optimizer (:func:`~sweeper.capacity.optimizers.resolve_optimizer`
    from ``training_args`` and, under DeepSpeed, ``deepspeed_config``) and its offload
    (:func:`~sweeper.capacity.offload.offload_of`).

    Raises:
        UnknownOptimizer: the optimizer that runs is one the model does not know.
    """
    off = offload_of(spec.fsdp, spec.zero, spec.fsdp_config, spec.deepspeed_config)
    ds = spec.deepspeed_config if spec.deepspeed else None
    opt = resolve_optimizer(spec.training_args, ds, off.optimizer != NONE)
    return model_states(arch, lay, opt, off, spec.grad_accum)
