"""Truthful labels: after the first training step, check that the point really runs what its label says.

Checked: the wrapper (DDP / FSDP2 ``FSDPModule`` with sharded ``DTensor`` parameters / DeepSpeed engine at the
requested ZeRO stage), the compute dtype a Linear layer really produced, and which checkpointing implementation is
active. A mismatch stops the point with :class:`LabelMismatch`, recorded as ``unsupported`` with the reason: a
result never carries a label it did not run.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback

from sweeper.config.spec import PointSpec
from sweeper.job.memory import local_tensor

EXPECTED_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class LabelMismatch(RuntimeError):
    """The point's label says one thing, the run does another (message says what and why)."""


class DtypeProbe(TrainerCallback):
    """Records the dtype a Linear layer really computes in during the first training step.

    A forward hook on the first ``nn.Linear`` of the model stores its output dtype: under autocast that is the
    autocast dtype, without it the weight dtype. This is how a silent fp32 run labelled fp16 is caught.
    """

    def __init__(self) -> None:
        self.compute_dtype: str | None = None
        self._handle = None

    def attach(self, model: torch.nn.Module) -> None:
        """Hook the first Linear of ``model`` (a DeepSpeed AutoTP layer counts: it replaces the Linear it shards),
        in place of any layer hooked before."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        linear = _linear_types()
        for m in model.modules():
            if isinstance(m, linear):
                self._handle = m.register_forward_hook(self._hook)
                return

    def _hook(self, module, inputs, output):
        try:
            self._observe(output)
        except Exception as e:  # runs inside the model's forward: a fault here is sweeper's, never the user's
            from sweeper.job.faults import HarnessFault

            raise HarnessFault("verify", e) from e

    def _observe(self, output: Any) -> None:
        if self.compute_dtype is None and isinstance(output, torch.Tensor):
            self.compute_dtype = str(output.dtype).replace("torch.", "")
        if self._handle is not None and self.compute_dtype is not None:
            self._handle.remove()
            self._handle = None


def _linear_types() -> tuple[type, ...]:
    """``nn.Linear``, and DeepSpeed's tensor-parallel layers when DeepSpeed is imported (AutoTP put them there)."""
    import sys

    layers = sys.modules.get("deepspeed.module_inject.layers")
    extra = getattr(layers, "TensorParallel_Layer", None)
    return (torch.nn.Linear, extra) if isinstance(extra, type) else (torch.nn.Linear,)


def _tensor_parallel(trainer: Any, model: torch.nn.Module) -> dict[str, Any]:
    """The mesh a DeepSpeed engine trains on (``dp``, ``tp``, ``sp`` degrees, read from DeepSpeed's own groups)
    and how many modules AutoTP sharded: the proof that a ``tp`` label ran as labelled."""
    engine = trainer.model_wrapped
    tp = int(engine.autotp_size() or 1) if hasattr(engine, "autotp_size") else 1  # 0 when AutoTP is off
    sharded = 0
    layers = _linear_types()[1:]
    if layers:
        sharded = sum(1 for m in model.modules() if isinstance(m, layers))
    sp = 1
    if getattr(trainer.args, "parallelism_config", None) is not None:
        from deepspeed.utils import groups

        sp = int(groups._get_sequence_parallel_world_size())  # the Ulysses group DeepSpeed trains on
    if sp > 1:  # under Ulysses DeepSpeed has no plain data-parallel group (dp_world_size None): the rest is dp
        dp = trainer.args.world_size // (tp * sp)
    else:
        dp = int(getattr(engine, "dp_world_size", None) or trainer.args.world_size // max(tp, 1))
    return {"mesh": {"dp": dp, "tp": tp, "sp": sp}, "tp_sharded_modules": sharded}


def observe_setup(trainer: Any, probe: DtypeProbe, unsharded_params: int) -> dict[str, Any]:
    """What really runs, read off a Trainer after its first step.

    Returns:
        ``world_size``, ``wrapper`` (class name of the outermost model wrapper), ``fsdp_enabled``,
        ``fsdp_version``, ``fsdp_sharded`` (this rank holds fewer parameter elements than the unsharded model:
        FSDP2 DTensor shards and FSDP1 flat parameters counted alike), ``local_param_count``,
        ``deepspeed_stage`` (0 when DeepSpeed is off), ``mesh`` (``{"dp", "tp", "sp"}`` degrees the ranks train on:
        DeepSpeed's groups under DeepSpeed, else all ranks data-parallel), ``tp_sharded_modules`` (modules DeepSpeed
        AutoTP replaced with its sharded layers), ``compute_dtype``, ``checkpointing_impl`` (``none`` /
        ``hf`` / ``fsdp``), ``use_reentrant`` (None when checkpointing is off), ``device_type``, ``param_count``.

    Args:
        unsharded_params: the model's parameter count, taken before the Trainer wrapped it.
    """
    args = trainer.args
    wrapped = trainer.model_wrapped
    model = trainer.model
    setup: dict[str, Any] = {
        "world_size": args.world_size,
        "wrapper": type(wrapped).__name__,
        "fsdp_enabled": bool(trainer.is_fsdp_enabled),
        "fsdp_version": None,
        "fsdp_sharded": False,
        "deepspeed_stage": 0,
        "compute_dtype": probe.compute_dtype,
        "device_type": args.device.type,
    }
    try:
        from torch.distributed.fsdp import FSDPModule

        if isinstance(model, FSDPModule) or isinstance(wrapped, FSDPModule):
            setup["fsdp_version"] = 2
            setup["wrapper"] = "FSDPModule(fully_shard)"
        from torch.distributed.fsdp import FullyShardedDataParallel

        if isinstance(wrapped, FullyShardedDataParallel):
            setup["fsdp_version"] = 1
            setup["wrapper"] = "FullyShardedDataParallel"
    except ImportError:  # pragma: no cover - torch without FSDP
        pass
    local = sum(local_tensor(p).numel() for p in wrapped.parameters())
    setup["local_param_count"] = local
    setup["fsdp_sharded"] = args.world_size > 1 and local < unsharded_params
    setup["mesh"] = {"dp": args.world_size, "tp": 1, "sp": 1}
    setup["tp_sharded_modules"] = 0
    if trainer.is_deepspeed_enabled:
        engine = trainer.model_wrapped
        setup["deepspeed_stage"] = int(engine.zero_optimization_stage())
        setup["wrapper"] = type(engine).__name__
        setup.update(_tensor_parallel(trainer, model))
    setup["param_count"] = unsharded_params
    setup.update(_checkpointing(model, trainer))
    return setup


def _checkpointing(model: torch.nn.Module, trainer: Any) -> dict[str, Any]:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    if any(isinstance(m, CheckpointWrapper) for m in model.modules()):
        impls = {m.checkpoint_impl.name for m in model.modules() if isinstance(m, CheckpointWrapper)}
        return {"checkpointing_impl": "fsdp", "use_reentrant": impls == {"REENTRANT"}}
    inner = getattr(model, "module", model)
    if getattr(inner, "is_gradient_checkpointing", False):
        kwargs = trainer.args.activation_checkpointing_kwargs or {}
        return {"checkpointing_impl": "hf", "use_reentrant": kwargs.get("use_reentrant")}
    return {"checkpointing_impl": "none", "use_reentrant": None}


def mismatches(spec: PointSpec, setup: dict[str, Any]) -> list[str]:
    """Every way ``setup`` (from :func:`observe_setup`) differs from what ``spec`` asks for; empty when truthful."""
    out = []
    world = setup["world_size"]
    if world != spec.world_size:
        out.append(f"{spec.world_size} ranks asked (ranks_per_node x nodes), but {world} run")
    if spec.fsdp != "none":
        version = 1 if spec.fsdp == "hybrid_shard" else 2
        if not setup["fsdp_enabled"] or setup["fsdp_version"] != version:
            out.append(f"fsdp={spec.fsdp} asked, but the model is wrapped in {setup['wrapper']} (not FSDP{version})")
        elif world > 1 and not setup["fsdp_sharded"]:
            out.append(f"fsdp={spec.fsdp} asked, but parameters are not sharded across {world} ranks")
    elif not spec.deepspeed and world > 1 and setup["wrapper"] != "DistributedDataParallel":
        out.append(f"DDP expected for fsdp=none zero=0 on {world} ranks, found {setup['wrapper']}")
    elif spec.deepspeed and setup["wrapper"] != "DeepSpeedEngine":
        out.append(f"the DeepSpeed engine expected for zero={spec.zero} tp={spec.tp}, found {setup['wrapper']}")
    out += _mesh_mismatches(spec, setup)
    if setup["deepspeed_stage"] != spec.zero:
        out.append(f"zero={spec.zero} asked, but DeepSpeed runs stage {setup['deepspeed_stage']}")
    want = EXPECTED_DTYPE[spec.precision]
    if setup["compute_dtype"] is not None and setup["compute_dtype"] != want:
        out.append(
            f"precision={spec.precision} asked, but Linear layers compute in {setup['compute_dtype']} "
            f"on {setup['device_type']} (autocast to {want} is not active)"
        )
    want_impl = ("fsdp" if spec.fsdp != "none" else "hf") if spec.gc else "none"
    if setup["checkpointing_impl"] != want_impl:
        out.append(
            f"gc={str(spec.gc).lower()} asked, but checkpointing implementation is {setup['checkpointing_impl']}"
        )
    if spec.gc and setup["use_reentrant"] is not None and bool(setup["use_reentrant"]) != spec.use_reentrant:
        out.append(f"use_reentrant={spec.use_reentrant} asked, but {setup['use_reentrant']} runs")
    return out


def _mesh_mismatches(spec: PointSpec, setup: dict[str, Any]) -> list[str]:
    """A tp or sp label that did not run as labelled: the mesh's degrees, AutoTP's sharded modules, the per-rank
    parameters, the tokens per sample a rank's embedding saw."""
    mesh = setup.get("mesh")
    if mesh is None:  # a setup observed before the mesh was recorded
        return []
    out = []
    seen = setup.get("seq_len_per_rank")
    if (mesh.get("tp"), mesh.get("sp", 1), mesh.get("dp")) != (spec.tp, spec.sp, spec.dp):
        out.append(
            f"tp={spec.tp} sp={spec.sp} (dp={spec.dp}) asked, but the ranks train on dp={mesh.get('dp')} "
            f"tp={mesh.get('tp')} sp={mesh.get('sp')}"
        )
    elif spec.sp > 1 and seen is None:
        out.append(f"sp={spec.sp} asked, but the tokens a rank sees of each sample could not be observed")
    elif spec.sp > 1 and seen != spec.seq_len // spec.sp:
        out.append(f"sp={spec.sp} asked, but a rank saw {seen} tokens of each sample, not {spec.seq_len // spec.sp}")
    elif spec.tp > 1 and not setup.get("tp_sharded_modules"):
        out.append(f"tp={spec.tp} asked, but no layer was sharded (DeepSpeed AutoTP replaced none)")
    elif spec.tp > 1 and spec.zero < 3 and setup["local_param_count"] >= setup["param_count"]:
        out.append(f"tp={spec.tp} asked, but each rank holds all {setup['param_count']:,} parameters")
    return out


class LabelCheck(TrainerCallback):
    """After the first optimizer step, observe the setup and stop the point on any label mismatch.

    Attributes:
        setup: the observed setup (filled after step 1), recorded in the result whatever the outcome.
    """

    def __init__(self, spec: PointSpec, probe: DtypeProbe) -> None:
        self.spec = spec
        self.probe = probe
        self.trainer: Any = None
        self.unsharded_params = 0  # set by the harness from the model before the Trainer wraps it
        self.setup: dict[str, Any] = {}
        self.seq_len_per_rank: int | None = None
        self._seq_hook: Any = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """The model as the engine trains it (DeepSpeed AutoTP has replaced the linears it shards by now): the
        dtype probe hooks its first Linear, and the input embedding records the tokens per sample this rank sees
        (``seq_len / sp`` under Ulysses)."""
        if model is not None:
            self.probe.attach(model)
            embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
            if embed is not None:
                self._seq_hook = embed.register_forward_hook(self._seen_seq_len)

    def _seen_seq_len(self, module, inputs, output):
        try:
            if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() >= 2:
                self.seq_len_per_rank = int(inputs[0].shape[-1])
            if self._seq_hook is not None:
                self._seq_hook.remove()
                self._seq_hook = None
        except Exception as e:  # runs inside the model's forward: a fault here is sweeper's, never the user's
            from sweeper.job.faults import HarnessFault

            raise HarnessFault("verify", e) from e

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step != 1:
            return
        self.setup = observe_setup(self.trainer, self.probe, self.unsharded_params)
        self.setup["seq_len_per_rank"] = self.seq_len_per_rank
        problems = mismatches(self.spec, self.setup)
        if problems:
            raise LabelMismatch("; ".join(problems))
