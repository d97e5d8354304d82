"""Rules on ``per_device_batch_size=auto``, the search of the largest batch that fits (``docs/batch-search.md``)."""

from __future__ import annotations

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule


@rule(
    "B01",
    ("per_device_batch_size", "cluster.gpu_mem_gib", "device"),
    "per_device_batch_size=auto on CPU ranks needs cluster.gpu_mem_gib, the tensor-byte budget per rank",
    "docs/batch-search.md (a CPU has no device memory to fill)",
)
def _auto_needs_capacity(spec: PointSpec, target: Target):
    if spec.batch_search and target.device_type == "cpu" and not target.cluster.gpu_mem_gib:
        return (
            "per_device_batch_size=auto on CPU ranks: a CPU has no device memory to fill, so the search needs a "
            "tensor-byte budget per rank: set cluster.gpu_mem_gib (GiB, e.g. cluster.gpu_mem_gib=0.25), or give "
            "per_device_batch_size a number",
            ("per_device_batch_size", "cluster.gpu_mem_gib", "device"),
        )
    return None


@rule(
    "B02",
    ("per_device_batch_size", "launcher"),
    "per_device_batch_size=auto runs with the local launcher",
    "launchers/batch_search (a rank out of memory is relaunched by torchrun's driver; one SLURM task per rank cannot)",
)
def _auto_local_only(spec: PointSpec, target: Target):
    if spec.batch_search and target.launcher != "local":
        return (
            f"per_device_batch_size=auto with launcher={target.launcher}: the search restarts the ranks after a rank "
            "runs out of memory, which the local launcher does (torchrun); run the search with launcher=local on one "
            "node of the cluster, then sweep the batch it found with launcher=slurm",
            ("per_device_batch_size", "launcher"),
        )
    return None
