"""The optimizer-aware model states (``sweeper.capacity.optimizers``), byte for byte from each optimizer's layout,
and what an optimizer the model does not know does to a prediction (no ranks; the CPU measurement is
``tests/integration/test_plan_optimizers.py``)."""

from __future__ import annotations

import pytest
import yaml

from sweeper.capacity.arch import Arch
from sweeper.capacity.optimizers import BNB_QMAP, UnknownOptimizer, hf_optimizer, parse_optim_args
from sweeper.capacity.predict import max_batch_size, predict
from sweeper.capacity.states import layout, states_for
from sweeper.config.target import Target
from sweeper.paths import conf_dir
from sweeper.point.gate import check
from tests.unit.specs import make_spec

TINY = yaml.safe_load((conf_dir() / "model" / "tiny.yaml").read_text())
LOCAL = Target("local", "cpu", None, {}, {"name": "local", "gpu_mem_gib": 0.05})


def _tiny(optim: str | None = None, optim_args: str | None = None, **kw):
    ta = {k: v for k, v in (("optim", optim), ("optim_args", optim_args)) if v is not None}
    spec = make_spec(model=TINY, training_args=ta, ranks_per_node=2, device="cpu", **kw)
    arch = Arch.from_config(spec.model_type, spec.model_config)
    return spec, arch, states_for(spec, arch, layout(spec, "cpu"))


def test_adamw_keeps_two_moments_in_the_parameter_dtype_and_a_fp32_step_per_tensor():
    for optim in (None, "adamw_torch", "adamw_torch_fused"):
        _, arch, st = _tiny(optim)
        assert st.optimizer_state_bytes == 2 * 4 * arch.total_params + 4 * arch.param_tensors


def test_sgd_keeps_nothing_and_sgd_with_momentum_one_buffer_per_parameter():
    _, arch, st = _tiny("sgd")
    assert st.optimizer_state_bytes == 0
    _, arch, st = _tiny("sgd", "momentum=0.9")
    assert st.optimizer_state_bytes == 4 * arch.total_params  # momentum_buffer, fp32 like the parameter
    _, arch, st = _tiny("sgd", "momentum=0,nesterov=False")
    assert st.optimizer_state_bytes == 0


def test_adafactor_factors_the_second_moment_of_matrices_and_keeps_vectors_whole():
    _, arch, st = _tiny("adafactor")
    expected = 0
    for rows, rest in arch.param_shapes():
        expected += 4 * ((rows + rest) if rest > 1 else rows) + 4  # row + col (or full) fp32, and a 0-d RMS
    assert st.optimizer_state_bytes == expected
    assert st.optimizer_state_bytes == 18_580  # measured on 2 CPU ranks (U14)
    assert st.optimizer_state_bytes < arch.total_params  # far below one byte per parameter


def test_adagrad_and_rmsprop_keep_one_full_state_and_a_step_each_plus_what_their_options_add():
    _, arch, st = _tiny("adagrad")
    assert st.optimizer_state_bytes == 4 * arch.total_params + 4 * arch.param_tensors
    _, arch, st = _tiny("rmsprop", "momentum=0.9,centered=True")
    assert st.optimizer_state_bytes == 3 * 4 * arch.total_params + 4 * arch.param_tensors


def test_bitsandbytes_8_bit_adam_keeps_a_byte_per_state_and_an_absmax_per_256_elements():
    _, arch, st = _tiny("adamw_bnb_8bit")
    expected = 0
    for rows, rest in arch.param_shapes():
        n = rows * rest
        expected += 2 * 4 * n if n < 4096 else 2 * (n + 4 * -(-n // 256))
    assert st.optimizer_state_bytes == expected + 2 * BNB_QMAP
    assert 2 * arch.total_params < st.optimizer_state_bytes < 3 * arch.total_params


def test_optim_args_are_parsed_as_transformers_parses_them():
    assert parse_optim_args("momentum=0.9, nesterov=True") == {"momentum": "0.9", "nesterov": "True"}
    assert parse_optim_args(None) == {}
    with pytest.raises(UnknownOptimizer, match="momentum"):
        hf_optimizer({"optim": "sgd", "optim_args": "momentum=fast"})


def test_under_zero_the_wrapped_optimizer_steps_flat_fp32_partitions():
    for optim, per_element in (("sgd", 0), ("adafactor", 4)):
        _, _, st = _tiny(optim, zero=2)
        part = st.master_bytes // 4
        scalars = 2 * 4 if optim == "adafactor" else 0  # a 0-d RMS per flat group
        # Adafactor sees 1-D partitions: a full exp_avg_sq, never factored
        assert st.optimizer_state_bytes == st.master_bytes + per_element * part + scalars
    _, _, st = _tiny("sgd", "momentum=0.9", zero=3)
    assert st.optimizer_state_bytes == 2 * st.master_bytes


def test_a_deepspeed_optimizer_block_is_what_runs_and_an_unknown_type_is_unknown():
    ds = {"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
    _, _, st = _tiny("sgd", zero=2, deepspeed_config=ds)
    assert st.optimizer.name == "FusedAdam" and st.optimizer_state_bytes == 3 * st.master_bytes
    with pytest.raises(UnknownOptimizer, match="Lamb"):
        _tiny(zero=2, deepspeed_config={"optimizer": {"type": "Lamb"}})


def test_an_unknown_optimizer_leaves_every_memory_number_unknown_and_says_which():
    spec, _, _ = _tiny("adamw_torch", per_device_batch_size=4)
    known = predict(spec, LOCAL)
    spec = make_spec(model=TINY, training_args={"optim": "galore_adamw"}, ranks_per_node=2, device="cpu")
    pred = predict(spec, LOCAL)
    assert known.fits is not None and known.peak_bytes
    assert pred.fits is None and pred.peak_bytes is None and pred.device_bytes is None
    assert pred.optimizer_state_bytes_per_rank is None and pred.max_per_device_batch_size is None
    assert pred.param_bytes_per_rank == known.param_bytes_per_rank > 0  # not the optimizer's: still known
    assert "optim=galore_adamw" in pred.note and "fits unknown" in pred.note
    assert max_batch_size(spec, LOCAL) is None


def test_an_unknown_optimizer_is_never_pruned():
    spec = make_spec(
        model=TINY,
        training_args={"optim": "lomo"},
        ranks_per_node=2,
        device="cpu",
        prune=True,
        per_device_batch_size=64,
    )
    tight = Target("local", "cpu", None, {}, {"name": "local", "gpu_mem_gib": 0.001})
    from sweeper.point.rules.planning import _predicted_not_to_fit

    assert _predicted_not_to_fit(spec, tight) is None
    adam = make_spec(model=TINY, ranks_per_node=2, device="cpu", prune=True, per_device_batch_size=64)
    assert _predicted_not_to_fit(adam, tight) is not None  # the same point with AdamW is pruned


def test_sgd_lowers_the_predicted_peak_by_the_adam_state_it_does_not_keep():
    spec_a, _, st_a = _tiny("adamw_torch")
    spec_s, _, _ = _tiny("sgd")
    a, s = predict(spec_a, LOCAL), predict(spec_s, LOCAL)
    assert a.peak_bytes - s.peak_bytes == st_a.optimizer_state_bytes
    assert a.terms["optimizer_states"] == st_a.optimizer_state_bytes and s.terms["optimizer_states"] == 0
    check(spec_s, LOCAL)  # the gate accepts the point
