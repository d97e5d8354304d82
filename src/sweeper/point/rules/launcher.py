"""Rules on what a launcher can run."""

from __future__ import annotations

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule


@rule("L01", ("nodes", "launcher"), "the local launcher runs one node", "launchers/local")
def _local_one_node(spec: PointSpec, target: Target):
    if target.launcher == "local" and spec.nodes > 1:
        return (
            f"nodes={spec.nodes} needs a cluster launcher; the local launcher runs one node "
            "(use nodes=1, or launcher=slurm cluster=<name>)",
            ("nodes", "launcher"),
        )
    return None


@rule(
    "L02",
    ("ranks_per_node", "cluster.gpus_per_node"),
    "on a GPU cluster, ranks_per_node is at most cluster.gpus_per_node (one rank per GPU)",
    "docs/cases.md#u11 (accelerate#2246 'Duplicate GPU detected': two ranks on one GPU, NCCL refuses)",
)
def _ranks_over_gpus(spec: PointSpec, target: Target):
    gpus = target.cluster.gpus_per_node
    if gpus > 0 and (target.device_type == "cuda" or target.launcher == "slurm") and spec.ranks_per_node > gpus:
        return (
            f"ranks_per_node={spec.ranks_per_node} > cluster.gpus_per_node={gpus}: each rank needs a GPU of its own "
            "(two ranks on one GPU fail in NCCL with 'Duplicate GPU detected'); use "
            f"ranks_per_node<={gpus}, or more nodes",
            ("ranks_per_node", "cluster.gpus_per_node"),
        )
    return None
