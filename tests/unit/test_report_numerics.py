"""The report's per-step loss comparison (issue 34, item 4): points of one model, seed and global batch must train
the same losses up to their precision; a point that departs is named first, with the size of the departure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sweeper.report.build import build_report
from sweeper.report.numerics import TOLERANCE, departures
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from tests.unit.specs import make_spec
from tests.unit.test_row import ok_record

LOSSES = [6.9160, 6.9184, 6.9095, 6.9215, 6.9186]


def record(pid: str, losses: list[float | None], **overrides) -> Record:
    """An ok record of the point ``overrides`` describes (the row tests' factory), with per-step ``losses``."""
    over = [f"{k}={v}" for k, v in overrides.items()]
    made = ok_record(make_spec(**overrides), over, pid, step_time_s_median=0.1)
    return dataclasses.replace(made, series={"loss": losses, "step": list(range(1, len(losses) + 1))})


def test_points_of_one_global_batch_are_compared_and_a_departure_is_flagged_with_its_size():
    one_rank = record("aaaaaaaaaaa1", LOSSES, ranks_per_node=1)
    tp = record("aaaaaaaaaaa2", [x + 2e-5 for x in LOSSES], tp=2, zero=2)  # dp=1: the same 4 samples a step
    wrong = record("aaaaaaaaaaa3", [LOSSES[0], *(x + 0.02 for x in LOSSES[1:])], sp=2, zero=2)
    ddp = record("aaaaaaaaaaa4", LOSSES)  # dp=2: 8 samples a step, another group (alone: not compared)
    found = {d.point_id: d for d in departures([one_rank, tp, wrong, ddp])}
    assert set(found) == {"aaaaaaaaaaa2", "aaaaaaaaaaa3"}
    assert found["aaaaaaaaaaa2"].reference_id == "aaaaaaaaaaa1" and not found["aaaaaaaaaaa2"].flagged
    assert found["aaaaaaaaaaa3"].flagged and abs(found["aaaaaaaaaaa3"].max_abs - 0.02) < 1e-9
    assert found["aaaaaaaaaaa3"].tolerance == TOLERANCE["fp32"] and found["aaaaaaaaaaa3"].steps == 5


def test_a_bf16_point_gets_the_tolerance_of_its_precision_against_the_fp32_reference():
    ref = record("bbbbbbbbbbb1", LOSSES, ranks_per_node=1, precision="bf16")
    fp32 = record("bbbbbbbbbbb2", LOSSES, ranks_per_node=1)
    bf16 = record("bbbbbbbbbbb3", [x + 0.01 for x in LOSSES], tp=2, zero=2, precision="bf16")
    found = {d.point_id: d for d in departures([ref, fp32, bf16])}
    assert all(d.reference_id == "bbbbbbbbbbb2" for d in found.values())  # the fp32 point is the reference
    assert found["bbbbbbbbbbb3"].tolerance == TOLERANCE["bf16"] and not found["bbbbbbbbbbb3"].flagged


def test_a_model_with_dropout_is_never_compared():
    drop = {"config": {"max_position_embeddings": 2048, "attention_dropout": 0.1}}
    a = record("ccccccccccc1", LOSSES, ranks_per_node=1, model=drop)
    b = record("ccccccccccc2", [x + 1 for x in LOSSES], tp=2, zero=2, model=drop)
    assert departures([a, b]) == []


def test_the_report_names_the_point_that_trains_other_numerics(tmp_path: Path):
    sweep = SweepDir(tmp_path)
    sweep.write_record(record("ddddddddddd1", LOSSES, ranks_per_node=1))
    sweep.write_record(record("ddddddddddd2", [x + 0.5 for x in LOSSES], tp=2, zero=2))
    build_report(tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "## Numerics" in text and "1 of 1 point(s) train other numerics" in text and "DIFFER" in text
    assert "5.00e-01" in text


def test_a_step_without_a_logged_loss_is_left_out_not_a_crash():
    a = record("eeeeeeeeeee1", [None, *LOSSES[1:]], ranks_per_node=1)
    b = record("eeeeeeeeeee2", LOSSES, tp=2, zero=2)
    (d,) = departures([a, b])
    assert d.steps == 4 and not d.flagged
