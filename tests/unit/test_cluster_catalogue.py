"""The cluster catalogue (``conf/cluster/*.yaml``): six GPU clusters that a plan and a SLURM sweep name alike.

No cluster is needed: each file is read through the real typed schema, Hydra composes it into the main app's config
with ``launcher=slurm``, and the sbatch parameters are generated from it as for a real submission.
"""

from __future__ import annotations

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from sweeper.config.schema import ClusterConfig, register_configs
from sweeper.config.spec import from_config
from sweeper.launchers.slurm.submit import executor_parameters
from sweeper.paths import conf_dir
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.lifecycle import target_for
from sweeper.results.mfu import gpu_peak
from sweeper.results.opening import register_resolver
from tests.unit.specs import make_spec

#: The catalogue the issue names, with the name torch.cuda.get_device_name() reports and the vendor's label (GB).
CATALOGUE = {
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", 40),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 80),
    "h100-80gb": ("NVIDIA H100 80GB HBM3", 80),
    "h200-141gb": ("NVIDIA H200", 141),
    "l40s-48gb": ("NVIDIA L40S", 48),
    "v100-32gb": ("Tesla V100-SXM2-32GB", 32),
}
#: GPUs without bf16 in the catalogue: planned and swept in fp16.
NO_BF16 = {"v100-32gb"}


def _cluster(name: str) -> dict:
    """The file read through the typed schema, as Hydra would type it (a wrong key or type raises)."""
    node = OmegaConf.merge(
        OmegaConf.structured(ClusterConfig, flags={"readonly": False}),
        OmegaConf.load(conf_dir() / "cluster" / f"{name}.yaml"),
    )
    return OmegaConf.to_container(node, resolve=True)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_each_catalogue_cluster_is_one_node_of_eight_gpus_with_memory_as_torch_reports_it(name):
    gpu_name, vendor_gb = CATALOGUE[name]
    c = _cluster(name)
    assert c["name"] == name
    assert (c["gpus_per_node"], c["gpu_name"], c["gpu_mem_vendor_gb"]) == (8, gpu_name, vendor_gb)
    # torch reports less than the label read as GiB (the driver keeps some; L40S's GDDR6 ECC about 7 %), never the
    # label itself: between 90 % and 100 % of it
    assert 0.9 * vendor_gb < c["gpu_mem_gib"] < vendor_gb
    assert c["intra_node_bandwidth_gb_s"] > 0 and c["inter_node_bandwidth_gb_s"] > 0


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_each_catalogue_gpu_has_a_datasheet_peak_in_its_half_precision(name):
    c = _cluster(name)
    dtype = "fp16" if name in NO_BF16 else "bf16"
    peak = gpu_peak(c["gpu_name"], dtype)
    assert peak.flops and peak.flops > 1e14, peak.source
    assert gpu_peak(c["gpu_name"], "fp32").flops, c["gpu_name"]
    if name in NO_BF16:
        assert gpu_peak(c["gpu_name"], "bf16").flops is None


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_gate_refuses_bf16_exactly_on_the_catalogue_gpus_without_it(name):
    spec = make_spec(precision="bf16", ranks_per_node=8)
    target = target_for(spec, "slurm", _cluster(name))
    assert target.device_type == "cuda"
    if name in NO_BF16:
        with pytest.raises(InvalidPoint) as e:
            check(spec, target)
        assert (e.value.status, e.value.rule) == ("unsupported", "H03")
        check(make_spec(precision="fp16", ranks_per_node=8), target)  # fp16 is what V100 plans and sweeps in
    else:
        check(spec, target)


@pytest.fixture(scope="module")
def loader_and_master():
    register_configs()
    register_resolver()
    GlobalHydra.instance().clear()
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir())))
    master = loader.load_configuration("config", overrides=[], run_mode=RunMode.MULTIRUN)
    return loader, master


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_a_slurm_sweep_names_the_same_cluster_and_asks_sbatch_for_its_eight_gpus(loader_and_master, name):
    loader, master = loader_and_master
    overrides = ["launcher=slurm", f"cluster={name}", "ranks_per_node=8", "precision=fp16"]
    cfg = loader.load_sweep_config(master, overrides)
    cluster = OmegaConf.to_container(cfg.cluster, resolve=True)
    assert cluster == _cluster(name)
    spec = from_config(cfg)
    params = executor_parameters(cluster, spec, n_tasks=1)
    assert params["gpus_per_node"] == 8 and params["nodes"] == 1 and params["ntasks_per_node"] == 8
    assert "partition" not in params  # null: SLURM's default partition, until the site sets cluster.partition
