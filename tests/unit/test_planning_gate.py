"""Pre-flight pruning (gate rule C01) and the predicted numbers every record carries.

The real model (:func:`sweeper.capacity.predict.predict`) decides; each test compares the gate's and the record's
answer with it on the same spec and target. GPU targets here are descriptions of a cluster (no GPU is used:
the prediction is arithmetic), named so in the tests that use them.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sweeper.capacity.predict import predict
from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check, ordered_rules
from sweeper.point.lifecycle import predicted_for, target_for
from sweeper.point.rules.planning import size
from tests.conftest import REPO
from tests.unit.specs import make_spec

SMALL = {"name": "local", "gpu_mem_gib": 0.05}  # 51.2 MiB: a tensor-byte budget per CPU rank


def _model(name: str) -> dict:
    """An architecture of conf/model/ with its real numbers."""
    return yaml.safe_load((REPO / "conf" / "model" / f"{name}.yaml").read_text())


def cpu_spec(**kw) -> PointSpec:
    """The tiny model on 2 CPU ranks (conf/config.yaml's default point) with ``kw`` merged in."""
    return make_spec(model=_model("tiny"), device="cpu", **kw)


def test_pruning_runs_after_every_other_rule():
    rules = ordered_rules()
    assert rules[-1].id == "C01" and rules[-1].status == "pruned"
    assert [r for r in rules if r.status == "pruned"] == [rules[-1]]


def test_a_point_predicted_not_to_fit_is_pruned_with_the_numbers_and_the_largest_batch():
    spec = cpu_spec(per_device_batch_size=64, prune=True)
    target = target_for(spec, "local", SMALL)
    pred = predict(spec, target)
    assert pred.fits is False  # the model's answer this test checks the gate against
    with pytest.raises(InvalidPoint) as e:
        check(spec, target)
    assert (e.value.status, e.value.rule) == ("pruned", "C01")
    assert {"prune", "cluster.gpu_mem_gib", "per_device_batch_size"} <= set(e.value.keys)
    msg = str(e.value)
    assert size(pred.device_bytes) in msg and size(pred.device_mem_bytes) in msg
    assert f"less the {pred.margin * 100:g} % margin" in msg
    assert f"the largest per_device_batch_size predicted to fit is {pred.max_per_device_batch_size}" in msg
    assert "MiB" in msg and " MB" not in msg  # binary units, labelled


def test_the_same_point_is_launched_without_prune_or_when_it_fits():
    big = cpu_spec(per_device_batch_size=64)
    check(big, target_for(big, "local", SMALL))  # prune=false: the default
    small = cpu_spec(per_device_batch_size=1, prune=True)
    target = target_for(small, "local", SMALL)
    assert predict(small, target).fits is True
    check(small, target)


def test_without_a_device_capacity_nothing_is_pruned_and_the_record_says_why():
    spec = cpu_spec(per_device_batch_size=64, prune=True)
    target = target_for(spec, "local", {"name": "local"})
    check(spec, target)
    predicted = predicted_for(spec, target)
    assert predicted["fits"] is None
    assert "prune=true but not pruned" in predicted["note"] and "cluster.gpu_mem_gib" in predicted["note"]


def test_a_point_the_hardware_cannot_run_is_unsupported_before_it_is_pruned():
    spec = cpu_spec(per_device_batch_size=64, prune=True, precision="fp16")
    target = target_for(spec, "local", SMALL)
    assert predict(spec, target).fits is False
    with pytest.raises(InvalidPoint) as e:
        check(spec, target)
    assert (e.value.status, e.value.rule) == ("unsupported", "H01")


def test_described_h100_cluster_prunes_7b_ddp_and_keeps_full_shard_with_gc():
    """No GPU is used: the target describes an 8x H100 node and the prediction is arithmetic."""
    cluster = {"name": "h100", "gpus_per_node": 8, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_mem_gib": 79.6}
    ddp = make_spec(model=_model("llama-2-7b"), ranks_per_node=8, seq_len=4096, per_device_batch_size=1, prune=True)
    fsdp = dataclasses.replace(ddp, fsdp="full_shard", gc=True)
    for spec in (ddp, fsdp):
        target = target_for(spec, "slurm", cluster)
        assert target.device_type == "cuda"
        fits = predict(spec, target).fits
        if fits:
            check(spec, target)
        else:
            with pytest.raises(InvalidPoint, match="predicted not to fit"):
                check(spec, target)
    assert predict(ddp, target_for(ddp, "slurm", cluster)).fits is False  # 16 bytes/param of 6.7B > 80 GiB
    assert predict(fsdp, target_for(fsdp, "slurm", cluster)).fits is True


def test_a_failing_model_never_costs_the_point_its_record():
    """A spec the model cannot read (a plan setting that is not a number, which Hydra's schema would refuse) gives
    a note."""
    from sweeper.config.schema import PlanConfig

    spec = dataclasses.replace(cpu_spec(prune=True), plan=PlanConfig(memory_margin="not a number"))
    target = target_for(spec, "local", SMALL)
    predicted = predicted_for(spec, target)
    assert list(predicted) == ["note"] and "TypeError" in predicted["note"]
    check(spec, target)  # not pruned: its fit is unknown


def test_a_cpu_point_predicts_throughput_from_its_measured_matmul_peak():
    spec = cpu_spec()
    target = target_for(spec, "local", SMALL)
    assert predicted_for(spec, target)["tokens_per_s_per_device"] is None  # no datasheet for a CPU
    metrics = {"mfu_peak_flops": 5.0e10, "mfu_peak_source": "measured: fp32 matmul 1024x1024"}
    after = predicted_for(spec, target, metrics)
    want = predict(spec, target, measured_peak_flops=5.0e10, peak_source="measured: fp32 matmul 1024x1024")
    assert after["tokens_per_s_per_device"] == pytest.approx(want.tokens_per_s_per_device)
    assert after["peak_source"] == "measured: fp32 matmul 1024x1024"


def test_target_is_the_gate_target():
    assert isinstance(target_for(cpu_spec(), "local", SMALL), Target)
