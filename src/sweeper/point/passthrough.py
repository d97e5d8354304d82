"""The passthrough dicts (``training_args``, ``fsdp_config``, ``deepspeed_config``): what sweeper owns in them.

Filled in by the gate work: entries equal to what sweeper sets itself are redundant (dropped from the identity);
entries that contradict a labelled key are refused by :mod:`sweeper.point.rules`.
"""

from __future__ import annotations

from sweeper.grid.spec import PointSpec


def redundant_passthrough(spec: PointSpec) -> dict[str, set[str]]:
    """Passthrough entries that only restate what sweeper sets from its own keys, by section.

    Returns:
        ``{"deepspeed_config": {"zero_optimization.stage", ...}, "fsdp_config": {...}, "training_args": {...}}``
        (dotted paths inside each dict); empty sets when nothing is redundant.
    """
    return {"deepspeed_config": set(), "fsdp_config": set(), "training_args": set()}
