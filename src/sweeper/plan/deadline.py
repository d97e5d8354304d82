"""The inverse question: "train ``train_tokens`` tokens within ``plan.deadline_days`` days" -> for each cluster, the
fewest nodes and the configuration that meets the deadline, cheapest first.

``python -m sweeper.plan model=llama-2-7b seq_len=4096 train_tokens=2e12 plan.deadline_days=30`` asks it over the
catalogue (:data:`CATALOGUE`), ``cluster=a100-80gb`` (or ``-m cluster=a,b``) over the clusters named. For each
cluster, every configuration of the planning grid (:mod:`sweeper.plan.points`: the engines x gc, or what the
command line names) is predicted on ``n`` nodes of ``ranks_per_node`` ranks (the cluster's GPUs per node unless
given), each at the largest per-device batch predicted to fit unless ``per_device_batch_size`` is given:

* ``n`` runs over the powers of two up to ``plan.max_nodes``; the first that meets the deadline is then narrowed by
  bisection to the fewest nodes that meet it (assumption, stated: the predicted days do not grow with the node count,
  which holds for the time model, whose per-device throughput falls at most by the communication it adds);
* at that node count, the configuration with the fewest GPU-hours is the answer (fewest predicted days on a tie);
* the clusters are ranked by cost (GPU-hours x ``cluster.price_per_gpu_hour``) when every cluster that meets the
  deadline has a price, by GPU-hours otherwise; clusters that cannot meet it come last, each with the reason:
  no configuration fits, or the fastest one needs more than ``plan.max_nodes`` nodes (with its days there).

"Not within D days on up to N nodes" is an answer, never an error. Every prediction is
:func:`sweeper.plan.rows.plan_row`'s, gated as a SLURM sweep on that cluster would be; the rows behind each answer are
written to ``plan.csv`` (one per cluster, node count and configuration evaluated).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from sweeper.config.sections import ClusterConfig
from sweeper.config.spec import PointSpec
from sweeper.plan.points import expand, plan_points
from sweeper.plan.rows import PLANNED, plan_frame

#: The cluster catalogue (``conf/cluster/<name>.yaml``, docs/planning.md "The cluster catalogue"): one node of 8 GPUs
#: each, the clusters the inverse question considers unless ``cluster=`` names others.
CATALOGUE: tuple[str, ...] = ("a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l40s-48gb", "v100-32gb")
#: ``status`` of an answer.
MET, NOT_MET = "meets the deadline", "not within the deadline"
#: The answer for a cluster on which no configuration of the grid runs at all (none predicted to fit, or refused:
#: bf16 on a V100), whatever the deadline.
NO_FIT = "no configuration runs there"
#: Columns of ``deadline.csv``, in order.
ANSWER_COLUMNS: tuple[str, ...] = (
    "cluster",
    "gpu_name",
    "status",
    "nodes",
    "ranks_per_node",
    "world_size",
    "engine",
    "fsdp",
    "zero",
    "gc",
    "per_device_batch_size",
    "precision",
    "predicted_tokens_per_s_per_device",
    "predicted_train_days",
    "predicted_gpu_hours",
    "price_per_gpu_hour",
    "predicted_cost",
    "deadline_days",
    "train_tokens",
    "reason",
)


@dataclass(frozen=True)
class Question:
    """What is asked: ``train_tokens`` tokens within ``deadline_days`` days, on at most ``max_nodes`` nodes, with the
    batch fixed (``fixed_batch``: ``per_device_batch_size`` given) or the largest that fits."""

    train_tokens: float
    deadline_days: float
    max_nodes: int
    fixed_batch: bool
    fixed_nodes: int | None


def question(cfg: DictConfig, named: set[str]) -> Question:
    """The question a composed plan config asks (``plan.deadline_days`` set), ``named``: the command line's keys.

    Raises:
        ValueError: ``plan.deadline_days`` or ``train_tokens`` not positive, or ``plan.max_nodes`` below 1.
    """
    days, tokens, most = cfg.plan.deadline_days, float(cfg.train_tokens), int(cfg.plan.max_nodes)
    if days is None or not float(days) > 0:
        raise ValueError(f"plan.deadline_days must be a positive number of days, got {days!r}")
    if not tokens > 0:
        raise ValueError(f"train_tokens must be a positive number of tokens, got {tokens!r}")
    if most < 1:
        raise ValueError(f"plan.max_nodes must be at least 1, got {most}")
    nodes = int(cfg.nodes) if "nodes" in named else None
    return Question(tokens, float(days), most, "per_device_batch_size" in named, nodes)


def on_clusters(configs: Sequence[DictConfig], named: set[str]) -> list[DictConfig]:
    """The configs to answer for: as given when the command line names ``cluster``, else each config on every
    cluster of :data:`CATALOGUE` (``ranks_per_node`` follows the cluster's ``gpus_per_node`` unless given)."""
    if "cluster" in named:
        return list(configs)
    from sweeper.paths import conf_dir

    out = []
    for cfg in configs:
        for name in CATALOGUE:
            point = copy.deepcopy(cfg)
            node = OmegaConf.load(conf_dir() / "cluster" / f"{name}.yaml")
            point.cluster = OmegaConf.merge(OmegaConf.structured(ClusterConfig), node)
            out.append(point)
    return out


def _days(row: pd.Series, q: Question) -> tuple[float | None, float | None, Any]:
    """(days, GPU-hours, batch) of a planned row: at its largest batch unless the batch is fixed."""
    if q.fixed_batch:
        return row["predicted_train_days"], row["predicted_gpu_hours"], int(row["per_device_batch_size"])
    best = row["max_per_device_batch_size"]
    if pd.isna(best) or not best:
        return None, None, None
    return row["predicted_train_days_at_max_batch"], row["predicted_gpu_hours_at_max_batch"], int(best)


def _scaled(cfg: DictConfig, nodes: int, q: Question) -> DictConfig:
    point = copy.deepcopy(cfg)
    point.nodes = nodes
    point.train_tokens = q.train_tokens
    return point


class _Cluster:
    """The inverse search on one cluster: plan frames per node count, cached."""

    def __init__(self, configs: Sequence[DictConfig], named: set[str], q: Question) -> None:
        self.configs, self.named, self.q = configs, named | {"nodes"}, q
        self.frames: dict[int, pd.DataFrame] = {}

    def frame(self, nodes: int) -> pd.DataFrame:
        if nodes not in self.frames:
            points: list[tuple[PointSpec, ClusterConfig]] = plan_points(
                expand([_scaled(c, nodes, self.q) for c in self.configs], self.named)
            )
            self.frames[nodes] = plan_frame(points)
        return self.frames[nodes]

    def best(self, nodes: int) -> tuple[pd.Series, float, float, Any] | None:
        """The row with the fewest GPU-hours among those that fit and meet the deadline on ``nodes`` nodes."""
        found = None
        for _, row in self.frame(nodes).iterrows():
            if not _fits(row):
                continue
            days, hours, batch = _days(row, self.q)
            if days is None or hours is None or pd.isna(days) or days > self.q.deadline_days:
                continue
            key = (float(hours), float(days))
            if found is None or key < (found[2], found[1]):
                found = (row, float(days), float(hours), batch)
        return found

    def fastest(self, nodes: int) -> float | None:
        """The fewest predicted days of any configuration that fits on ``nodes`` nodes (None: none fits)."""
        values = []
        for _, row in self.frame(nodes).iterrows():
            if _fits(row):
                days = _days(row, self.q)[0]
                if days is not None and not pd.isna(days):
                    values.append(float(days))
        return min(values) if values else None

    def search(self) -> tuple[int | None, tuple[pd.Series, float, float, Any] | None]:
        """(fewest nodes, its best row) meeting the deadline, or (None, None)."""
        if self.q.fixed_nodes is not None:
            n = self.q.fixed_nodes
            found = self.best(n)
            return (n, found) if found else (None, None)
        counts = [1 << k for k in range(int(math.log2(self.q.max_nodes)) + 1)]
        if counts[-1] != self.q.max_nodes:
            counts.append(self.q.max_nodes)
        below = 0
        for n in counts:
            if self.best(n):
                lo, hi = below, n  # best(hi) holds; best(lo) does not (or lo is 0)
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if self.best(mid) else (mid, hi)
                return hi, self.best(hi)
            below = n
        return None, None


def answer(configs: Sequence[DictConfig], named: set[str], q: Question) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Answer ``q`` for each cluster of ``configs`` (see the module doc).

    Returns:
        ``(answers, rows)``: one row per cluster in :data:`ANSWER_COLUMNS`, best first; and every plan row
        evaluated, with its node count.
    """
    by_cluster: dict[str, list[DictConfig]] = {}
    for cfg in configs:
        by_cluster.setdefault(str(cfg.cluster.name), []).append(cfg)
    answers, evaluated = [], []
    for name, group in by_cluster.items():
        search = _Cluster(group, named, q)
        nodes, found = search.search()
        answers.append(_answer_row(name, search, nodes, found))
        evaluated += [df for _, df in sorted(search.frames.items())]
    met = [a for a in answers if a["status"] == MET]
    by = "predicted_cost" if met and all(a["predicted_cost"] is not None for a in met) else "predicted_gpu_hours"
    answers.sort(key=lambda a: (a["status"] != MET, a.get(by) if a["status"] == MET else math.inf))
    rows = pd.concat(evaluated, ignore_index=True) if evaluated else pd.DataFrame()
    return pd.DataFrame(answers, columns=list(ANSWER_COLUMNS)), rows


def _fits(row: pd.Series) -> bool:
    """A planned row predicted to fit (``fits`` True; unknown or False is not)."""
    fits = row["fits"]
    return row["status"] == PLANNED and not pd.isna(fits) and bool(fits)


def _answer_row(name: str, search: _Cluster, nodes: int | None, found: Any) -> dict[str, Any]:
    q = search.q
    first = search.frame(nodes or q.fixed_nodes or 1)
    cluster = first.iloc[0] if len(first) else None
    base: dict[str, Any] = {
        "cluster": name,
        "gpu_name": None if cluster is None else cluster["gpu_name"],
        "deadline_days": q.deadline_days,
        "train_tokens": q.train_tokens,
    }
    price = _price(search.configs)
    base["price_per_gpu_hour"] = price
    if found is not None:
        row, days, hours, batch = found
        return {
            **base,
            "status": MET,
            "nodes": nodes,
            "ranks_per_node": int(row["ranks_per_node"]),
            "world_size": int(row["world_size"]),
            "engine": row["engine"],
            "fsdp": row["fsdp"],
            "zero": int(row["zero"]),
            "gc": bool(row["gc"]),
            "per_device_batch_size": batch,
            "precision": row["precision"],
            "predicted_tokens_per_s_per_device": _at_batch(row, q),
            "predicted_train_days": days,
            "predicted_gpu_hours": hours,
            "predicted_cost": None if price is None else hours * price,
            "reason": None,
        }
    fastest = search.fastest(q.fixed_nodes or q.max_nodes)
    return {**base, "status": NO_FIT if fastest is None else NOT_MET, "reason": _why_not(search, fastest)}


def _at_batch(row: pd.Series, q: Question) -> Any:
    key = "predicted_tokens_per_s_per_device" + ("" if q.fixed_batch else "_at_max_batch")
    return row[key]


def _price(configs: Sequence[DictConfig]) -> float | None:
    price = configs[0].cluster.get("price_per_gpu_hour") if configs else None
    return None if price is None else float(price)


def _why_not(search: _Cluster, fastest: float | None) -> str:
    """Why ``search``'s cluster has no answer: nothing fits (``fastest`` None), or ``fastest`` (days) is too long."""
    q = search.q
    most = q.fixed_nodes or q.max_nodes
    where = f"nodes={most}" if q.fixed_nodes else f"up to plan.max_nodes={most} nodes"
    if fastest is None:
        refused = search.frame(most)
        reasons = "; ".join(dict.fromkeys(str(r) for r in refused["reason"].dropna()))[:300]
        why = "no configuration of the grid is predicted to fit"
        return f"not within {q.deadline_days:g} days on {where}: {why}" + (f" ({reasons})" if reasons else "")
    return (
        f"not within {q.deadline_days:g} days on {where}: the fastest configuration that fits needs "
        f"{fastest:,.1f} days on {most} node(s)"
    )
