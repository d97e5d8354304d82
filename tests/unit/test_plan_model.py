"""The memory and time model's arithmetic against the formulas of ``../shared/notes/formulas.md`` (no ranks)."""

from __future__ import annotations

import pytest
import yaml

from sweeper.capacity.arch import Arch
from sweeper.capacity.memory import PHASE_GRADS, estimate_memory
from sweeper.capacity.predict import max_batch_size, predict
from sweeper.capacity.states import layout, model_states
from sweeper.capacity.timing import comm_bytes_per_step, estimate_time
from sweeper.config.target import Target
from sweeper.paths import conf_dir
from sweeper.units import GIB
from tests.unit.specs import make_spec


def _model(name: str) -> dict:
    return yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())


LLAMA7B = _model("llama-2-7b")
H100 = {
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "gpu_mem_gib": 79.1,
    "gpus_per_node": 8,
    "intra_node_bandwidth_gb_s": 360.0,
    "inter_node_bandwidth_gb_s": 45.0,
}
H100_TARGET = Target("slurm", "cuda", H100["gpu_name"], {}, H100)


def _7b(**kw):
    base = dict(model=LLAMA7B, precision="bf16", seq_len=4096, per_device_batch_size=1, ranks_per_node=8)
    return make_spec(**{**base, **kw})


def _states(spec):
    arch = Arch.from_config(spec.model_type, spec.model_config)
    return arch.total_params, model_states(arch, layout(spec, "cuda"))


def test_ddp_with_autocast_holds_16_bytes_per_parameter_as_fp32_weights_grads_and_adam():
    p, st = _states(_7b(ranks_per_node=2))
    # HF bf16=True over fp32 weights: 4 (weights) + 4 (grads) + 8 (Adam) bytes/param, no 2-byte copy
    assert st.param_bytes == 4 * p and st.grad_bytes == 4 * p
    assert st.optimizer_state_bytes == pytest.approx(8 * p, rel=1e-6)


def test_pure_bf16_has_no_master_copy():
    p, st = _states(_7b(model_dtype="bfloat16", ranks_per_node=2))
    assert st.param_bytes + st.grad_bytes + st.optimizer_state_bytes == pytest.approx(8 * p, rel=1e-6)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_keeps_16_bit_weights_and_12_bytes_per_param_over_n_of_fp32_state(stage: int):
    p, st = _states(_7b(zero=stage))
    n = 8
    assert st.optimizer_state_bytes == pytest.approx(12 * p / n, rel=1e-6)  # fp32 master + momentum + variance
    assert st.master_bytes == pytest.approx(4 * p / n, rel=1e-6)
    assert st.grad_bytes is None  # as measured: DeepSpeed's gradients live in its partitions
    assert st.param_bytes == pytest.approx(2 * p / (n if stage == 3 else 1), rel=1e-6)


def test_zero_2_total_model_states_equal_deepspeed_s_own_2p_plus_18p_over_n():
    p, st = _states(_7b(zero=2))
    # estimate_zero2_model_states_mem_needs: 2P (16-bit params) + 18P/N (16-bit + fp32 grads, fp32 params, Adam)
    assert st.param_bytes + st.step_grad_bytes + st.optimizer_state_bytes == pytest.approx(2 * p + 18 * p / 8, rel=1e-6)


def test_fsdp_shards_everything_like_zero_3_16_bytes_over_n():
    p, st = _states(_7b(fsdp="full_shard"))
    assert st.param_bytes + st.grad_bytes + st.optimizer_state_bytes == pytest.approx(16 * p / 8, rel=1e-3)


def test_hybrid_shard_shards_over_the_node_only():
    p, st = _states(_7b(fsdp="hybrid_shard", nodes=2))
    assert st.param_bytes == pytest.approx(4 * p / 8, rel=1e-3)  # 8 ranks per node, not 16


def test_ring_all_reduce_moves_2_n_minus_1_over_n_of_the_gradients_and_zero_adds_the_parameter_gather():
    arch = Arch.from_config("llama", LLAMA7B["config"])
    p, ring = arch.total_params, 7 / 8
    ddp, _ = comm_bytes_per_step(arch, layout(_7b(ranks_per_node=8), "cuda"), nodes=1)
    assert ddp == pytest.approx(2 * ring * p * 4)  # fp32 gradients under autocast
    z2, _ = comm_bytes_per_step(arch, layout(_7b(zero=2), "cuda"), nodes=1)
    # DeepSpeed all-reduces 16-bit gradient buckets (use_multi_rank_bucket_allreduce) and all-gathers the parameters
    assert z2 == pytest.approx(3 * ring * p * 2, rel=1e-6)
    z3, _ = comm_bytes_per_step(arch, layout(_7b(zero=3), "cuda"), nodes=1)
    assert z3 == pytest.approx(z2, rel=1e-3)  # gather forward + gather backward + reduce-scatter (norms persistent)
    fsdp, _ = comm_bytes_per_step(arch, layout(_7b(fsdp="full_shard"), "cuda"), nodes=1)
    assert 2.9 * ring * p * 2 < fsdp < 3 * ring * p * 2  # the tail unit (norm + head) is not gathered again
    intra, inter = comm_bytes_per_step(arch, layout(_7b(zero=2, nodes=2), "cuda"), nodes=2)
    assert intra == 0 and inter > 0  # the ring crosses nodes: the inter-node bandwidth bounds it


def test_collectives_per_step_follow_each_engine_buckets_and_units():
    from sweeper.capacity.timing import DDP_BUCKET_BYTES, collectives

    tiny = _model("tiny")
    arch = Arch.from_config("llama", tiny["config"])
    spec = make_spec(model=tiny, ranks_per_node=2)
    assert len(collectives(arch, layout(spec, "cpu"))) == 1  # 0.84 MB of fp32 gradients: one bucket
    zero2 = collectives(arch, layout(make_spec(model=tiny, ranks_per_node=2, zero=2), "cpu"))
    buckets = [c for c in zero2 if c.kind == "all_reduce" and c.nbytes > 4]
    sizes = {rows * rest * 4 for rows, rest in arch.param_shapes()}
    assert all(c.nbytes <= 64 * 64 * 4 or c.nbytes in sizes for c in buckets)  # up to hidden², or one tensor alone
    assert sum(c.nbytes for c in buckets) == arch.total_params * 4
    fsdp = collectives(arch, layout(make_spec(model=tiny, ranks_per_node=2, fsdp="full_shard"), "cpu"))
    kinds = [c.kind for c in fsdp]
    layers = arch.layers
    # forward: layers + embedding + tail; backward: layers + embedding again; one reduce-scatter per unit
    assert kinds.count("all_gather") == (layers + 2) + (layers + 1) and kinds.count("reduce_scatter") == layers + 2
    acc = collectives(arch, layout(make_spec(model=tiny, ranks_per_node=2, fsdp="full_shard"), "cpu"), grad_accum=4)
    assert {c.count for c in acc if c.kind == "all_gather"} == {4} and {
        c.count for c in acc if c.kind == "reduce_scatter"
    } == {1}  # gathers every micro-batch, gradients reduced once (no_sync)
    arch7 = Arch.from_config("llama", LLAMA7B["config"])
    big = collectives(arch7, layout(_7b(), "cuda"))
    # every 4096x4096 fp32 gradient (64 MiB) is over the 25 MiB cap: a bucket of its own; the norms share buckets
    large = sum(1 for rows, rest in arch7.param_shapes() if rows * rest * 4 >= DDP_BUCKET_BYTES)
    assert large <= len(big) <= large + 2 * arch7.layers
    assert sum(c.nbytes for c in big) == arch7.total_params * 4


def test_mfu_is_the_efficiency_without_recompute_and_three_quarters_of_it_with_full_checkpointing():
    from sweeper.capacity.hostcomm import HostComm

    arch = Arch.from_config("llama", LLAMA7B["config"])
    lay = layout(_7b(), "cuda")
    kw = dict(batch=1, seq_len=4096, grad_accum=1, nodes=1, peak_flops=989e12, efficiency=0.4, comm_overlap=1.0)
    plain = estimate_time(arch, lay, gc=False, intra=None, inter=None, **kw)
    assert plain.mfu == pytest.approx(0.4) and plain.comm_s is None
    nvlink = HostComm(2e-6, 360.0, "test")
    ckpt = estimate_time(arch, lay, gc=True, intra=nvlink, inter=None, **kw)
    assert ckpt.mfu == pytest.approx(0.4 * 6 / 8, rel=0.02)  # one extra forward: 8N instead of 6N (HFU vs MFU)
    slow = estimate_time(arch, lay, gc=False, intra=HostComm(1e-4, 0.5, "t"), inter=None, **{**kw, "comm_overlap": 0.0})
    assert slow.step_s == pytest.approx(slow.compute_s + slow.comm_s)  # no overlap: everything exposed
    assert slow.comm_s == pytest.approx(lay.world * 0 + slow.collectives * 2 * 7 * 1e-4 + slow.comm_bytes / 0.5e9)


def test_the_per_step_overhead_hides_no_communication():
    """capacity/timing.py: only the kernels (``kernel_s``) hide the collectives issued in backward; the per-step host
    overhead adds to the step and changes no exposed communication (the docstring's formula and the code agree)."""
    from sweeper.capacity.hostcomm import HostComm

    arch = Arch.from_config("llama", LLAMA7B["config"])
    lay = layout(_7b(), "cuda")
    kw = dict(batch=1, seq_len=4096, grad_accum=1, nodes=1, peak_flops=989e12, efficiency=0.4, comm_overlap=0.67)
    link = HostComm(2e-6, 5.0, "slow link: more communication than the backward pass hides")
    bare = estimate_time(arch, lay, gc=False, intra=link, inter=None, **kw)
    busy = estimate_time(arch, lay, gc=False, intra=link, inter=None, overhead_s=10.0, **kw)
    assert bare.exposed_comm_s > 0
    assert busy.exposed_comm_s == pytest.approx(bare.exposed_comm_s)
    assert busy.step_s == pytest.approx(bare.step_s + 10.0)
    assert busy.compute_s == pytest.approx(bare.compute_s + 10.0)


def test_7b_on_8_h100_ddp_does_not_fit_and_zero_3_and_fsdp_do():
    ddp = predict(_7b(), H100_TARGET)
    assert ddp.fits is False and ddp.max_per_device_batch_size == 0  # 16 bytes/param x 6.7 B > 80 GB
    for kw in (dict(zero=3), dict(fsdp="full_shard"), dict(zero=3, gc=True)):
        p = predict(_7b(**kw), H100_TARGET)
        assert p.fits is True, kw
        assert p.device_bytes <= 79.1 * GIB * (1 - p.margin)
        assert (
            p.max_per_device_batch_size >= 1
            and p.train_days > 0
            and p.gpu_hours == pytest.approx(p.train_days * 24 * 8)
        )


def test_the_largest_batch_fits_and_one_more_does_not():
    spec = _7b(fsdp="full_shard", gc=True)
    b = max_batch_size(spec, H100_TARGET)
    assert b is not None and b > 1
    assert predict(_7b(fsdp="full_shard", gc=True, per_device_batch_size=b), H100_TARGET).fits is True
    assert predict(_7b(fsdp="full_shard", gc=True, per_device_batch_size=b + 1), H100_TARGET).fits is False


def test_checkpointing_does_not_move_a_peak_that_is_at_the_end_of_backward():
    # GPT-2 at a short sequence: weights + grads + Adam + step scratch exceed the activations
    gpt2 = _model("gpt2")
    plain = estimate_memory(
        make_spec(model=gpt2, seq_len=64, per_device_batch_size=1), Arch.from_config("gpt2", gpt2["config"]), "cpu"
    )
    ckpt = estimate_memory(
        make_spec(model=gpt2, seq_len=64, per_device_batch_size=1, gc=True),
        Arch.from_config("gpt2", gpt2["config"]),
        "cpu",
    )
    assert plain.peak_phase == ckpt.peak_phase == PHASE_GRADS
    assert plain.peak_bytes == ckpt.peak_bytes


def test_every_answer_is_an_answer_never_a_crash():
    unknown = make_spec(model={"name": "t5", "model_type": "t5", "decoder_layer": "T5Block", "config": {}})
    p = predict(unknown, H100_TARGET)
    assert p.peak_bytes is None and "t5" in p.note
    no_capacity = predict(_7b(), Target("slurm", "cuda", H100["gpu_name"], {}, {"gpu_name": H100["gpu_name"]}))
    assert (
        no_capacity.fits is None and no_capacity.max_per_device_batch_size is None and "gpu_mem_gib" in no_capacity.note
    )
    cpu = predict(make_spec(), Target())
    assert cpu.tokens_per_s_per_device is None and "CPU" in cpu.note and cpu.peak_bytes > 0


def test_gpu_only_terms_are_left_out_of_the_cpu_peak_and_kept_on_gpu():
    spec = make_spec(model=_model("tiny"), ranks_per_node=2)
    arch = Arch.from_config("llama", _model("tiny")["config"])
    cpu, gpu = estimate_memory(spec, arch, "cpu"), estimate_memory(spec, arch, "cuda")
    assert cpu.terms["ddp_buckets"].gpu_only
    assert gpu.peak_bytes == cpu.peak_bytes + cpu.terms["ddp_buckets"].bytes
    assert gpu.device_bytes > gpu.peak_bytes and cpu.device_bytes == cpu.peak_bytes
