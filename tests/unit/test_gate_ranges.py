"""Values that would be read as something they are not, refused by the gate (docs/gate.md G12, G13): ``seq_len=1``
has no next-token target (docs/cases.md#u03); a cluster number out of range is not a capacity, a bandwidth or a
price (docs/cases.md#u10). Every test calls the real ``sweeper.point.gate.check``; the plan test composes the real
``conf/plan.yaml`` with Hydra."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sweeper.config.sections import ClusterConfig
from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check
from tests.unit.specs import make_spec as spec
from tests.unit.test_gate import CPU


def refused(target: Target = CPU, **kw) -> InvalidPoint:
    with pytest.raises(InvalidPoint) as e:
        check(spec(**kw), target)
    return e.value


def test_seq_len_1_is_refused_naming_seq_len_and_2_passes():
    e = refused(seq_len=1)
    assert (e.rule, e.keys, e.status) == ("G12", ("seq_len",), "invalid")
    assert "no next-token target" in str(e) and "seq_len>=2" in str(e)
    check(spec(seq_len=2), CPU)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("gpu_mem_gib", -1.0, "positive number of GiB"),
        ("gpu_mem_gib", 0.0, "positive number of GiB"),
        ("gpu_mem_vendor_gb", -80.0, "GB (10**9 bytes)"),
        ("host_mem_gib", 0.0, "of host memory per node"),
        ("intra_node_bandwidth_gb_s", 0.0, "GB/s"),
        ("inter_node_bandwidth_gb_s", -1.0, "across nodes"),
        ("price_per_gpu_hour", -2.0, "at least 0 per GPU-hour"),
        ("gpus_per_node", -1, "at least 0"),
        ("cpus_per_task", 0, "at least 1"),
        ("array_parallelism", 0, "at least 1"),
        ("max_requeues", -1, "at least 0"),
    ],
)
def test_a_cluster_number_out_of_range_is_invalid_naming_it(key, value, words):
    target = replace(CPU, cluster=replace(ClusterConfig(), **{key: value}))
    e = refused(target)
    assert (e.rule, e.keys, e.status) == ("G13", (f"cluster.{key}",), "invalid")
    assert f"cluster.{key}={value!r}" in str(e) and words in str(e)


def test_null_means_unknown_and_passes_and_a_price_of_0_is_a_price():
    check(spec(), replace(CPU, cluster=replace(ClusterConfig(), gpu_mem_gib=None, price_per_gpu_hour=0.0)))
    check(spec(), replace(CPU, cluster=replace(ClusterConfig(), gpu_mem_gib=0.5, intra_node_bandwidth_gb_s=1.5)))


def test_u10_a_negative_device_memory_with_prune_is_invalid_not_pruned():
    target = replace(CPU, cluster=replace(ClusterConfig(), gpu_mem_gib=-1.0))
    e = refused(target, prune=True)
    assert e.status == "invalid" and e.rule == "G13" and "shard" not in str(e)
