"""From a point spec to a model, synthetic data, ``TrainingArguments`` and a ``Trainer`` (inside one rank).

Truthful labels (``docs/measurement.md``): the Trainer's FSDP silently becomes DDP on CPU, because
accelerate only turns an FSDP plugin into ``DistributedType.FSDP`` on GPU-like devices. :class:`SweeperTrainer`
contains the one compatibility shim: on a multi-CPU run that asked for FSDP it makes the accelerator state choose
FSDP (version 2, which works on gloo), so the point really shards. :mod:`sweeper.job.verify` checks the result.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

from sweeper.config.spec import PointSpec
from sweeper.job.faults import attributed
from sweeper.point.library_args import sweeper_deepspeed_config, sweeper_fsdp_config, sweeper_training_args
from sweeper.redact import reveal

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_model(spec: PointSpec) -> torch.nn.Module:
    """The architecture from its published numbers via ``AutoModelForCausalLM.from_config`` (random weights).

    Raises:
        ValueError: from transformers, for an unknown ``model_type`` or inconsistent numbers.
    """
    config = AutoConfig.for_model(spec.model_type, **reveal(spec.model_config))
    config.use_cache = False
    return AutoModelForCausalLM.from_config(config, dtype=_TORCH_DTYPES[spec.model_dtype])


class SyntheticTokens(torch.utils.data.Dataset):
    """``n`` samples of ``seq_len`` random token ids in ``[0, vocab_size)``, ``labels = input_ids``; with
    ``position_ids`` the positions ``0..seq_len-1`` too (Ulysses sequence parallelism needs them in every batch:
    each rank sees a slice of the sequence and must know where it is).

    Deterministic for a seed, so every strategy trains on the same data (losses comparable across points).
    """

    def __init__(self, n: int, seq_len: int, vocab_size: int, seed: int, position_ids: bool = False) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab_size, (n, seq_len), generator=g)
        self.positions = torch.arange(seq_len) if position_ids else None

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """Sample ``i``. Raises :class:`sweeper.job.faults.HarnessFault` (site ``data``) when indexing fails: sweeper's
        own data, never the user's error (no cost without an exception)."""
        try:
            sample = {"input_ids": self.ids[i], "labels": self.ids[i]}
            if self.positions is not None:
                sample["position_ids"] = self.positions
            return sample
        except Exception as e:
            from sweeper.job.faults import HarnessFault

            raise HarnessFault("data", e) from e


def deepspeed_config(spec: PointSpec) -> dict[str, Any]:
    """The DeepSpeed config for ``zero_optimization.stage = spec.zero`` (and ``tensor_parallel.autotp_size =
    spec.tp``): what sweeper generates
    (:func:`sweeper.point.library_args.sweeper_deepspeed_config`: sizes ``"auto"``, filled by the HF integration
    from TrainingArguments and the model, so buckets scale with the model instead of DeepSpeed's 5e8-element
    defaults; no ``"optimizer"`` block, the HF side builds AdamW), with ``spec.deepspeed_config`` merged on top (one
    level deep per block)."""
    cfg = sweeper_deepspeed_config(spec)
    for k, v in reveal(spec.deepspeed_config).items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return cfg


def training_arguments(
    spec: PointSpec, output_dir: str, use_cpu: bool, own: Callable[[], AbstractContextManager[None]] = nullcontext
) -> TrainingArguments:
    """``TrainingArguments`` for one point: the sweeper keys mapped to their HF names
    (:func:`sweeper.point.library_args.sweeper_training_args`, the one copy the gate also reads), then the passthrough.

    Checkpointing: under FSDP, FSDP-native activation checkpointing (``fsdp_config["activation_checkpointing"]``),
    never together with the Trainer flag (docs/cases.md#p02); otherwise the Trainer's ``activation_checkpointing``
    with ``use_reentrant`` passed explicitly (docs/cases.md#p01). No evaluation unless ``spec.eval`` (then bounded by
    ``eval_accumulation_steps``, docs/cases.md#p05). Nothing is saved, logged to a tracker, or evaluated in the timed
    window.

    ``max_steps`` is ``spec.total_steps``: with ``timed_steps=auto`` the timed window counted at its cap
    (``timing.max_timed_steps``); :class:`sweeper.job.timing.StepTimer` stops training after the last profile step
    once the window's real end is known.

    ``own()`` wraps sweeper's own mapping (the rank passes the attributed site ``trainer-args``,
    :mod:`sweeper.job.faults`); the user's passthrough and ``TrainingArguments`` rejecting the result stay outside
    it, the point's own ``config`` error.
    """
    with own():
        kw = _own_training_kwargs(spec, output_dir, use_cpu)
    if spec.fsdp != "none":
        kw["fsdp_config"] = {**kw["fsdp_config"], **reveal(spec.fsdp_config)}
    kw.update(reveal(spec.training_args))  # secrets are references until here (sweeper.redact)
    return TrainingArguments(**kw)


def _own_training_kwargs(spec: PointSpec, output_dir: str, use_cpu: bool) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords sweeper decides for ``spec`` (everything but the user's passthrough)."""
    kw: dict[str, Any] = dict(output_dir=output_dir, use_cpu=use_cpu, **sweeper_training_args(spec))
    if spec.fsdp != "none":
        # fsdp=True with everything in fsdp_config (transformers 5 deprecates the "full_shard auto_wrap" strings):
        # version (FSDP1 only for hybrid_shard, GPU only), the decoder layer as auto-wrap unit, FSDP-native
        # checkpointing from gc, and the strategy as transformers reads it (reshard_after_forward). The user's
        # fsdp_config is merged last; the gate has refused any entry that contradicts the label (docs/gate.md).
        kw["fsdp"] = True
        kw["fsdp_config"] = {k: v for k, v in sweeper_fsdp_config(spec).items() if k != "sharding_strategy"}
    if spec.deepspeed:
        kw["deepspeed"] = deepspeed_config(spec)
    if spec.sp > 1:
        kw["parallelism_config"] = sequence_parallel_config(spec)
    return kw


def sequence_parallel_config(spec: PointSpec) -> Any:
    """accelerate's ``ParallelismConfig`` for DeepSpeed Ulysses of degree ``spec.sp``: the sequence of every batch
    split evenly (``seq_len`` fixed, the gate's rule T06), attention through SDPA wrapped in Ulysses' all-to-alls
    (``accelerate/utils/dataclasses.py`` ``DeepSpeedSequenceParallelConfig``)."""
    from accelerate.utils import DeepSpeedSequenceParallelConfig, ParallelismConfig

    handler = DeepSpeedSequenceParallelConfig(
        sp_seq_length=spec.seq_len, sp_seq_length_is_variable=False, sp_attn_implementation="sdpa"
    )
    return ParallelismConfig(sp_size=spec.sp, sp_backend="deepspeed", sp_handler=handler)


def init_sequence_parallel(spec: PointSpec, use_cuda: bool) -> None:
    """Ulysses needs DeepSpeed's process groups before the Trainer builds its accelerator (else "torch.distributed
    must be initialized"): ``deepspeed.init_distributed`` on the backend of the device. Nothing for ``sp=1``."""
    if spec.sp == 1:
        return
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if use_cuda else "gloo")


class SweeperTrainer(Trainer):
    """``Trainer`` with one contained shim: FSDP (version 2) on a multi-CPU (gloo) run.

    accelerate builds the FSDP plugin but leaves the state at ``DistributedType.MULTI_CPU`` (FSDP only for GPU-like
    devices), so the model would be wrapped in DDP under an FSDP label. After the accelerator is created, this
    switches the state to FSDP with the same plugin; FSDP2's ``fully_shard`` works on gloo. On GPU it does nothing.
    """

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        from accelerate.state import PartialState
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

        state = self.accelerator.state
        if self.args.fsdp_plugin_args is None or state.distributed_type != DistributedType.MULTI_CPU:
            return
        plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)  # the library checks the config
        if plugin.fsdp_version != 2:
            raise ValueError("FSDP on CPU needs fsdp_config version 2 (FSDP1 has no CPU support)")
        with attributed("trainer-shim"):  # sweeper's own switch of accelerate's state (sweeper.job.faults)
            if state.mixed_precision != "no":
                plugin.set_mixed_precision(state.mixed_precision)
            state.distributed_type = DistributedType.FSDP
            # accelerate mirrors the type into PartialState's shared dict at the end of AcceleratorState's own
            # set-up (accelerate/state.py); every later AcceleratorState() copies that dict back over its own, so
            # without the mirror the state reverts to MULTI_CPU once the model is wrapped: the Trainer's no_sync
            # then finds no FSDP2 and every micro-batch of a grad_accum > 1 step reduce-scatters
            # (sync_each_batch), unlike on a GPU
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            state.fsdp_plugin = plugin
            self.is_fsdp_enabled = True
        if plugin.activation_checkpointing and self.args.activation_checkpointing:
            raise ValueError(
                "fsdp_config['activation_checkpointing'] and the activation_checkpointing training argument "
                "can't both be set"
            )
