"""Fast composition (:mod:`sweeper.config.compose`) gives exactly the config Hydra's own per-point composition gives."""

from __future__ import annotations

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from sweeper.config.compose import compose_points
from sweeper.config.schema import register_configs
from sweeper.paths import conf_dir
from sweeper.results.sweepdir import register_resolver

POINTS = [
    [],
    ["fsdp=full_shard", "gc=true"],
    ["model=gpt2", "precision=bf16", "per_device_batch_size=2"],
    ["+sweeps=zero", "zero=3"],
    ["+training_args.max_grad_norm=0.5", "+fsdp_config.forward_prefetch=true", "fsdp=full_shard"],
    ["launcher=slurm", "cluster=dev", "timeout_s=60"],
    ["model=llama-3.2-1b", "seq_len=512", "+deepspeed_config.zero_optimization.overlap_comm=false", "zero=2"],
]


@pytest.fixture(scope="module")
def loader_and_master():
    register_configs()
    register_resolver()
    GlobalHydra.instance().clear()
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir())))
    master = loader.load_configuration("config", overrides=[], run_mode=RunMode.MULTIRUN)
    return loader, master


def _plain(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def test_fast_composition_equals_hydras_own_for_every_point(loader_and_master):
    loader, master = loader_and_master
    fast = compose_points(loader, master, POINTS)
    assert len(fast) == len(POINTS)
    for overrides, cfg in zip(POINTS, fast, strict=True):
        own = loader.load_sweep_config(master, list(overrides))
        assert _plain(cfg) == _plain(own), overrides


@pytest.mark.parametrize(
    ("overrides", "key"),
    [(["precision=fp8"], "precision"), (["per_device_batch_size=four"], "per_device_batch_size"), (["gc=maybe"], "gc")],
)
def test_a_wrong_value_fails_composition_against_the_typed_schema(loader_and_master, overrides, key):
    """The SLURM launcher composes only through compose_points: the schema must still refuse a wrong value."""
    from hydra.errors import ConfigCompositionException

    loader, master = loader_and_master
    with pytest.raises(ConfigCompositionException, match=key):
        compose_points(loader, master, [overrides])
