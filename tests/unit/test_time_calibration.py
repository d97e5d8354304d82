"""The time model's calibration (per engine family, gc and precision, with a per-step overhead) and the host link's
fit and cache (:mod:`sweeper.capacity.calibrate`, :mod:`sweeper.capacity.hostcomm`): arithmetic on records built
from known step times, no ranks."""

from __future__ import annotations

import json

import pytest

from sweeper.capacity.arch import Arch
from sweeper.capacity.calibrate import fit_calibration, group_key, group_label
from sweeper.capacity.hostcomm import (
    MAX_AGE_S,
    HostComm,
    cached_comm,
    comm_key,
    fit_ring,
    ring_time,
    zero_key,
    zero_tensor_cost,
)
from sweeper.capacity.predict import predict
from sweeper.capacity.states import layout
from sweeper.capacity.timing import comm_time, step_flops
from sweeper.config.target import Target
from sweeper.results.record import Record
from tests.unit.specs import make_spec

LINK = HostComm(1e-3, 0.5, "test link")
PEAK = 1e11


def _record(spec, step_s: float) -> Record:
    return Record(
        sweep_id="s",
        point_id=str(abs(hash((spec.micro_batch, spec.gc, spec.precision, spec.zero, spec.fsdp))))[:12],
        status="ok",
        spec=spec.to_dict(),
        ran={"device_type": "cpu"},
        metrics={"step_time_s_median": step_s, "mfu_peak_flops": PEAK, "mfu_peak_source": "measured: test"},
    )


def _step(spec, overhead: float, rate: float) -> float:
    """The step the model would predict with ``overhead`` s and ``rate`` FLOP/s, plus the point's collectives."""
    arch = Arch.from_config(spec.model_type, spec.model_config)
    flops = step_flops(arch, batch=spec.micro_batch, seq_len=spec.seq_len, grad_accum=spec.grad_accum, gc=spec.gc)
    comm, _, _ = comm_time(arch, layout(spec, "cpu"), 1, spec.grad_accum, LINK, LINK)
    return overhead + flops / rate + comm


def test_ring_fit_recovers_latency_and_bandwidth_of_both_collectives():
    lat, bw = 2e-4, 1.5
    comm = HostComm(lat, bw, "truth")
    sizes = [4096.0, 65536.0, 1 << 20, 4 << 20]
    ar = [[s, ring_time("all_reduce", s, 2, comm)] for s in sizes]
    ag = [[s, ring_time("all_gather", s, 2, comm)] for s in sizes]
    got_lat, got_bw = fit_ring(2, ar, ag)
    assert got_lat == pytest.approx(lat, rel=1e-6) and got_bw == pytest.approx(bw, rel=1e-6)
    # all-reduce: 2(N-1) steps and 2(N-1)/N of the buffer; all-gather: half of each on a ring of 2
    assert ring_time("all_reduce", 1e6, 2, comm) == pytest.approx(2 * lat + 1e6 / 1.5e9)
    assert ring_time("all_gather", 1e6, 4, comm) == pytest.approx(3 * lat + 0.75e6 / 1.5e9)


def test_host_link_cache_is_read_by_key_and_expires_after_seven_days(tmp_path):
    path = tmp_path / "gloo.json"
    engines = {"dtensor_step_s": 1e-3, "fsdp_unit_s": 2e-3}
    entry = {"latency_s": 1e-4, "bandwidth_gb_s": 2.0, "source": "measured: x", "measured_at": 1000.0, **engines}
    path.write_text(json.dumps({comm_key(2): entry}))
    hit = cached_comm(2, path, now=1000.0 + 60)
    assert hit == HostComm(1e-4, 2.0, "measured: x", 1e-3, 2e-3)
    older = {k: v for k, v in entry.items() if k not in engines}  # a probe that did not measure the engines
    path.write_text(json.dumps({comm_key(2): older}))
    assert cached_comm(2, path, now=1060.0) is None  # measured again
    path.write_text(json.dumps({comm_key(2): entry}))
    assert cached_comm(4, path, now=1060.0) is None  # another world size: another entry
    assert cached_comm(2, path, now=1000.0 + MAX_AGE_S + 1) is None
    path.write_text("{not json")
    assert cached_comm(2, path, now=1060.0) is None


def test_the_engines_host_work_is_charged_per_fsdp_unit_and_zero_tensor_and_never_for_ddp_or_zero3():
    from sweeper.capacity.arch import Arch
    from sweeper.capacity.states import layout
    from sweeper.capacity.timing import engine_host_s, fsdp_units
    from tests.unit.specs import make_spec

    link = HostComm(1e-4, 1.0, "t", dtensor_step_s=1e-3, fsdp_unit_s=2e-3, zero_tensor_s=3e-4)
    specs = ({}, {"fsdp": "full_shard"}, {"zero": 1}, {"zero": 2}, {"zero": 3})
    ddp, fsdp, zero1, zero2, zero3 = (make_spec(**kw) for kw in specs)
    arch = Arch.from_config(ddp.model_type, ddp.model_config)
    units, tensors = len(fsdp_units(arch)), arch.param_tensors
    assert engine_host_s(arch, layout(ddp, "cpu"), link) == 0.0
    assert engine_host_s(arch, layout(fsdp, "cpu"), link, 2) == pytest.approx(tensors * 1e-3 + units * 2 * 2e-3)
    assert engine_host_s(arch, layout(zero2, "cpu"), link, 2) == pytest.approx(tensors * 2 * 3e-4)  # per micro-batch
    assert engine_host_s(arch, layout(zero1, "cpu"), link, 2) == pytest.approx(tensors * 3e-4)  # once per step
    unmeasured = HostComm(1e-4, 1.0, "t", dtensor_step_s=1e-3, fsdp_unit_s=2e-3)  # no ZeRO point ran on this host
    assert engine_host_s(arch, layout(zero2, "cpu"), unmeasured) == 0.0
    assert engine_host_s(arch, layout(zero3, "cpu"), link) == 0.0  # not probed: a stated gap
    assert engine_host_s(arch, layout(fsdp, "cpu"), None) == 0.0


def test_the_zero_probe_entry_is_read_at_the_link_in_force_and_expires_with_its_own_age(tmp_path):
    path = tmp_path / "gloo.json"
    link = {"latency_s": 1e-4, "bandwidth_gb_s": 2.0, "source": "x", "dtensor_step_s": 0.0, "fsdp_unit_s": 0.0}
    probe = {"plain_s": 0.005, "zero2_s": 0.030, "tensors": 21, "tensor_bytes": 16384, "source": "y"}
    path.write_text(json.dumps({comm_key(2): {**link, "measured_at": 1000.0}}))
    assert cached_comm(2, path, now=1060.0).zero_tensor_s is None  # no ZeRO point ran here yet
    path.write_text(
        json.dumps({comm_key(2): {**link, "measured_at": 5000.0}, zero_key(2): {**probe, "measured_at": 1000.0}})
    )
    hit = cached_comm(2, path, now=5060.0)
    # the step's excess less its modelled collectives at the cached link: 21 all-reduces of a weight, the
    # all-gather of all 21, the norm's all-reduce
    comm = 21 * ring_time("all_reduce", 16384, 2, hit) + ring_time("all_gather", 21 * 16384, 2, hit)
    comm += ring_time("all_reduce", 4, 2, hit)
    assert hit.zero_tensor_s == pytest.approx((0.025 - comm) / 21) and hit.zero_tensor_s > 0
    assert hit.zero_tensor_s == zero_tensor_cost(0.005, 0.030, 21, 16384, 2, hit)
    assert cached_comm(2, path, now=5000.0 + MAX_AGE_S + 1) is None  # the link itself is stale
    assert cached_comm(2, path, now=1000.0 + MAX_AGE_S + 1).zero_tensor_s is None  # the probe alone is stale
    assert zero_tensor_cost(0.005, 0.006, 21, 16384, 2, hit) == 0.0  # the collectives explain more than the excess
    path.write_text(json.dumps({comm_key(2): {**link, "measured_at": 5000.0}, zero_key(2): {"plain_s": "?"}}))
    assert cached_comm(2, path, now=5060.0).zero_tensor_s is None  # a malformed entry is no entry


def test_calibration_separates_the_per_step_overhead_from_the_rate_and_fsdp_borrows_ddps_group():
    overhead, rate = 0.04, 5e9
    ddp = [make_spec(per_device_batch_size=b, ranks_per_node=2) for b in (2, 8)]
    cal = fit_calibration([_record(s, _step(s, overhead, rate)) for s in ddp], comm=LINK)
    grp = cal.groups[group_key("ddp", False, "fp32")]
    assert grp.overhead_s == pytest.approx(overhead, rel=1e-6) and grp.efficiency == pytest.approx(rate / PEAK)
    fsdp = make_spec(per_device_batch_size=4, ranks_per_node=2, fsdp="full_shard")
    eff, over, source = cal.lookup(fsdp, "cpu")
    assert (eff, over) == (grp.efficiency, grp.overhead_s)
    assert "borrowed (no fsdp=<strategy> zero=0 gc=false precision=fp32 (FSDP) point)" in source
    assert "2 fsdp=none zero=0 gc=false precision=fp32 (DDP) point(s)" in source
    assert cal.lookup(fsdp, "cuda")[1] == 0.0  # a CPU host's overhead is not a GPU's
    bf16 = make_spec(per_device_batch_size=4, ranks_per_node=2, precision="bf16")
    assert "overall median" in cal.lookup(bf16, "cpu")[2]  # no bf16 group at all
    assert cal.group_for(bf16) is None


def test_a_missing_group_borrows_from_its_own_engine_family_before_another_family():
    """An FSDP gc=true point with an FSDP gc=false group and a DDP gc=true group measured: its own family's (the
    engine's host work is its own; gc's recomputation is in the FLOPs)."""
    ddp_gc = [make_spec(per_device_batch_size=b, ranks_per_node=2, gc=True) for b in (2, 8)]
    fsdp = [make_spec(per_device_batch_size=b, ranks_per_node=2, fsdp="full_shard") for b in (2, 8)]
    cal = fit_calibration([_record(s, _step(s, 0.04, 5e9)) for s in [*ddp_gc, *fsdp]], comm=LINK)
    fsdp_gc = make_spec(per_device_batch_size=4, ranks_per_node=2, fsdp="full_shard", gc=True)
    assert cal.group_for(fsdp_gc) == group_key("fsdp", False, "fp32")
    assert "borrowed (no fsdp=<strategy> zero=0 gc=true precision=fp32 (FSDP) point)" in cal.lookup(fsdp_gc, "cpu")[2]
    zero_gc = make_spec(per_device_batch_size=4, ranks_per_node=2, zero=2, gc=True)
    assert cal.group_for(zero_gc) == group_key("ddp", True, "fp32")  # no ZeRO group: the same gc, DDP first


def test_a_group_with_one_batch_size_borrows_the_overhead_of_the_groups_fitted_on_two():
    """One FSDP point cannot tell its overhead from its rate; with the DDP group's overhead (the same host work)
    its rate is exact, and another batch size is predicted right, where the overhead-free median was far off."""
    ddp = [make_spec(per_device_batch_size=b, ranks_per_node=2) for b in (2, 8)]
    fsdp2 = make_spec(per_device_batch_size=2, ranks_per_node=2, fsdp="full_shard")
    arch = Arch.from_config(fsdp2.model_type, fsdp2.model_config)
    flops = {b: step_flops(arch, batch=b, seq_len=fsdp2.seq_len, grad_accum=1, gc=False) for b in (2, 8)}
    overhead = 0.04  # as long as the compute of a batch of 2: the tiny CPU model's case
    fsdp_rate = flops[2] / overhead
    records = [_record(s, _step(s, overhead, 2 * fsdp_rate)) for s in ddp]
    records.append(_record(fsdp2, _step(fsdp2, overhead, fsdp_rate)))
    grp = fit_calibration(records, comm=LINK).groups[group_key("fsdp", False, "fp32")]
    assert grp.fitted == "rate, overhead borrowed from 1 group(s)"
    assert grp.overhead_s == pytest.approx(overhead, rel=1e-6) and grp.efficiency == pytest.approx(fsdp_rate / PEAK)
    alone = fit_calibration(records[2:], comm=LINK).groups[group_key("fsdp", False, "fp32")]  # nothing to borrow
    assert (alone.fitted, alone.overhead_s) == ("median", 0.0)

    def compute_at_8(g):
        return g.overhead_s + flops[8] / (PEAK * g.efficiency)

    truth = overhead + flops[8] / fsdp_rate
    assert compute_at_8(grp) == pytest.approx(truth, rel=1e-6)
    assert compute_at_8(alone) / truth - 1 > 0.3  # 4 x (overhead + compute at 2) against overhead + 4 x compute


def test_a_calibrated_prediction_reproduces_a_point_it_was_fitted_on_and_adds_another_engines_collectives():
    overhead, rate = 0.03, 4e9
    ddp = [make_spec(per_device_batch_size=b, ranks_per_node=2) for b in (2, 8)]
    cal = fit_calibration([_record(s, _step(s, overhead, rate)) for s in ddp], comm=LINK)
    target = Target("local", "cpu", None, {}, {"intra_node_bandwidth_gb_s": 0.5})
    p = predict(ddp[1], target, measured_peak_flops=PEAK, calibration=cal, with_max_batch=False)
    # the cluster's bandwidth with NCCL's default latency, not the test link: only the bandwidth term agrees
    assert p.step_time_s == pytest.approx(_step(ddp[1], overhead, rate), rel=0.05)
    zero2 = make_spec(per_device_batch_size=8, ranks_per_node=2, zero=2)
    z = predict(zero2, target, measured_peak_flops=PEAK, calibration=cal, with_max_batch=False)
    assert z.comm_s > p.comm_s and z.step_time_s > p.step_time_s  # dozens of hidden² buckets against one


def test_a_failed_probe_is_not_retried_by_every_point_for_an_hour(tmp_path):
    from sweeper.job.gloo_probe import RETRY_AFTER_S, host_comm

    path = tmp_path / "gloo.json"
    path.write_text(json.dumps({f"{comm_key(2)}|failed": {"at": 5000.0, "error": "gloo probe failed: test"}}))
    assert host_comm(2, path=path, now=5000.0 + RETRY_AFTER_S - 1) is None  # returns at once, nothing measured
    assert json.loads(path.read_text())[f"{comm_key(2)}|failed"]["at"] == 5000.0


def test_fsdp_units_cost_is_the_excess_over_plain_modules_less_their_modelled_collectives():
    from sweeper.job.gloo_probe import fsdp_unit_cost

    link = HostComm(0.001, 1.0, "test")  # 1 ms per ring step, 1 GB/s
    unit_bytes = 4096 * 4.0
    per_unit_comm = 2 * ring_time("all_gather", unit_bytes, 2, link) + ring_time("reduce_scatter", unit_bytes, 2, link)
    # 8 units: 80 ms more than plain modules, of which the collectives explain 8 x per_unit_comm
    got = fsdp_unit_cost(0.020, 0.100, 8, unit_bytes, 2, link)
    assert got == pytest.approx((0.080 - 8 * per_unit_comm) / 8)
    assert 0 < got < 0.010
    # the collectives explain the whole excess (a loaded host's latency): no negative cost
    assert fsdp_unit_cost(0.020, 0.021, 8, unit_bytes, 2, HostComm(0.01, 1.0, "slow")) == 0.0


def test_a_group_is_named_in_the_grids_own_keys():
    assert group_label(group_key("ddp", True, "bf16")) == "fsdp=none zero=0 gc=true precision=bf16 (DDP)"
    assert group_label(group_key("fsdp", False, "fp32")) == "fsdp=<strategy> zero=0 gc=false precision=fp32 (FSDP)"
    assert group_label(group_key("zero", False, "fp16")) == "zero=1|2|3 gc=false precision=fp16 (DeepSpeed ZeRO)"
    assert group_label("something else") == "something else"


@pytest.mark.parametrize(
    ("measured", "plan", "why"),
    [
        (
            ("cpu", "", ["fp32"]),
            ("cuda", "NVIDIA H100 80GB HBM3", {"bf16"}),
            "ran on CPU ranks and the plan is for a GPU",
        ),
        (("cuda", "NVIDIA A100-SXM4-80GB", ["bf16"]), ("cpu", None, {"bf16"}), "ran on GPUs (NVIDIA A100"),
        (
            ("cuda", "NVIDIA A100-SXM4-80GB", ["bf16"]),
            ("cuda", "NVIDIA H100 80GB HBM3", {"bf16"}),
            "and the plan is for",
        ),
        (
            ("cpu", "", ["fp32"]),
            ("cpu", None, {"bf16", "fp32"}),
            "measured precision=fp32 and the plan asks precision=bf16",
        ),
        (("cuda", "NVIDIA H100 80GB HBM3", ["bf16"]), ("cuda", "NVIDIA H100 80GB HBM3", {"bf16"}), None),
        (
            ("cuda", "NVIDIA H100 80GB HBM3", ["bf16"]),
            ("cuda", "H100 80GB HBM3", {"bf16"}),
            None,
        ),  # the catalogue's name
        (("cpu", "", ["fp32", "bf16"]), ("cpu", None, {"bf16"}), None),
    ],
)
def test_a_calibration_of_other_hardware_or_precision_is_named_as_such(measured, plan, why):
    from sweeper.capacity.calibrate import Calibration, calibration_mismatch

    device, name, precisions = measured
    groups = {group_key("ddp", False, p): None for p in precisions}
    cal = Calibration(0.3, 2, 0.3, 0.3, "", groups, device, {}, "sweep", name)  # type: ignore[arg-type]
    found = calibration_mismatch(cal, *plan)
    assert (found is None) if why is None else (why in (found or "")), found
