"""Where a point would run (:class:`Target`): the launcher, the device and the cluster, as plain data.

It sits beside the point spec (:mod:`sweeper.config.spec`) because both are what the configuration says about a
point: the gate (:mod:`sweeper.point.gate`), the capacity model (:mod:`sweeper.capacity`) and the launchers read
it. :func:`sweeper.point.lifecycle.target_for` builds one for this machine or a SLURM cluster config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeper.config.frozen import Memoised, plain_copy
from sweeper.config.sections import ClusterConfig, from_mapping


@dataclass(frozen=True)
class Target(Memoised):
    """Where a point would run, as far as the gate needs to know.

    Attributes:
        launcher: ``local`` or ``slurm``.
        device_type: ``cpu`` or ``cuda`` (resolved, never ``auto``).
        gpu_name: the GPU model when known (cluster config or the local device), e.g. ``"NVIDIA H100 80GB HBM3"``.
        versions: installed library versions by distribution name (``{"torch": "2.13.0", ...}``).
        cluster: the cluster config (:class:`sweeper.config.schema.ClusterConfig`: device memory, bandwidths, GPUs per
            node), for capacity planning and sbatch; the schema's defaults (``name="local"``, no device memory) when
            unknown. A mapping given here is turned into one (unknown keys raise ``TypeError``).
    """

    launcher: str = "local"
    device_type: str = "cpu"
    gpu_name: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def __post_init__(self) -> None:
        # plain data (a composed config's container, a SLURM payload, a test's dict) becomes the typed section
        object.__setattr__(self, "cluster", from_mapping(ClusterConfig, self.cluster))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (pickles for SLURM, JSON): the inverse of ``Target(**data)``; a fresh copy of what is built once
        (:class:`~sweeper.config.frozen.Memoised`)."""
        return plain_copy(self.memoised("plain", lambda: {**asdict(self), "versions": dict(self.versions)}))
