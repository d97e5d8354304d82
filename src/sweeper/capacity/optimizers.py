"""What the optimizer a point trains with keeps per parameter tensor (bytes), from ``training_args.optim`` (the
names of transformers' ``OptimizerNames``; default ``adamw_torch_fused``, transformers' default with torch >= 2.8)
and ``training_args.optim_args``, or under DeepSpeed from the optimizer DeepSpeed really steps
(:func:`resolve_optimizer`).

Every state below was read in the source of the installed libraries (transformers 5.24 ``trainer_optimizer.py`` and
``optimization.Adafactor``, torch 2.13 ``torch/optim``, DeepSpeed 0.19 ``ops/adam/cpu_adam.py``,
``ops/adagrad/cpu_adagrad.py``, accelerate 1.16 ``utils/deepspeed.map_pytorch_optim_to_deepspeed``) and, for the
torch optimizers and Adafactor, measured on CPU ranks under the HF Trainer
(``tests/integration/test_plan_optimizers.py``, within 2 %). bitsandbytes is not installed here: its 8-bit layout is
predicted from its source (``bitsandbytes/optim/optimizer.py``, ``Optimizer2State.init_state``/``Optimizer1State``)
and never measured. An optimizer this module does not know raises :class:`UnknownOptimizer`: the memory numbers that
depend on it are then unknown, never guessed (``sweeper.capacity.predict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Bytes of a float32 element (Adafactor's factored moments, DeepSpeed's CPU optimizers, torch's ``step`` scalars).
F32 = 4
#: bitsandbytes 8-bit blockwise quantisation: block size (elements per fp32 ``absmax``), the size under which a
#: tensor keeps 32-bit states (``min_8bit_size``), and the 256-entry fp32 quantisation maps (``qmap1``/``qmap2``).
BNB_BLOCK = 256
BNB_MIN_8BIT = 4096
BNB_QMAP = 256 * F32


#: ``TrainingArguments.optim``'s default in transformers 5 with torch >= 2.8 (``training_args.py``: ``default_optim``).
DEFAULT_OPTIM = "adamw_torch_fused"


class UnknownOptimizer(ValueError):
    """The memory model does not know what this optimizer stores (the message names it and says why)."""


@dataclass(frozen=True)
class OptimizerModel:
    """The state an optimizer keeps, as a rule per parameter tensor.

    Attributes:
        name: the name the point gives (``training_args.optim``) or the optimizer DeepSpeed builds.
        kind: ``adam`` (two moments), ``sgd`` (nothing), ``momentum`` (one buffer), ``adafactor``, ``adagrad``,
            ``rmsprop``, ``bnb8_2`` / ``bnb8_1`` (bitsandbytes 8-bit, two or one states).
        moments: full-size state tensors per parameter (``adam`` 2, ``momentum`` 1, ``rmsprop`` 1 + momentum +
            centred average, ``adagrad`` 1).
        state_bytes_per_element: bytes per element of those tensors; None = the parameter's (torch's
            ``zeros_like(p)``).
        scalar_bytes: bytes per tensor of 0-d tensors kept beside them (torch's float32 ``step``; Adafactor's
            ``RMS``); an int ``step`` (DeepSpeed's CPU optimizers, bitsandbytes, Adafactor's) is not a tensor: 0.
        source: where the layout comes from (a term's source in the breakdown).
        note: what the point asked for that is not what runs (accelerate's substitution under ZeRO-Offload), or None.
    """

    name: str
    kind: str
    moments: int
    state_bytes_per_element: int | None
    scalar_bytes: int
    source: str
    note: str | None = None

    def tensor_bytes(self, rows: int, rest: int, param_bytes: int) -> int:
        """Bytes of the state for one parameter tensor of ``rows x rest`` elements (``rest`` = 1: a vector) stored
        in ``param_bytes`` per element."""
        n = rows * rest
        if self.kind == "adafactor":
            # factored second moment for tensors of 2+ dims: a row and a column vector (shape[:-1], shape[:-2] +
            # shape[-1:]), fp32 (the gradient is upcast first); full exp_avg_sq for vectors; RMS a 0-d fp32 tensor
            return (rows + rest if rest > 1 else n) * F32 + self.scalar_bytes
        if self.kind in ("bnb8_2", "bnb8_1"):
            states = 2 if self.kind == "bnb8_2" else 1
            if n < BNB_MIN_8BIT:
                return states * n * F32
            return states * (n + -(-n // BNB_BLOCK) * F32)
        per = self.state_bytes_per_element or param_bytes
        return self.moments * n * per + self.scalar_bytes

    def state_bytes(self, shapes: list[tuple[int, int]], param_bytes: int) -> int:
        """Bytes of the state for every tensor of ``shapes`` (``(rows, elements per row)`` each), plus what is
        shared once (bitsandbytes' quantisation maps, one per state)."""
        shared = BNB_QMAP * (2 if self.kind == "bnb8_2" else 1) if self.kind.startswith("bnb8") else 0
        return sum(self.tensor_bytes(r, c, param_bytes) for r, c in shapes) + shared


_TORCH_STEP = "a float32 0-d step tensor per parameter tensor"
ADAMW_TORCH = OptimizerModel(
    DEFAULT_OPTIM,
    "adam",
    2,
    None,
    F32,
    "torch AdamW (adamw_torch, adamw_torch_fused: same state): exp_avg + exp_avg_sq in the parameter's dtype, "
    + _TORCH_STEP,
)


def parse_optim_args(text: Any) -> dict[str, str]:
    """``training_args.optim_args`` (``"momentum=0.9,nesterov=True"``) as transformers parses it
    (``trainer_optimizer._parse_optim_args``: comma-separated ``key=value``, spaces removed)."""
    if not text:
        return {}
    out = {}
    for item in str(text).replace(" ", "").split(","):
        key, _, value = item.partition("=")
        out[key] = value
    return out


def _number(args: Mapping[str, str], key: str) -> float:
    try:
        return float(args.get(key, 0) or 0)
    except ValueError as e:
        raise UnknownOptimizer(f"optim_args {key}={args[key]!r} is not a number") from e


def hf_optimizer(training_args: Mapping[str, Any]) -> OptimizerModel:
    """The optimizer the HF Trainer builds from ``training_args`` (``Trainer.get_optimizer_cls_and_kwargs``).

    Raises:
        UnknownOptimizer: an ``optim`` whose state this model does not know (named, with the reason).
    """
    name = str(training_args.get("optim") or DEFAULT_OPTIM).lower()
    args = parse_optim_args(training_args.get("optim_args"))
    if name in ("adamw_torch", "adamw_torch_fused"):
        return OptimizerModel(name, "adam", 2, None, F32, ADAMW_TORCH.source)
    if name == "sgd":
        # torch SGD keeps a momentum_buffer (a clone of the first gradient, the parameter's dtype) only when
        # momentum != 0; HF passes momentum only through optim_args ("momentum=0.9"); no step
        if _number(args, "momentum"):
            return OptimizerModel(
                name,
                "momentum",
                1,
                None,
                0,
                "torch SGD with momentum (optim_args): momentum_buffer in the parameter's dtype",
            )
        return OptimizerModel(name, "sgd", 0, None, 0, "torch SGD without momentum: no state")
    if name == "adafactor":
        # HF passes lr, scale_parameter=False, relative_step=False and never beta1: no exp_avg
        return OptimizerModel(
            name,
            "adafactor",
            0,
            F32,
            F32,
            "transformers Adafactor (beta1=None: no exp_avg): fp32 exp_avg_sq_row + exp_avg_sq_col for tensors of 2+ "
            "dims, a full fp32 exp_avg_sq for vectors, a 0-d fp32 RMS per tensor (step is an int)",
        )
    if name == "adagrad":
        return OptimizerModel(
            name, "adagrad", 1, None, F32, f"torch Adagrad: sum in the parameter's dtype, {_TORCH_STEP}"
        )
    if name == "rmsprop":
        moments = 1 + (1 if _number(args, "momentum") else 0)
        moments += 1 if args.get("centered", "").lower() in ("true", "1", "yes") else 0
        return OptimizerModel(
            name,
            "rmsprop",
            moments,
            None,
            F32,
            f"torch RMSprop: square_avg (+ momentum_buffer with momentum, + grad_avg when centered), {_TORCH_STEP}",
        )
    bnb = (
        "bitsandbytes 8-bit blockwise (not installed here: from its source, not measured): uint8 states, an fp32 "
        f"absmax per {BNB_BLOCK} elements, 32-bit states under {BNB_MIN_8BIT} elements, a 256-entry fp32 map per state"
    )
    if name in ("adamw_bnb_8bit", "adamw_8bit", "rmsprop_bnb_8bit"):
        states = "bnb8_2" if name != "rmsprop_bnb_8bit" else "bnb8_1"
        return OptimizerModel(name, states, 0, 1, 0, bnb)
    if name == "lion_8bit":
        return OptimizerModel(name, "bnb8_1", 0, 1, 0, bnb + " (Lion: one state)")
    if name == "lion_32bit":
        return OptimizerModel(name, "adam", 1, F32, 0, "bitsandbytes Lion 32-bit (from its source): one fp32 state")
    if name.startswith("paged_"):
        raise UnknownOptimizer(
            f"optim={name}: bitsandbytes' paged optimizers keep their state in CUDA unified memory, outside the "
            "allocator the model predicts and paged to the host under pressure"
        )
    raise UnknownOptimizer(f"optim={name}: the memory model does not know what this optimizer stores")


def resolve_optimizer(
    training_args: Mapping[str, Any], deepspeed_config: Mapping[str, Any] | None, offload_optimizer: bool
) -> OptimizerModel:
    """The optimizer that really steps the point.

    Without DeepSpeed (``deepspeed_config`` None): the HF Trainer's (:func:`hf_optimizer`). Under DeepSpeed:

    * a ``deepspeed_config.optimizer`` block: HF passes a ``DummyOptim`` and DeepSpeed builds that type
      (``runtime/engine.py _configure_basic_optimizer``): ``Adam``/``AdamW`` is FusedAdam, or DeepSpeedCPUAdam with
      ``offload_optimizer``; ``Adagrad`` is torch's, or DeepSpeedCPUAdagrad offloaded; both keep fp32 states
      and an int step. Any other type is unknown;
    * no block (sweeper's default): the HF optimizer wrapped by ZeRO, stepping the fp32 master partitions. With
      ``offload_optimizer`` and ``zero_force_ds_cpu_optimizer`` true (DeepSpeed's default) accelerate replaces it
      (``map_pytorch_optim_to_deepspeed``): torch Adagrad by DeepSpeedCPUAdagrad, **every other optimizer by
      DeepSpeedCPUAdam** (two fp32 moments), whatever ``optim`` says.

    Raises:
        UnknownOptimizer: the optimizer that runs is one this model does not know.
    """
    if deepspeed_config is None:
        return hf_optimizer(training_args)
    cpu_adam = OptimizerModel(
        "DeepSpeedCPUAdam", "adam", 2, F32, 0, "DeepSpeedCPUAdam: fp32 exp_avg + exp_avg_sq, an int step"
    )
    cpu_adagrad = OptimizerModel(
        "DeepSpeedCPUAdagrad", "adagrad", 1, F32, 0, "DeepSpeedCPUAdagrad: fp32 exp_avg_sq, an int step"
    )
    block = deepspeed_config.get("optimizer")
    if isinstance(block, Mapping):
        kind = str(block.get("type", "")).lower()
        if kind in ("adam", "adamw"):
            if offload_optimizer:
                return cpu_adam
            return OptimizerModel("FusedAdam", "adam", 2, F32, 0, "DeepSpeed FusedAdam: fp32 exp_avg + exp_avg_sq")
        if kind == "adagrad":
            if offload_optimizer:
                return cpu_adagrad
            return OptimizerModel(
                "Adagrad", "adagrad", 1, F32, F32, f"torch Adagrad (DeepSpeed): fp32 sum, {_TORCH_STEP}"
            )
        raise UnknownOptimizer(
            f"deepspeed_config.optimizer.type={block.get('type')!r}: the memory model does not know what it stores"
        )
    force = deepspeed_config.get("zero_force_ds_cpu_optimizer", True)
    if offload_optimizer and str(force).lower() not in ("false", "0"):
        name = str(training_args.get("optim") or DEFAULT_OPTIM)
        chosen = cpu_adagrad if name == "adagrad" else cpu_adam
        note = None
        if name not in ("adagrad", "adamw_torch", "adamw_torch_fused"):
            note = (
                f"optim={name} under ZeRO-Offload: accelerate replaces it by DeepSpeedCPUAdam "
                "(zero_force_ds_cpu_optimizer is true); the plan counts what runs"
            )
        return OptimizerModel(chosen.name, chosen.kind, chosen.moments, F32, 0, chosen.source, note)
    opt = hf_optimizer(training_args)
    if opt.state_bytes_per_element is None:  # the wrapped optimizer steps fp32 master partitions
        opt = OptimizerModel(opt.name, opt.kind, opt.moments, F32, opt.scalar_bytes, opt.source + " (on fp32 masters)")
    return opt
