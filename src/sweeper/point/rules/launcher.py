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
