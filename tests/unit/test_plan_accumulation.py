"""The memory model's accumulation, TF32 and off-grid terms (issue 18; turn3 U16, U24, U25), without ranks.

The measured figures are MemTracker's peaks of the turn3 cases on 2 CPU gloo ranks (``docs/cases.md``, and
``benchmarks/plan_offgrid.py``, which reruns them: 270,173,530 B and 1,568,969,308 B on 2026-12-02)."""

from __future__ import annotations

import pytest
import yaml

from sweeper.capacity.arch import Arch
from sweeper.capacity.memory import estimate_memory
from sweeper.paths import conf_dir
from sweeper.units import GIB
from tests.unit.specs import make_spec


def _model(name: str, **config) -> dict:
    model = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())
    model["config"].update(config)
    return model


def _estimate(device: str = "cpu", **overrides):
    spec = make_spec(**overrides)
    return estimate_memory(spec, Arch.from_config(spec.model_type, spec.model_config), device)


def test_u24_deep_bf16_llama_under_fsdp_with_gc_is_within_10_percent():
    model = _model("tiny", hidden_size=256, intermediate_size=688, num_hidden_layers=16, vocab_size=256)
    est = _estimate(model=model, seq_len=512, per_device_batch_size=16, gc=True, precision="bf16", fsdp="full_shard")
    assert est.peak_bytes == pytest.approx(270_173_524, rel=0.10)


def test_u25_tied_gpt2_under_fsdp_with_gc_is_within_10_percent_and_not_5_percent_under():
    est = _estimate(model=_model("gpt2"), fsdp="full_shard", gc=True, per_device_batch_size=1, seq_len=128)
    measured = 1_568_969_308
    assert est.peak_phase == "end of backward"
    assert -0.05 <= (est.peak_bytes - measured) / measured <= 0.10
    # the tied head's three V·h fp32 gradients are in the end-of-backward scratch
    assert est.terms["backward_scratch"].bytes >= 3 * 50257 * 768 * 4


def test_fsdp_accumulation_holds_the_unsharded_gradient_of_the_whole_model():
    """accelerate's no_sync -> FSDP2 set_requires_gradient_sync(False): Llama-2-7B in bf16 keeps about 12.55 GiB of
    unsharded gradients per rank across micro-batches (accelerate#2531), whatever the number of ranks."""
    kw = dict(model=_model("llama-2-7b"), fsdp="full_shard", precision="bf16", seq_len=4096, ranks_per_node=8)
    one = _estimate("cuda", **kw, grad_accum=1)
    two = _estimate("cuda", **kw, grad_accum=2)
    grads = two.terms["grads"].bytes
    assert grads / GIB == pytest.approx(12.55, abs=0.05)
    assert two.peak_bytes - one.peak_bytes >= grads * 0.9


@pytest.mark.parametrize("engine", [{}, {"zero": 1}, {"zero": 2}, {"fsdp": "full_shard"}])
def test_accumulation_never_lowers_the_predicted_peak(engine):
    for device in ("cpu", "cuda"):
        kw = dict(model=_model("tiny"), per_device_batch_size=1, seq_len=16)
        one = _estimate(device, **engine, **kw, grad_accum=1)
        two = _estimate(device, **engine, **kw, grad_accum=2)
        assert two.peak_bytes >= one.peak_bytes, (engine, device)
        if device == "cpu":  # measured: every engine's grad_accum=2 peak is above its grad_accum=1 peak here
            assert two.peak_bytes > one.peak_bytes, engine


@pytest.mark.parametrize("engine", [{}, {"fsdp": "full_shard"}, {"zero": 2}])
def test_tf32_changes_no_term_of_the_peak(engine):
    """training_args.tf32 only selects TF32 matmul math for fp32 tensors: every tensor stays fp32, so the peak and
    each term equal the fp32 point's (the harness reads tf32 only for the MFU peak)."""
    for device in ("cpu", "cuda"):
        plain = _estimate(device, **engine, precision="fp32")
        tf32 = _estimate(device, **engine, precision="fp32", training_args={"tf32": True})
        assert tf32.peak_bytes == plain.peak_bytes
        assert {k: t.bytes for k, t in tf32.terms.items()} == {k: t.bytes for k, t in plain.terms.items()}
