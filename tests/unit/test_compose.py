"""Fast composition (:mod:`sweeper.config.compose`) gives exactly the config Hydra's own per-point composition gives,
and its plain containers exactly the typed configs' (the leaf fast path included)."""

from __future__ import annotations

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from sweeper.config.compose import compose_containers, compose_points
from sweeper.config.schema import register_configs
from sweeper.paths import conf_dir
from sweeper.results.opening import register_resolver

POINTS = [
    [],
    ["fsdp=full_shard", "gc=true"],
    ["model=gpt2", "precision=bf16", "per_device_batch_size=2"],
    ["+sweeps=zero", "zero=3"],
    ["+training_args.max_grad_norm=0.5", "+fsdp_config.forward_prefetch=true", "fsdp=full_shard"],
    ["launcher=slurm", "cluster=dev", "timeout_s=60"],
    ["model=llama-3.2-1b", "seq_len=512", "+deepspeed_config.zero_optimization.overlap_comm=false", "zero=2"],
]
#: Plain leaf changes (the fast path of compose_containers: enums, bools, None, nested leaves, "auto" strings), each
#: key changed and then left at its default by the next point (the scratch copy must not keep a value), and points
#: that mix them with adds, dict values and interpolations (the typed path).
LEAF_POINTS = [
    ["seed=3", "precision=bf16", "gc=true", "launcher=slurm", "cluster=dev", "launcher.wait=false", "wandb=off"],
    ["seed=4", "launcher=slurm", "cluster=dev", "wandb=off"],
    ["host_mem_limit_gib=null", "per_device_batch_size=auto", "timed_steps=auto", "timing.ci_rel=0.05"],
    ["host_mem_limit_gib=2.5", "fsdp=full_shard", "model.config.num_hidden_layers=3"],
    [],
    ["seed=3", "+training_args.max_grad_norm=0.5"],
    ["seed=5", "+fsdp_config={forward_prefetch: true}", "fsdp=full_shard"],
    ["seed=${seq_len}"],
    ["model=gpt2", "seed=3", "precision=fp16"],
    ["seed=3", "precision=bf16", "gc=true", "launcher=slurm", "cluster=dev", "launcher.wait=false", "wandb=off"],
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
    [
        (["precision=fp8"], "precision"),
        (["per_device_batch_size=four"], "per_device_batch_size"),
        (["gc=maybe"], "gc"),
        (["seed=abc"], "seed"),
        (["launcher.wait=soon"], "launcher.wait"),
        (["no_such_key=1"], "no_such_key"),
    ],
)
@pytest.mark.parametrize("compose", [compose_points, compose_containers])
def test_a_wrong_value_fails_composition_against_the_typed_schema(loader_and_master, overrides, key, compose):
    """The SLURM launcher composes only through compose_containers: the schema must still refuse a wrong value, with
    Hydra's own error, also after a good point of the same batch went through the fast path."""
    from hydra.errors import ConfigCompositionException

    loader, master = loader_and_master
    with pytest.raises(ConfigCompositionException, match=key):
        compose(loader, master, [["seed=1", "gc=true"], overrides])


def test_plain_containers_equal_the_typed_configs_for_every_point(loader_and_master):
    """compose_containers (the SLURM launcher's) gives what from_config reads of compose_points' typed config,
    point by point, whichever path each point takes, in a batch where the same keys change back and forth."""
    loader, master = loader_and_master
    points = POINTS + LEAF_POINTS
    plain = compose_containers(loader, master, points)
    typed = compose_points(loader, master, points)
    assert len(plain) == len(points)
    for overrides, got, cfg in zip(points, plain, typed, strict=True):
        assert got == OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), overrides
    second, interpolated = plain[len(POINTS) + 1], plain[len(POINTS) + 7]
    assert second["precision"] == "fp32" and second["gc"] is False and second["launcher"]["wait"] is True
    assert interpolated["seed"] == interpolated["seq_len"] == 128  # the interpolation resolved against the point


def test_plain_containers_are_each_points_own(loader_and_master):
    """A point's container is its own: changing one leaves the next point of the same group choice as it was."""
    loader, master = loader_and_master
    first, second = compose_containers(loader, master, [["seed=1"], ["seed=2"]])
    first["model"]["config"]["num_hidden_layers"] = 99
    assert second["model"]["config"]["num_hidden_layers"] != 99 and second["seed"] == 2


SHARED = ["launcher=slurm", "cluster=dev", "launcher.wait=false", "+cluster.sbatch_extra.hold=true"]
SHARED += ["+training_args={max_grad_norm: 0.5}", "wandb=off"]


def _shared_batch(n: int) -> list[list[str]]:
    return [[f"seed={i}", *SHARED] for i in range(n)]


def test_overrides_every_point_has_are_applied_once_and_give_the_typed_configs(loader_and_master, monkeypatch):
    """An add and a dict value given once on the command line are in every point's overrides: applied to the group
    composition once, not by a typed copy per point (a 1,000-point submission with ``+cluster.sbatch_extra.hold=true``
    spent 4 s there), with the same result as the typed composition, also where a point's own override sets the same
    key again (that point is composed with all its overrides, in order)."""
    from sweeper.config import compose

    loader, master = loader_and_master
    points = _shared_batch(6)
    points[3] = [*points[3], "training_args.max_grad_norm=0.7"]  # the shared key, set again by the point
    typed_calls = []
    real_typed = compose._Grid.typed
    monkeypatch.setattr(compose._Grid, "typed", lambda self, *a: typed_calls.append(a[2]) or real_typed(self, *a))
    compose._LAST.clear()
    plain = compose_containers(loader, master, points)
    assert typed_calls == [points[3]]  # only the point whose own override touches a shared key
    monkeypatch.setattr(compose._Grid, "typed", real_typed)
    for overrides, got, cfg in zip(points, plain, compose_points(loader, master, points), strict=True):
        assert got == OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), overrides
    assert [p["seed"] for p in plain] == list(range(6)) and all(p["cluster"]["sbatch_extra"]["hold"] for p in plain)
    assert plain[3]["training_args"]["max_grad_norm"] == 0.7 and plain[2]["training_args"]["max_grad_norm"] == 0.5


def test_a_wrong_shared_value_fails_the_batch_with_hydras_error(loader_and_master):
    from hydra.errors import ConfigCompositionException

    loader, master = loader_and_master
    with pytest.raises(ConfigCompositionException, match=r"launcher\.wait"):
        compose_containers(loader, master, [["seed=1", "launcher.wait=soon"], ["seed=2", "launcher.wait=soon"]])
