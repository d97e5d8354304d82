"""Point specs for unit tests, built through the real typed schema (no Hydra run, no ranks)."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from sweeper.config.schema import schema_node
from sweeper.config.spec import PointSpec, from_config

TINY = {"name": "tiny", "decoder_layer": "LlamaDecoderLayer", "config": {"max_position_embeddings": 2048}}


def make_spec(**overrides: Any) -> PointSpec:
    """The default point of ``conf/config.yaml``'s schema (tiny Llama-style model) with ``overrides`` merged in, as
    Hydra would type them (``make_spec(fsdp="full_shard", gc=True)``)."""
    return from_config(OmegaConf.merge(schema_node(), {"model": TINY}, overrides))


#: A GPU cluster config (``conf/cluster/*.yaml`` shape): two-node H100 points for sbatch tests.
H100_CLUSTER: dict[str, Any] = {
    "name": "h100",
    "partition": "gpu",
    "account": "proj",
    "qos": "high",
    "constraint": "h100",
    "gpus_per_node": 8,
    "cpus_per_task": 12,
    "mem": "0",
    "time_limit_min": None,
    "array_parallelism": 4,
    "setup": ["module load cuda/12.4", "source /opt/venv/bin/activate"],
    "sbatch_extra": {"exclusive": True},
    "signal_delay_s": 90,
}
