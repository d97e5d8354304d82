"""Which model states a point keeps off the device (:class:`Offload`), read from its passthrough configs the way the
engines read them:

* DeepSpeed ZeRO-Offload (``deepspeed_config.zero_optimization``): ``offload_optimizer.device`` (``cpu`` / ``nvme``;
  stages 1-3) moves the fp32 master partitions, the optimizer's states and the fp32 gradient partitions off the
  device, and the optimizer step to the CPU (``runtime/zero/stage_1_and_2.py``: ``cpu_offload``,
  ``single_partition_of_fp32_groups`` and their ``.grad`` on the host; ``stage3.py``: ``offload_optimizer``,
  ``fp32_partitioned_groups_flat`` and ``grad_partitions_flat_buffer`` on ``self.device = cpu``);
  ``offload_param.device`` (stage 3 only) moves the 16-bit parameter partitions (``param_groups_fp16_flat_cpu_memory``)
  and gathers each layer to the device for its compute. Both default to pinned host memory (``pin_memory: true``,
  ``runtime/zero/offload_config.py``). The deprecated booleans ``cpu_offload`` / ``cpu_offload_param`` mean ``cpu``.
* FSDP ``fsdp_config.cpu_offload`` (transformers' key; accelerate's ``FullyShardedDataParallelPlugin.cpu_offload``,
  env ``FSDP_OFFLOAD_PARAMS``): FSDP2 ``CPUOffloadPolicy(pin_memory=True)`` keeps the sharded parameters and
  gradients on the host and steps the optimizer there (its states on the host); FSDP1 ``CPUOffload(offload_params=
  True)`` (``hybrid_shard``) the same.

``nvme`` puts the states on neither the device nor in host memory (DeepSpeed's swap buffers in pinned host memory
are not modelled: the host fit is then unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Where a state can live off the device.
NONE, CPU, NVME = "none", "cpu", "nvme"


@dataclass(frozen=True)
class Offload:
    """Where the offloadable states of a point live.

    Attributes:
        optimizer: ``none``, ``cpu`` or ``nvme``: the optimizer's states, the fp32 masters and (DeepSpeed, FSDP) the
            gradient partitions the step reads.
        params: ``none``, ``cpu`` or ``nvme``: the (sharded) parameters at rest.
        pinned: the host copies are page-locked (both engines' default).
        keys: the config keys that asked for it (for notes and advice).
        notes: what the config says that the engine ignores.
    """

    optimizer: str = NONE
    params: str = NONE
    pinned: bool = True
    keys: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        """Something is offloaded."""
        return self.optimizer != NONE or self.params != NONE


def _truth(v: Any) -> bool:
    return v is True or str(v).lower() in ("true", "1", "yes")


def _device(block: Any) -> str:
    if isinstance(block, Mapping):
        d = str(block.get("device") or NONE).lower()
        return d if d in (CPU, NVME) else NONE
    return NONE


def offload_of(fsdp: str, zero: int, fsdp_config: Mapping[str, Any], deepspeed_config: Mapping[str, Any]) -> Offload:
    """The :class:`Offload` of a point from its ``fsdp``, ``zero`` and passthrough configs (see the module doc)."""
    if zero:
        z = deepspeed_config.get("zero_optimization") or {}
        opt, par = _device(z.get("offload_optimizer")), _device(z.get("offload_param"))
        if opt == NONE and _truth(z.get("cpu_offload")):
            opt = CPU
        if par == NONE and _truth(z.get("cpu_offload_param")):
            par = CPU
        keys, notes = [], []
        if opt != NONE:
            keys.append("deepspeed_config.zero_optimization.offload_optimizer.device")
        if par != NONE:
            keys.append("deepspeed_config.zero_optimization.offload_param.device")
            if zero < 3:
                notes.append(
                    f"offload_param.device={par} at zero={zero}: DeepSpeed offloads parameters only at stage 3"
                )
                par = NONE
        blocks = [b for b in (z.get("offload_optimizer"), z.get("offload_param")) if isinstance(b, Mapping)]
        pinned = all(_truth(b.get("pin_memory", True)) for b in blocks)
        return Offload(opt, par, pinned, tuple(keys), tuple(notes))
    if fsdp != "none":
        for key, value in fsdp_config.items():
            name = key[5:] if key.startswith("fsdp_") else key
            if name in ("cpu_offload", "offload_params") and _truth(value):
                return Offload(CPU, CPU, True, (f"fsdp_config.{key}",))
    return Offload()
