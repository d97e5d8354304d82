"""Rule L02 (U11): on a GPU cluster a point runs one rank per GPU, so ``ranks_per_node`` above
``cluster.gpus_per_node`` is refused before ``sbatch`` and in the planner, naming both keys; CPU ranks (the local
machine, the development SLURM cluster with ``gpus_per_node=0``) are not limited. The GPU clusters here are
described only (a ``Target`` with ``device_type="cuda"``): nothing runs on a GPU."""

from __future__ import annotations

import pytest
import yaml

from sweeper.config.schema import ClusterConfig
from sweeper.paths import conf_dir
from sweeper.plan.rows import plan_row
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.lifecycle import target_for
from tests.unit.specs import make_spec

H100 = yaml.safe_load((conf_dir() / "cluster" / "h100-80gb.yaml").read_text())


def test_sixteen_ranks_on_an_eight_gpu_node_are_refused_naming_both_keys():
    spec = make_spec(ranks_per_node=16)
    with pytest.raises(InvalidPoint) as e:
        check(spec, target_for(spec, "slurm", H100))
    assert e.value.rule == "L02" and e.value.status == "invalid"
    assert e.value.keys == ("ranks_per_node", "cluster.gpus_per_node")
    assert "ranks_per_node=16 > cluster.gpus_per_node=8" in str(e.value)


def test_eight_ranks_on_an_eight_gpu_node_pass():
    spec = make_spec(ranks_per_node=8)
    check(spec, target_for(spec, "slurm", H100))


def test_the_planner_refuses_the_row_instead_of_planning_it_at_half_the_days():
    model = yaml.safe_load((conf_dir() / "model" / "llama-2-7b.yaml").read_text())
    spec = make_spec(model=model, ranks_per_node=16, seq_len=2048, precision="bf16")
    row = plan_row(spec, ClusterConfig(**H100))
    assert row["status"] == "invalid" and row["rule"] == "L02" and "cluster.gpus_per_node" in row["reason"]
    assert "predicted_train_days" not in row


def test_cpu_ranks_are_not_limited_by_gpus_per_node():
    spec = make_spec(ranks_per_node=4, device="cpu")
    check(spec, target_for(spec, "local", {"name": "local"}))
    check(spec, target_for(spec, "slurm", {"name": "dev", "gpus_per_node": 0}))
