"""The memory model against MemTracker's measured peak on real CPU points (2 gloo ranks or 1, real HF Trainer).

The issue's CPU grid is tiny and a GPT-2-shaped model x gc x two batch sizes x fp32/bf16 x 1 and 2 ranks;
``benchmarks/plan_accuracy.py`` runs all 32 and prints the table (largest error 2.1 %). Here, to keep the suite
short: two GPT-2-shaped points that between them take both levels of gc, batch, precision and ranks;
the tiny model is checked by the suite's other sweeps (``test_sweep_fsdp_gc``, ``test_sweep_zero``: DDP, FSDP,
ZeRO-1/2/3, gc on and off, through ``tests/plan_checks.py``). Bound: 15 %.
"""

from __future__ import annotations

import pytest
import yaml

from sweeper.capacity.arch import Arch
from sweeper.capacity.memory import estimate_memory
from sweeper.config.spec import PointSpec
from sweeper.launchers.local import run_point
from sweeper.paths import conf_dir
from sweeper.results.sweepdir import SweepDir
from tests.unit.specs import make_spec

pytestmark = pytest.mark.slow

#: A GPT-2-shaped model small enough for a CPU step in milliseconds (gpt2 model_type: LayerNorm, GeLU, dropout,
#: learned positions, tied embeddings).
GPT2_SHAPED = {
    "name": "gpt2-shaped",
    "model_type": "gpt2",
    "decoder_layer": "GPT2Block",
    "config": {"n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 4000, "max_position_embeddings": 256},
}
STEPS = dict(warmup_steps=1, timed_steps=3, memory_steps=1, profile_steps=0, profile_trace=False)
# (model, gc, batch, precision, ranks): every factor at both levels across the two points
GRID = [
    ("gpt2", False, 8, "fp32", 2),
    ("gpt2", True, 2, "bf16", 1),
]


def _spec(model: str, gc: bool, batch: int, precision: str, ranks: int) -> PointSpec:
    arch = GPT2_SHAPED if model == "gpt2" else yaml.safe_load((conf_dir() / "model" / "tiny.yaml").read_text())
    return make_spec(
        model=arch, gc=gc, per_device_batch_size=batch, precision=precision, ranks_per_node=ranks, device="cpu", **STEPS
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("plan_accuracy")
    out = []
    for point in GRID:
        spec = _spec(*point)
        record = run_point(spec, [f"point={point}"], SweepDir(sweep_dir, "plan-accuracy"))
        assert record.status == "ok", (point, record.reason)
        out.append((point, spec, record))
    return out


def test_predicted_peak_is_within_15_percent_of_memtracker_on_every_point(measured):
    errors = {}
    for point, spec, record in measured:
        predicted = estimate_memory(spec, Arch.from_config(spec.model_type, spec.model_config), "cpu").peak_bytes
        actual = record.metrics["peak_mem_bytes"]
        assert record.metrics["peak_mem_kind"].startswith("cpu_tensor"), record.metrics["peak_mem_kind"]
        errors[point] = (predicted - actual) / actual
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


def test_predicted_model_states_equal_the_measured_bytes_per_rank(measured):
    for point, spec, record in measured:
        states = estimate_memory(spec, Arch.from_config(spec.model_type, spec.model_config), "cpu").states
        m = record.metrics
        assert states.param_bytes == pytest.approx(m["param_bytes_per_rank"], rel=0.02), point
        assert states.grad_bytes == pytest.approx(m["grad_bytes_per_rank"], rel=0.02), point
        assert states.optimizer_state_bytes == pytest.approx(m["optimizer_state_bytes_per_rank"], rel=0.02), point
