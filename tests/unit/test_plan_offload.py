"""Offload in the memory model (``sweeper.capacity.offload``): ZeRO-Offload of the optimizer and of the parameters
and FSDP ``cpu_offload`` move their states from the device's terms to a host term per node, byte for byte from the
formulas (DeepSpeed ``stage_1_and_2.py`` / ``stage3.py``, FSDP2 ``CPUOffloadPolicy``), with a host fit against
``cluster.host_mem_gib``; the advice of a pruned point never names what it already does (U15). The device is a GPU
the tests only describe (``Target(..., "cuda", ...)``): nothing runs on one."""

from __future__ import annotations

import yaml

from sweeper.capacity.arch import Arch
from sweeper.capacity.offload import offload_of
from sweeper.capacity.predict import predict
from sweeper.capacity.states import layout, states_for
from sweeper.config.target import Target
from sweeper.paths import conf_dir
from sweeper.point.rules.planning import advice, pruned_reason
from sweeper.units import GIB
from tests.unit.specs import make_spec

LLAMA7B = yaml.safe_load((conf_dir() / "model" / "llama-2-7b.yaml").read_text())
A100 = yaml.safe_load((conf_dir() / "cluster" / "a100-80gb.yaml").read_text())
A100_TARGET = Target("slurm", "cuda", A100["gpu_name"], {}, A100)
OPT = "zero_optimization.offload_optimizer.device"
DS_FULL = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}


def _7b(**kw):
    base = dict(model=LLAMA7B, precision="bf16", seq_len=2048, per_device_batch_size=1, ranks_per_node=1, gc=True)
    spec = make_spec(**{**base, **kw})
    return spec, Arch.from_config(spec.model_type, spec.model_config)


def test_the_catalogue_gives_the_dgx_a100_640gb_host_memory():
    assert A100["host_mem_gib"] == 2048


def test_zero3_with_optimizer_and_parameter_offload_keeps_no_state_on_the_device_and_20_bytes_per_param_on_host():
    spec, arch = _7b(zero=3, deepspeed_config=DS_FULL)
    p = arch.total_params
    st = states_for(spec, arch, layout(spec, "cuda"))
    # host: 16-bit params 2P + 16-bit grad partitions 2P + fp32 grads 4P + fp32 masters 4P + DeepSpeedCPUAdam 8P
    assert (st.host_param_bytes, st.host_grad_bytes, st.host_optimizer_bytes) == (2 * p, 6 * p, 12 * p)
    assert st.step_grad_bytes == 0 and st.optimizer.name == "DeepSpeedCPUAdam" and st.pinned
    pred = predict(spec, A100_TARGET)
    assert not {"params", "optimizer_states", "fp32_master_weights"} & set(pred.terms)
    assert pred.host_bytes_per_node == 20 * p
    assert pred.host_mem_bytes == 2048 * GIB and pred.host_fits is True
    assert pred.fits is True and pred.device_bytes < 4 * GIB  # 139.82 GiB before (U15)


def test_zero3_offload_per_node_is_per_rank_bytes_times_ranks_per_node():
    spec, arch = _7b(zero=3, deepspeed_config=DS_FULL, ranks_per_node=8)
    part = sum(-(-rows * rest // 8) for rows, rest in arch.param_shapes())
    assert predict(spec, A100_TARGET).host_bytes_per_node == 8 * 20 * part


def test_zero2_optimizer_offload_moves_masters_adam_and_fp32_grads_and_keeps_16_bit_weights_on_the_device():
    spec, arch = _7b(
        zero=2, ranks_per_node=8, deepspeed_config={"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    )
    p = arch.total_params
    st = states_for(spec, arch, layout(spec, "cuda"))
    part = st.master_bytes // 4
    assert part == -(-p // 16) * 16 // 8  # padded to 2 x world, split evenly
    assert (st.host_param_bytes, st.host_grad_bytes, st.host_optimizer_bytes) == (0, 4 * part, 12 * part)
    assert st.step_grad_bytes == 0  # ZeRO-2 reduces into buckets and copies to the host partitions
    pred = predict(spec, A100_TARGET)
    assert pred.terms["params"] == 2 * p and "optimizer_states" not in pred.terms
    assert pred.host_bytes_per_node == 8 * 16 * part


def test_zero1_optimizer_offload_keeps_its_full_16_bit_gradients_on_the_device():
    spec, arch = _7b(zero=1, ranks_per_node=8, deepspeed_config={"zero_optimization": {"cpu_offload": True}})
    st = states_for(spec, arch, layout(spec, "cuda"))
    assert st.step_grad_bytes == 2 * arch.total_params and st.optimizer_offload == "cpu"


def test_offload_param_below_stage_3_is_ignored_and_said_so():
    spec, _ = _7b(zero=2, deepspeed_config={"zero_optimization": {"offload_param": {"device": "cpu"}}})
    off = offload_of(spec.fsdp, spec.zero, spec.fsdp_config, spec.deepspeed_config)
    assert off.params == "none" and "only at stage 3" in off.notes[0]
    assert "only at stage 3" in predict(spec, A100_TARGET).note


def test_fsdp_cpu_offload_moves_sharded_params_grads_and_optimizer_to_the_host():
    spec, arch = _7b(fsdp="full_shard", fsdp_config={"cpu_offload": True}, ranks_per_node=8)
    local = arch.sharded_params(8)
    st = states_for(spec, arch, layout(spec, "cuda"))
    adam = 2 * 4 * local + 4 * arch.param_tensors
    assert (st.host_param_bytes, st.host_grad_bytes, st.host_optimizer_bytes) == (4 * local, 4 * local, adam)
    pred = predict(spec, A100_TARGET)
    assert "params" not in pred.terms and "optimizer_states" not in pred.terms and pred.terms.get("grads", 0) == 0
    assert pred.host_bytes_per_node == 8 * (8 * local + adam) and pred.host_fits is True
    assert pred.fits is True


def test_nvme_offload_is_on_neither_device_nor_host_and_the_host_fit_is_unknown():
    ds = {"zero_optimization": {"offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "nvme"}}}
    spec, _ = _7b(zero=3, deepspeed_config=ds)
    pred = predict(spec, A100_TARGET)
    assert pred.fits is True and "params" not in pred.terms
    assert pred.host_bytes_per_node is None and pred.host_fits is None and "NVMe" in pred.note


def test_without_a_host_memory_the_host_fit_is_unknown_and_said_so():
    spec, _ = _7b(zero=3, deepspeed_config=DS_FULL)
    target = Target("slurm", "cuda", A100["gpu_name"], {}, {**A100, "host_mem_gib": None})
    pred = predict(spec, target)
    assert pred.host_bytes_per_node > 0 and pred.host_fits is None and "cluster.host_mem_gib" in pred.note


def test_offloaded_states_that_do_not_fit_the_host_are_pruned_naming_host_mem_gib():
    from sweeper.point.rules.planning import _predicted_not_to_fit

    spec, _ = _7b(zero=3, deepspeed_config=DS_FULL, prune=True)
    small = Target("slurm", "cuda", A100["gpu_name"], {}, {**A100, "host_mem_gib": 64})
    reason, keys = _predicted_not_to_fit(spec, small)
    assert "host memory" in reason and "cluster.host_mem_gib" in keys
    assert _predicted_not_to_fit(spec, A100_TARGET) is None


def test_without_offload_the_host_term_is_zero_and_the_device_keeps_every_state():
    spec, _ = _7b(zero=3)
    pred = predict(spec, A100_TARGET)
    assert pred.host_bytes_per_node == 0 and {"params", "optimizer_states", "fp32_master_weights"} <= set(pred.terms)
    assert pred.fits is False  # U15 before offload: 139.82 GiB on one A100


def test_advice_never_names_a_setting_the_point_already_has():
    zero3_gc, _ = _7b(zero=3)
    assert advice(zero3_gc, A100_TARGET) == [
        "offload the optimizer (+deepspeed_config.zero_optimization.offload_optimizer.device=cpu)",
        "offload the parameters (+deepspeed_config.zero_optimization.offload_param.device=cpu)",
        "more ranks",
        "a device with more memory",
    ]
    ddp, _ = _7b(gc=False, ranks_per_node=8)
    assert advice(ddp, A100_TARGET) == ["shard (fsdp=full_shard or zero=3)", "gc=true", "a device with more memory"]
    zero2, _ = _7b(
        zero=2, ranks_per_node=8, deepspeed_config={"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    )
    assert advice(zero2, A100_TARGET) == ["shard more (zero=3)", "more nodes", "a device with more memory"]
    grad_op, _ = _7b(fsdp="shard_grad_op", gc=False)
    assert advice(grad_op, A100_TARGET)[:3] == [
        "shard more (fsdp=full_shard)",
        "gc=true",
        "offload to the host (+fsdp_config.cpu_offload=true)",
    ]
    full_off, _ = _7b(fsdp="full_shard", fsdp_config={"cpu_offload": True}, ranks_per_node=8)
    assert advice(full_off, A100_TARGET) == ["more nodes", "a device with more memory"]


def test_the_u15_point_without_offload_is_advised_offload_not_zero3_or_gc():
    spec, _ = _7b(zero=3)
    pred = predict(spec, A100_TARGET)
    reason = pruned_reason(spec, pred, A100_TARGET)
    assert "offload_optimizer.device=cpu" in reason
    assert "zero=3" not in reason and "gc=true" not in reason and "fsdp=" not in reason


def test_under_zero_offload_accelerate_steps_deepspeed_cpu_adam_whatever_optim_says_and_the_note_says_so():
    ds = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    spec, _ = _7b(zero=2, ranks_per_node=8, deepspeed_config=ds, training_args={"optim": "sgd"})
    st = states_for(spec, *_arch_layout(spec))
    assert st.optimizer.name == "DeepSpeedCPUAdam" and st.host_optimizer_bytes == 3 * st.master_bytes
    assert "accelerate replaces it by DeepSpeedCPUAdam" in predict(spec, A100_TARGET).note
    kept = {**ds, "zero_force_ds_cpu_optimizer": False}
    spec, _ = _7b(zero=2, ranks_per_node=8, deepspeed_config=kept, training_args={"optim": "sgd"})
    st = states_for(spec, *_arch_layout(spec))
    assert st.optimizer.name == "sgd" and st.host_optimizer_bytes == st.master_bytes  # SGD keeps no state


def _arch_layout(spec):
    return Arch.from_config(spec.model_type, spec.model_config), layout(spec, "cuda")


def test_the_u15_plan_row_has_a_device_fit_and_a_host_fit_in_its_columns():
    from sweeper.config.schema import ClusterConfig
    from sweeper.plan.rows import plan_frame, term_columns

    spec, arch = _7b(zero=3, deepspeed_config=DS_FULL)
    fsdp, _ = _7b(fsdp="full_shard", fsdp_config={"cpu_offload": True})
    df = plan_frame([(spec, ClusterConfig(**A100)), (fsdp, ClusterConfig(**A100))])
    assert list(df["status"]) == ["planned", "planned"]
    assert list(df["fits"]) == [True, True] and list(df["predicted_host_fits"]) == [True, True]
    assert df["predicted_host_bytes_per_node"][0] == 20 * arch.total_params
    assert set(df["predicted_host_mem_bytes"]) == {2048 * GIB}
    assert str(df["predicted_host_bytes_per_node"].dtype) == "Int64"
    assert "predicted_host_mem_bytes" not in term_columns(df)  # a capacity, not a term of the device breakdown


def test_zero2_offload_with_accumulation_keeps_a_16_bit_accumulation_partition_on_the_host():
    ds = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    one, arch = _7b(zero=2, ranks_per_node=8, deepspeed_config=ds)
    two, _ = _7b(zero=2, ranks_per_node=8, deepspeed_config=ds, grad_accum=2)
    a, b = (states_for(s, arch, layout(s, "cuda")) for s in (one, two))
    part = a.master_bytes // 4
    assert b.host_grad_bytes - a.host_grad_bytes == 2 * part  # accumulated_grads_in_cpu, bf16
    z3, _ = _7b(zero=3, deepspeed_config=DS_FULL, grad_accum=2)
    z3_one, _ = _7b(zero=3, deepspeed_config=DS_FULL)
    # ZeRO-3 accumulates into its (already counted) grad_partitions_flat_buffer
    host = [states_for(s, arch, layout(s, "cuda")).host_bytes for s in (z3, z3_one)]
    assert host[0] == host[1] > 0


def test_the_plan_table_shows_the_host_columns_only_when_a_row_offloads(tmp_path):
    from sweeper.config.sections import ClusterConfig
    from sweeper.plan.rows import plan_frame
    from sweeper.plan.table import main_table

    a100 = ClusterConfig(
        name="a100-80gb", gpus_per_node=8, gpu_name="NVIDIA A100-SXM4-80GB", gpu_mem_gib=79.15, host_mem_gib=2048
    )
    ds = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}
    offloaded, _ = _7b(zero=3, gc=True, ranks_per_node=1, deepspeed_config=ds)
    plain, _ = _7b(zero=3, gc=True, ranks_per_node=1)
    table = main_table(plan_frame([(offloaded, a100), (plain, a100)]))
    assert list(table["host fits"]) == ["yes", "yes"] and list(table["host GiB/node"]) == ["125.51", "0.00"]
    assert "host fits" not in main_table(plan_frame([(plain, a100)])).columns


def test_an_offloaded_point_has_no_throughput_and_says_why_the_same_point_on_device_has_one():
    ds = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    offloaded, _ = _7b(zero=3, gc=True, ranks_per_node=8, deepspeed_config=ds)
    plain, _ = _7b(zero=3, gc=True, ranks_per_node=8)
    pred = predict(offloaded, A100_TARGET)
    assert pred.tokens_per_s_per_device is None and pred.train_days is None and pred.fits is True
    assert "not in the time model, so throughput and days are unknown" in pred.note
    assert predict(plain, A100_TARGET).tokens_per_s_per_device > 0
