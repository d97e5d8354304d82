"""The planning grid: which points ``python -m sweeper.plan`` predicts.

The grid is what the command line sweeps (``-m key=a,b``, exactly as in ``python -m sweeper``), crossed with the
**default planning grid** on the keys the command line does not name:

- the engine, :data:`ENGINES`: DDP, DeepSpeed ZeRO-1/2/3 and FSDP ``full_shard`` / ``shard_grad_op``, unless ``fsdp``
  or ``zero`` is named (then both come from the command line, as in the main app: ``fsdp=full_shard`` alone means
  ``zero=0``);
- gradient checkpointing, :data:`GC`: off and on, unless ``gc`` is named.

So ``python -m sweeper.plan model=llama-2-7b cluster=h100-80gb seq_len=4096`` plans 6 engines x 2 = 12 points,
``gc=true`` plans the 6 engines with checkpointing, ``-m fsdp=none,full_shard zero=0,3`` plans the 4 combinations
(the gate then refuses ``full_shard`` with ``zero=3``: listed as refused, with the reason).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from omegaconf import DictConfig

from sweeper.config.compose import plain_node
from sweeper.config.sections import ClusterConfig, from_mapping
from sweeper.config.spec import PointSpec, from_config

#: The default engines, (fsdp, zero): DDP, ZeRO-1/2/3, FSDP full_shard and shard_grad_op. ``hybrid_shard`` is left
#: out: on one node it is full_shard (pass ``-m fsdp=hybrid_shard nodes=2`` to plan it).
ENGINES: tuple[tuple[str, int], ...] = (
    ("none", 0),
    ("none", 1),
    ("none", 2),
    ("none", 3),
    ("full_shard", 0),
    ("shard_grad_op", 0),
)
#: The default gradient-checkpointing values.
GC: tuple[bool, ...] = (False, True)


def engine_label(fsdp: str, zero: int) -> str:
    """A person's name for the (fsdp, zero) pair: ``DDP``, ``ZeRO-2``, ``FSDP full_shard``."""
    if fsdp == "none":
        return "DDP" if zero == 0 else f"ZeRO-{zero}"
    return f"FSDP {fsdp}" if zero == 0 else f"FSDP {fsdp} + ZeRO-{zero}"


def named_keys(overrides: Iterable[str]) -> set[str]:
    """The config keys (or groups) that command-line overrides name: ``["gc=true", "+sweeps=zero"]`` ->
    ``{"gc", "sweeps"}``."""
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


def default_axes(named: set[str]) -> list[dict[str, Any]]:
    """The combinations of the default planning grid on the keys not in ``named`` (see the module doc); ``[{}]``
    when the command line names them all."""
    engines = [{}] if named & {"fsdp", "zero"} else [{"fsdp": f, "zero": z} for f, z in ENGINES]
    gcs = [{}] if "gc" in named else [{"gc": g} for g in GC]
    return [{**e, **g} for e in engines for g in gcs]


def expand(configs: Sequence[DictConfig], named: set[str]) -> list[DictConfig]:
    """Every composed point config crossed with :func:`default_axes`, values set through the typed schema (a copy
    per combination; ``configs`` are left as they are)."""
    out = []
    for cfg in configs:
        for combo in default_axes(named):
            point = copy.deepcopy(cfg)
            for key, value in combo.items():
                point[key] = value
            out.append(point)
    return out


def plan_points(configs: Sequence[DictConfig]) -> list[tuple[PointSpec, ClusterConfig]]:
    """``(spec, cluster)`` for each config, in order, the same point twice kept once (as a sweep does).

    ``cluster`` is the point's cluster config (:class:`sweeper.config.schema.ClusterConfig`).
    """
    seen: set[str] = set()
    out = []
    for cfg in configs:
        spec = from_config(cfg)
        cluster = from_mapping(ClusterConfig, plain_node(cfg.cluster))
        key = json.dumps([spec.to_dict(), asdict(cluster)], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append((spec, cluster))
    return out
