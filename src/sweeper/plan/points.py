"""The planning grid: which points ``python -m sweeper.plan`` predicts.

The grid is what the command line sweeps (``-m key=a,b``, exactly as in ``python -m sweeper``), crossed with the
**default planning grid** on the keys the command line does not name:

- the engine, :data:`ENGINES`: DDP, DeepSpeed ZeRO-1/2/3 and FSDP ``full_shard`` / ``shard_grad_op``, unless ``fsdp``
  or ``zero`` is named (then both come from the command line, as in the main app: ``fsdp=full_shard`` alone means
  ``zero=0``);
- gradient checkpointing, :data:`GC`: off and on, unless ``gc`` is named.

- tensor parallelism, :data:`TP_DEGREES`: each engine DeepSpeed AutoTP runs (ZeRO-1, ZeRO-2; and stage 0, plain
  data-parallel replication, in fp32 only, where its states are modelled) also at tp = 2, 4, 8 where the model's heads
  and the cluster's node allow it and the model counts its layout, unless ``tp`` is named.

So ``python -m sweeper.plan model=llama-2-7b cluster=h100-80gb seq_len=4096`` (bf16) plans 6 engines x 2 = 12 points
and 2 x 3 x 2 = 12 tensor-parallel ones,
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


#: Tensor-parallel degrees the default grid adds to the engines DeepSpeed AutoTP runs (``fsdp=none``, ZeRO 0-2),
#: those legal for the model and the node (:func:`tp_degrees`).
TP_DEGREES: tuple[int, ...] = (2, 4, 8)


def engine_label(fsdp: str, zero: int, tp: int = 1, pp: int = 1) -> str:
    """A person's name for the (fsdp, zero, tp, pp) quadruple: ``DDP``, ``ZeRO-2``, ``FSDP full_shard``,
    ``ZeRO-1 + TP 4``, ``TP 2`` (AutoTP with data-parallel replication), ``ZeRO-1 + TP 8 + PP 4``."""
    base = _engine_label(fsdp, zero, tp)
    if pp == 1:
        return base
    return f"PP {pp}" if base == "DDP" else f"{base} + PP {pp}"


def _engine_label(fsdp: str, zero: int, tp: int) -> str:
    if fsdp == "none":
        base = "DDP" if zero == 0 else f"ZeRO-{zero}"
    else:
        base = f"FSDP {fsdp}" if zero == 0 else f"FSDP {fsdp} + ZeRO-{zero}"
    if tp == 1:
        return base
    return f"TP {tp}" if base == "DDP" else f"{base} + TP {tp}"


def tp_degrees(cfg: DictConfig) -> list[int]:
    """The :data:`TP_DEGREES` the gate accepts for ``cfg``'s model and node (a TP group inside the node, whole
    heads per rank: rules T03-T05) and whose layout the capacity model counts (not a tied output head, not gpt2:
    :meth:`~sweeper.capacity.arch.Arch.tp_param_shapes`), so the default grid holds no point it would only refuse or
    leave unknown (``tp=`` on the command line still plans any degree, saying what is unknown)."""
    from sweeper.capacity.arch import Arch, UnknownArchitecture
    from sweeper.point.rules.parallelism import heads_of

    spec = from_config(cfg)
    heads = heads_of(spec)
    if heads is None:
        return []
    legal = [t for t in TP_DEGREES if spec.ranks_per_node % t == 0 and heads[0] % t == 0 and heads[1] % t == 0]
    try:
        Arch.from_config(spec.model_type, spec.model_config).tp_param_shapes(max(legal, default=1))
    except UnknownArchitecture:
        return []
    return legal


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
    per combination; ``configs`` are left as they are); unless ``tp`` is named, each engine DeepSpeed AutoTP runs
    (``fsdp=none``, ZeRO 0-2) also at every legal tensor-parallel degree (:func:`tp_degrees`)."""
    out = []
    for cfg in configs:
        degrees: list[int] | None = None
        for combo in default_axes(named):
            point = copy.deepcopy(cfg)
            for key, value in combo.items():
                point[key] = value
            out.append(point)
            # AutoTP runs fsdp=none at ZeRO 0-2; at stage 0 in 16 bits its optimizer's masters are not modelled
            # (sweeper.capacity.states): such a row would only say "unknown"
            if (
                "tp" in named
                or point.fsdp != "none"
                or point.zero == 3
                or point.sp > 1  # AutoTP with Ulysses is not measured (rule T09)
                or (point.zero == 0 and point.precision != "fp32")
            ):
                continue
            degrees = tp_degrees(point) if degrees is None else degrees
            for t in degrees:
                parallel = copy.deepcopy(point)
                parallel.tp = t
                out.append(parallel)
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
