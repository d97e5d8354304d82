"""The pure parts of benchmarks/plan_peers.py (benchmarks/plan_peers_cases.py): Kendall's tau, the relative error,
the optimizer label, the table's cells, and the sweeps it measures. No torch, no ranks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from plan_peers_cases import SWEEPS, cell, kendall_tau, optim_label, rel


def test_kendall_tau_is_one_for_the_same_order_and_minus_one_for_the_reverse():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0


def test_kendall_tau_b_counts_ties_as_neither_and_corrects_for_them():
    # pairs: (1,2) concordant, (1,3) concordant, (2,3) tied in x: tau-b = 2 / sqrt(3 * 2)
    assert kendall_tau([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / 6**0.5)
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # one discordant pair of six


def test_kendall_tau_is_undefined_when_one_side_is_constant_or_too_short():
    assert kendall_tau([5, 5, 5], [1, 2, 3]) is None
    assert kendall_tau([1], [1]) is None
    with pytest.raises(ValueError):
        kendall_tau([1, 2], [1])


def test_rel_and_the_cell_of_a_number_or_a_footnote():
    assert rel(110, 100) == pytest.approx(0.1)
    assert rel(None, 100) is None and rel(1, 0) is None
    keys: list[str] = []
    assert cell(2048, 1024, None, keys).split() == ["2", "+100.0%"]
    assert cell(None, 1024, "why-a", keys).strip() == "n/a [1]"
    assert cell(None, 1024, "why-b", keys).strip() == "n/a [2]"
    assert cell(None, 1024, "why-a", keys).strip() == "n/a [1]" and keys == ["why-a", "why-b"]
    assert cell(None, 1024, None, keys).strip() == "-"


def test_optim_label_names_the_trainers_default_and_the_optim_args():
    assert optim_label({}) == "adamw_torch_fused"
    assert optim_label({"optim": "sgd", "optim_args": "momentum=0.9"}) == "sgd momentum=0.9"


def test_every_case_of_issue_18_is_a_sweep():
    assert {"optim", "optim-momentum", "offload-cpu", "accum", "accum-fsdp", "u24", "u25", "tiny", "gpt2"} <= set(
        SWEEPS
    )
    assert any("optim_args" in o for o in SWEEPS["optim-momentum"][0])
    assert "grad_accum=2" in SWEEPS["accum"][0] and "grad_accum=2" in SWEEPS["accum-fsdp"][0]
