"""Rules on the cluster config's numbers (``cluster.<key>``): each is in its range, or null where null means
unknown. A number out of range would otherwise be read as a capacity (a negative ``gpu_mem_gib`` made every point
"not fit" and advised sharding more, docs/cases.md#u10)."""

from __future__ import annotations

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule

#: ``cluster.<key>`` that must be a positive number when set (null: unknown), with its unit.
POSITIVE_OR_NULL: dict[str, str] = {
    "gpu_mem_gib": "GiB (2**30 bytes) per device, as torch reports it",
    "gpu_mem_vendor_gb": "GB (10**9 bytes) per device, as the vendor labels it",
    "host_mem_gib": "GiB (2**30 bytes) of host memory per node",
    "intra_node_bandwidth_gb_s": "GB/s (10**9 bytes/s) per device inside a node",
    "inter_node_bandwidth_gb_s": "GB/s (10**9 bytes/s) per device across nodes",
}
#: ``cluster.<key>`` that must be at least a bound, with the bound.
AT_LEAST: dict[str, int] = {
    "gpus_per_node": 0,
    "cpus_per_task": 1,
    "array_parallelism": 1,
    "signal_delay_s": 0,
    "max_requeues": 0,
}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@rule(
    "G13",
    (
        "cluster.gpu_mem_gib",
        "cluster.gpu_mem_vendor_gb",
        "cluster.host_mem_gib",
        "cluster.intra_node_bandwidth_gb_s",
        "cluster.inter_node_bandwidth_gb_s",
        "cluster.price_per_gpu_hour",
        "cluster.gpus_per_node",
        "cluster.cpus_per_task",
        "cluster.array_parallelism",
        "cluster.signal_delay_s",
        "cluster.max_requeues",
    ),
    "the cluster's memory and bandwidths are positive or null (unknown), its price >= 0 or null, its counts in range",
    "sweeper.config.schema.ClusterConfig",
)
def _cluster_numbers(_: PointSpec, target: Target):
    c = target.cluster
    for key, unit in POSITIVE_OR_NULL.items():
        value = getattr(c, key)
        if value is not None and not (_number(value) or 0) > 0:
            return (
                f"cluster.{key}={value!r} must be a positive number of {unit}, or null (unknown)",
                (f"cluster.{key}",),
            )
    price = c.price_per_gpu_hour
    if price is not None and not (_number(price) is not None and float(price) >= 0):
        return (
            f"cluster.price_per_gpu_hour={price!r} must be a price of at least 0 per GPU-hour, or null (unknown)",
            ("cluster.price_per_gpu_hour",),
        )
    for key, least in AT_LEAST.items():
        value = getattr(c, key)
        if _number(value) is None or float(value) < least:
            return f"cluster.{key}={value!r} must be at least {least}", (f"cluster.{key}",)
    return None
