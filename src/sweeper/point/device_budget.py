"""The device memory a point's ranks may use, from the cluster config, as a file in the point directory.

``cluster.gpu_mem_gib`` is the device memory per rank (GiB, 2**30 bytes). On a GPU it is the capacity a batch search
fits into, and when it is below the device's memory the harness caps the allocator there; on CPU ranks it is a
tensor-byte budget that the harness enforces by raising the OOM a GPU would (:mod:`sweeper.job.budget`). Like every
budget it is not part of the point's identity (:data:`sweeper.point.identity.BUDGET_FIELDS`), so it travels beside
``spec.json`` rather than in it: the driver writes :data:`BUDGET_FILE` before it starts the ranks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweeper.config.target import Target
from sweeper.results.atomic import write_json_atomic

BUDGET_FILE = "device_budget.json"


def budget_record(target: Target) -> dict[str, Any]:
    """What :data:`BUDGET_FILE` holds: ``capacity_bytes`` (:func:`sweeper.capacity.predict.capacity_bytes`: int or
    None), ``device_type`` and ``source`` (the cluster key it comes from, in words)."""
    # the ranks import this module for read_budget only: the model stays out of them
    from sweeper.capacity.predict import capacity_bytes

    gib = target.cluster.gpu_mem_gib
    name = target.cluster.name
    return {
        "capacity_bytes": capacity_bytes(target),
        "device_type": target.device_type,
        "source": f"cluster.gpu_mem_gib={gib:g} GiB (cluster={name})" if gib else "none (cluster.gpu_mem_gib is null)",
    }


def write_budget(pdir: Path, target: Target) -> dict[str, Any]:
    """Write :data:`BUDGET_FILE` in ``pdir`` (atomically) and return what it holds."""
    data = budget_record(target)
    write_json_atomic(Path(pdir) / BUDGET_FILE, data)
    return data


def read_budget(pdir: Path) -> int | None:
    """The capacity in bytes the driver wrote for this point's ranks, or None (no file, or no capacity)."""
    try:
        value = json.loads((Path(pdir) / BUDGET_FILE).read_text()).get("capacity_bytes")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if value else None
