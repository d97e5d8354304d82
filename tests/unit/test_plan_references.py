"""The memory model's model states against the references people use: DeepSpeed's own ZeRO-2/3 estimators and
accelerate's ``estimate-memory`` arithmetic, called for real on the same numbers (no GPU needed: both are pure
arithmetic over parameter counts).

Where the assumptions agree the numbers are asserted equal; where they differ, the difference is asserted exactly,
as a formula in P (parameters), N (ranks that shard), LL (DeepSpeed's largest layer) and the bytes per element, with
the reason next to it. The model's states are what the harness measures (``sweeper.job.memory.model_state_bytes``);
the integration test ``tests/integration/test_plan_states_measured.py`` checks them against the measurement.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import torch
import yaml
from accelerate import init_empty_weights
from accelerate.commands.estimate import estimate_training_usage
from accelerate.utils import calculate_maximum_sizes
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from sweeper.capacity.arch import Arch
from sweeper.capacity.memory import PHASE_LOSS, estimate_memory
from sweeper.capacity.states import ModelStates, layout, model_states
from sweeper.config.spec import PointSpec
from sweeper.paths import conf_dir
from tests.unit.specs import make_spec

#: Every shipped model config (conf/model/*.yaml), at full size: the references only need parameter counts.
SHIPPED = sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml"))
#: Data-parallel degrees: one rank, 2 ranks on one node, one node of 8, and 8 nodes of 8 (DeepSpeed's
#: num_gpus_per_node x num_nodes; sweeper's ranks_per_node x nodes).
DEGREES = [(1, 1), (2, 1), (8, 1), (8, 8)]
#: HF's Trainer builds two parameter groups (weight decay / no decay); DeepSpeed flattens each into one fp32
#: partition, and torch's Adam keeps one fp32 ``step`` scalar per partition: bytes DeepSpeed's estimators ignore.
DS_STEP_SCALARS = 2 * 4


def _model_conf(name: str) -> dict[str, Any]:
    return yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())


def _spec(name: str, **overrides: Any) -> PointSpec:
    return make_spec(model=_model_conf(name), **overrides)


def _arch(name: str) -> Arch:
    m = _model_conf(name)
    return Arch.from_config(m["model_type"], m["config"])


@cache
def _meta_model(name: str, cli: bool = False) -> torch.nn.Module:
    """The fp32 model on the meta device (no memory at any size; built once per module, never modified).

    Args:
        cli: build it as ``accelerate estimate-memory`` does (``create_empty_model``: ``AutoModel``, the base model
            without the LM head, under ``init_empty_weights``); otherwise ``AutoModelForCausalLM``, what the Trainer
            trains, under ``torch.device("meta")``. (Not ``init_empty_weights`` there: with transformers 5.x it leaves
            a tied output projection untied, a second V×h tensor that every count would include.)
    """
    m = _model_conf(name)
    cfg = AutoConfig.for_model(m["model_type"], **m["config"])
    if cli:
        with init_empty_weights():
            return AutoModel.from_config(cfg, dtype=torch.float32)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def _states(spec: PointSpec, arch: Arch) -> ModelStates:
    return model_states(arch, layout(spec, "cuda"))


def _forward_backward_terms(spec: PointSpec, arch: Arch) -> dict[str, int]:
    """The forward-backward phase's terms (bytes). :class:`MemoryEstimate` lists the peak phase's terms only; a
    micro-batch large enough to put the peak in forward-backward shows them (the terms compared here, gathered
    parameters and autocast's weight copies, do not depend on the batch)."""
    batch = spec.per_device_batch_size
    while (est := estimate_memory(spec, arch, "cuda", batch=batch)).peak_phase != PHASE_LOSS:
        assert batch < 2**20, "the loss phase never became the peak"
        batch *= 2
    return {k: t.bytes for k, t in est.terms.items()}


@pytest.fixture(scope="module")
def ds() -> Any:
    """DeepSpeed's estimator module functions (imported once: ``import deepspeed`` takes seconds)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero import stage3, stage_1_and_2

    return stage_1_and_2, stage3


def _largest_layer(ds: Any, name: str) -> int:
    """LL as DeepSpeed's ``*_all_live`` helpers compute it (``stage3.model_to_params``: the largest module's own
    parameters). Its total is not used: on the meta device every ``data_ptr()`` is 0, so its de-duplication by
    ``data_ptr`` collapses all tensors into one; the total comes from :class:`Arch` (equal to the instantiated
    model's, ``tests/unit/test_plan_arch.py``)."""
    return ds[1].model_to_params(_meta_model(name))[1]


def _divides(arch: Arch, n: int) -> bool:
    """Every tensor, and P, split evenly over ``n`` ranks (and P over DeepSpeed's ``2·n`` alignment): no padding, so
    the references' ``P/N`` is exact and the comparisons below need no padding term."""
    return arch.total_params % (2 * n) == 0 and all((rows * rest) % n == 0 for rows, rest in arch.param_shapes())


#: (model, ranks per node, nodes) for the DeepSpeed comparisons: every shipped model at every degree that splits it
#: without padding (the tiny model's P = 210,240 does not split into 128 aligned halves, so not at 64 ranks).
DS_CASES = [(m, g, n) for m in SHIPPED for g, n in DEGREES if _divides(_arch(m), g * n)]


# ---------------------------------------------------------------------------------------------------------------
# DeepSpeed ZeRO-2: estimate_zero2_model_states_mem_needs(cpu_offload=False) = 2P + int(18P/N)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "per_node", "nodes"), DS_CASES)
def test_zero2_bf16_states_equal_deepspeeds_estimator_plus_the_step_scalars(ds, name, per_node, nodes):
    """DeepSpeed's comment splits its 18 bytes/param/N as 2 (16-bit grads) + 4 (fp32 grads) + 4 (fp32 params) + 8
    (Adam), with the 16-bit module weights (2P) unsharded: the same terms as sweeper's model, where they sit in
    three fields. ``param_bytes`` (2P) + ``optimizer_state_bytes`` (fp32 masters + Adam: 12P/N, what the harness
    measures) + ``step_grad_bytes`` (the 16-bit and fp32 gradient partitions alive at the step: 6P/N, invisible to
    the harness, hence ``grad_bytes`` None)."""
    arch, n = _arch(name), per_node * nodes
    p = arch.total_params
    assert _divides(arch, n)
    _, gpu = ds[0].estimate_zero2_model_states_mem_needs(
        p, num_gpus_per_node=per_node, num_nodes=nodes, cpu_offload=False
    )
    st = _states(_spec(name, zero=2, precision="bf16", ranks_per_node=per_node, nodes=nodes), arch)
    assert gpu == 2 * p + 18 * p // n  # the reference's formula, read back
    assert st.param_bytes == 2 * p  # "2 = params_16bit"
    assert st.grad_bytes is None  # DeepSpeed's gradients live in its partitions, not in param.grad
    assert st.master_bytes == 4 * p // n  # "4_params_32bit"
    assert st.optimizer_state_bytes - st.master_bytes == 8 * p // n + DS_STEP_SCALARS  # "8_optimizer_states_32bit"
    assert st.step_grad_bytes == (2 + 4) * p // n  # "2_grads_16bit + 4_grads_32bit"
    assert st.param_bytes + st.optimizer_state_bytes + st.step_grad_bytes == gpu + DS_STEP_SCALARS
    # what a measurement (and the record's states) holds: the reference minus the gradient partitions
    assert st.param_bytes + st.optimizer_state_bytes == gpu - 6 * p // n + DS_STEP_SCALARS


@pytest.mark.parametrize("name", SHIPPED)
def test_zero2_fp32_differs_from_deepspeeds_16_bit_assumption_by_2p_plus_2p_over_n(ds, name):
    """The estimator has one case: 16-bit weights and gradients. The CPU ranks train in fp32, where DeepSpeed keeps
    fp32 module weights (4P, not 2P) and fp32 gradient partitions (4P/N, not 2P/N) next to the same fp32 masters
    and Adam states (measured: ``optimizer_state_bytes_per_rank`` = 12P/N in fp32 too)."""
    arch, n = _arch(name), 2
    p = arch.total_params
    assert _divides(arch, n)
    _, gpu = ds[0].estimate_zero2_model_states_mem_needs(p, num_gpus_per_node=n, cpu_offload=False)
    st = _states(_spec(name, zero=2, precision="fp32", ranks_per_node=n), arch)
    assert st.param_bytes == 4 * p and st.optimizer_state_bytes == 12 * p // n + DS_STEP_SCALARS
    ours = st.param_bytes + st.optimizer_state_bytes + st.step_grad_bytes
    assert ours - gpu == 2 * p + 2 * p // n + DS_STEP_SCALARS


# ---------------------------------------------------------------------------------------------------------------
# DeepSpeed ZeRO-3: estimate_zero3_model_states_mem_needs(cpu_offload=False) = 4·LL + int(18P/N)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "per_node", "nodes"), DS_CASES)
def test_zero3_bf16_states_differ_from_deepspeeds_estimator_by_2p_over_n_and_the_gathered_layer(
    ds, name, per_node, nodes
):
    """Both shard everything by N. Sweeper counts 20 bytes/param/N: the 16-bit parameter partition (2, DeepSpeed's
    ``param.ds_tensor``: what the harness measures as ``param_bytes_per_rank``, 4P/N in fp32 on 2 CPU ranks), fp32
    masters (4), Adam (8), and at the step the 16-bit and fp32 gradient partitions (2 + 4). DeepSpeed counts 18
    (the ZeRO-3 function states no split; its ZeRO-2 sibling's 18 = 2 + 4 + 4 + 8 leaves the 16-bit parameters
    out, because ZeRO-2 counts them unsharded as 2P): 2P/N less.

    DeepSpeed adds 4·LL for gathering the largest layer (16-bit parameters + 16-bit gradients); sweeper puts the
    gathered parameters in the peak's ``gathered_working_set`` term, not in the states. For every shipped model the
    largest layer is the V×h output projection (or tied embedding), which is the unit sweeper counts as gathered at
    the loss: both count its 2·LL 16-bit parameters; DeepSpeed adds 2·LL for its 16-bit gradients, sweeper the
    prefetch bucket (HF's auto ``stage3_prefetch_bucket_size`` = 0.9·h², 16-bit)."""
    arch, n = _arch(name), per_node * nodes
    p = arch.total_params
    assert _divides(arch, n)
    ll = _largest_layer(ds, name)
    _, gpu, ll_bytes = ds[1].estimate_zero3_model_states_mem_needs(
        p, ll, num_gpus_per_node=per_node, num_nodes=nodes, cpu_offload=False
    )
    spec = _spec(name, zero=3, precision="bf16", ranks_per_node=per_node, nodes=nodes)
    st = _states(spec, arch)
    assert ll_bytes == 4 * ll and gpu == 4 * ll + 18 * p // n  # the reference's formula, read back
    assert st.param_bytes == 2 * p // n and st.grad_bytes is None
    assert st.optimizer_state_bytes == (4 + 8) * p // n + DS_STEP_SCALARS
    assert st.step_grad_bytes == (2 + 4) * p // n
    ours = st.param_bytes + st.optimizer_state_bytes + st.step_grad_bytes
    assert ours == gpu - 4 * ll + 2 * p // n + DS_STEP_SCALARS
    # the gathered layer: the same unit, the same 16-bit parameters
    assert ll == arch.vocab * arch.hidden
    gathered = _forward_backward_terms(spec, arch)["gathered_working_set"]
    assert gathered == 2 * ll + 2 * int(0.9 * arch.hidden**2)
    assert ll_bytes - gathered == 2 * ll - 2 * int(0.9 * arch.hidden**2)


# ---------------------------------------------------------------------------------------------------------------
# accelerate estimate-memory: estimate_training_usage(bytes, dtype) over calculate_maximum_sizes(meta model)
# ---------------------------------------------------------------------------------------------------------------


def _accelerate_bytes(name: str, cli: bool = False) -> tuple[int, int]:
    """(total bytes accelerate sizes the fp32 model at, of which buffer bytes): ``calculate_maximum_sizes`` counts
    every parameter once (tied weights too) plus every buffer, persistent or not (llama's rotary ``inv_freq``)."""
    model = _meta_model(name, cli)
    total, _largest = calculate_maximum_sizes(model)
    buffers = sum(b.numel() * b.element_size() for _, b in model.named_buffers())
    return total, buffers


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("name", SHIPPED)
def test_fp32_unsharded_states_equal_accelerates_estimate_but_for_buffers_and_step_scalars(name, ranks):
    """accelerate's float32 row: model 4P, gradients 4P, Adam 8P, and "step" 16P (the sum, which is what
    ``accelerate estimate-memory`` prints as "Training using Adam": the max of the four). Sweeper's single-rank
    and DDP states are the same 4P + 4P + 8P. Two exact differences: accelerate sizes the model with its buffers
    (B bytes: not parameters, no gradient, no Adam state, yet multiplied by 4 in its step), and sweeper counts
    Adam's fp32 ``step`` scalar per parameter tensor (4 bytes × tensors)."""
    arch = _arch(name)
    total, buf = _accelerate_bytes(name)
    assert total == 4 * arch.total_params + buf
    usage = estimate_training_usage(total, "float32")
    st = _states(_spec(name, ranks_per_node=ranks), arch)
    steps = 4 * arch.param_tensors
    assert usage["model"] == st.param_bytes + buf
    assert usage["gradients"] == st.grad_bytes + buf
    assert usage["optimizer"] == st.optimizer_state_bytes - steps + 2 * buf
    printed = max(usage.values())  # what the CLI prints
    assert printed == usage["step"] == st.param_bytes + st.grad_bytes + st.optimizer_state_bytes - steps + 4 * buf


@pytest.mark.parametrize("name", SHIPPED)
def test_mixed_precision_differs_from_accelerate_in_the_gradients_and_in_what_the_cli_prints(name):
    """HF autocast (``bf16=True`` over fp32 weights), which is what accelerate's "bfloat16"/"float16" rows assume
    ("weights stored in FP16 and FP32"): weights 4P and Adam 8P agree. Two differences:

    * gradients: accelerate counts 1.5 × 4P (fp32 gradients + a 16-bit copy "from weight gradient + computation");
      autocast's gradients land in the fp32 ``param.grad`` (4P). The 16-bit copies autocast does make are of the
      projection weights only (not embeddings, norms or biases), and they are activations of the forward
      (sweeper's ``autocast_weight_copies`` term, 2 × ``linear_params``), not model states;
    * the number ``accelerate estimate-memory`` prints is ``max(model, gradients, optimizer, step)``, which for
      mixed precision is the optimizer's 8P: half of the 16P the rank holds at the step."""
    arch = _arch(name)
    total, buf = _accelerate_bytes(name)
    usage = estimate_training_usage(total, "bfloat16")
    assert estimate_training_usage(total, "float16") == usage
    spec = _spec(name, precision="bf16", ranks_per_node=2)
    st = _states(spec, arch)
    steps = 4 * arch.param_tensors
    assert usage["model"] == st.param_bytes + buf
    assert usage["optimizer"] == st.optimizer_state_bytes - steps + 2 * buf
    assert usage["gradients"] == st.grad_bytes + buf + total // 2  # the extra 16-bit copy of everything
    copies = _forward_backward_terms(spec, arch)["autocast_weight_copies"]
    assert copies == 2 * arch.linear_params
    assert total // 2 - copies == 2 * (arch.total_params - arch.linear_params) + buf // 2
    printed = max(usage.values())
    assert printed == usage["optimizer"]
    assert st.param_bytes + st.grad_bytes + st.optimizer_state_bytes - steps == 2 * (printed - 2 * buf)


@pytest.mark.parametrize("name", SHIPPED)
def test_accelerates_cli_sizes_the_base_model_without_the_output_projection(name):
    """``accelerate estimate-memory`` builds ``AutoModel.from_config`` (``create_empty_model``): the base model, with
    no LM head. For an untied model it leaves the V×h output projection out of every number (16·V·h bytes of its
    fp32 training estimate); for a tied one the base model holds the shared embedding and nothing is missing.
    Reproduced from the CLI's construction, offline (the CLI itself downloads the config from the Hub); the tests
    above size ``AutoModelForCausalLM``, what the Trainer trains."""
    arch = _arch(name)
    cli, buf = _accelerate_bytes(name, cli=True)
    assert cli == 4 * (arch.total_params - arch.lm_head_params) + buf
    full, full_buf = _accelerate_bytes(name)
    assert full_buf == buf
    gap = estimate_training_usage(full, "float32")["step"] - estimate_training_usage(cli, "float32")["step"]
    assert gap == 16 * arch.lm_head_params == (0 if arch.tied else 16 * arch.vocab * arch.hidden)
