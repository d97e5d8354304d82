"""Where a point would run (:class:`Target`): the launcher, the device and the cluster, as plain data.

It sits beside the point spec (:mod:`sweeper.grid.spec`) because both are what the configuration says about a
point: the gate (:mod:`sweeper.point.gate`), the capacity model (:mod:`sweeper.capacity`) and the launchers read
it. :func:`sweeper.point.lifecycle.target_for` builds one for this machine or a SLURM cluster config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Target:
    """Where a point would run, as far as the gate needs to know.

    Attributes:
        launcher: ``local`` or ``slurm``.
        device_type: ``cpu`` or ``cuda`` (resolved, never ``auto``).
        gpu_name: the GPU model when known (cluster config or the local device), e.g. ``"NVIDIA H100 80GB HBM3"``.
        versions: installed library versions by distribution name (``{"torch": "2.13.0", ...}``).
        cluster: the cluster config as plain data (:class:`sweeper.grid.schema.ClusterConfig` keys: device memory,
            bandwidths, GPUs per node), for capacity planning; empty when unknown.
    """

    launcher: str = "local"
    device_type: str = "cpu"
    gpu_name: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    cluster: Mapping[str, Any] = field(default_factory=dict)
