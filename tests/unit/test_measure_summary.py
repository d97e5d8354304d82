"""Merging rank files: step statistics over the slowest rank, and which failure explains a point."""

from __future__ import annotations

import pytest

from sweeper.failures.attribution import _signal_from_log
from sweeper.results.metrics import metrics_from_ranks, step_statistics
from sweeper.results.outcome import summarize_ranks
from tests.unit.specs import make_spec

# torchrun's summary when rank 1 was SIGKILLed and rank 0 then failed in a collective (observed first)
TORCHRUN_SUMMARY = """
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 28743)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 28743
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 28742)
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""


def test_step_time_is_the_slowest_rank_per_step_then_median_p10_p90():
    stats = step_statistics([[0.10, 0.20, 0.30, 0.40, 0.50], [0.12, 0.18, 0.35, 0.40, 0.90]])
    # per-step max: 0.12, 0.20, 0.35, 0.40, 0.90
    assert stats["timed_steps"] == 5
    assert stats["step_time_s_median"] == pytest.approx(0.35)
    assert stats["step_time_s_p10"] == pytest.approx(0.12 + 0.4 * (0.20 - 0.12))
    assert stats["step_time_s_p90"] == pytest.approx(0.40 + 0.6 * (0.90 - 0.40))
    assert step_statistics([[], []]) is None


def test_the_killed_rank_is_the_cause_even_when_torchrun_observed_the_survivor_first():
    assert _signal_from_log(TORCHRUN_SUMMARY) == "SIGKILL"


def test_sigterm_alone_is_reported_as_sigterm():
    assert _signal_from_log("  traceback : Signal 15 (SIGTERM) received by PID 7") == "SIGTERM"
    assert _signal_from_log("nothing here") is None


def test_an_unknown_exit_code_is_a_failure_not_a_crash_of_the_summary():
    """``finish(returncode=None)`` ("None if unknown") reaches the status decision: no ``None < 0``."""
    out = summarize_ranks(make_spec(), [], returncode=None, timed_out=False, log_tail="")
    assert out["status"] == "error" and out["reason"]
    assert out["failure"]["exit_code"] is None


def test_throughput_of_a_batch_still_auto_is_refused_by_name_not_computed_from_the_text():
    """``per_device_batch_size=auto`` is measured at the batch found (``spec.with_batch``); a spec still holding
    ``"auto"`` must not multiply the string (``"auto" * seq_len``)."""
    ranks = [{"rank": 0, "step_times_s": [0.1, 0.2, 0.3]}]
    with pytest.raises(ValueError, match="per_device_batch_size='auto'"):
        metrics_from_ranks(make_spec(per_device_batch_size="auto"), ranks)
    assert metrics_from_ranks(make_spec(per_device_batch_size="auto").with_batch(2), ranks)["samples_per_s"] > 0


def test_a_loss_of_exactly_0_at_every_step_is_flagged_and_said_in_the_report():
    import pandas as pd

    from sweeper.report.notes import zero_loss_notes

    zero = metrics_from_ranks(make_spec(), [{"rank": 0, "losses": [0.0, 0.0, 0.0]}])
    real = metrics_from_ranks(make_spec(), [{"rank": 0, "losses": [6.9, 0.0, 6.8]}])
    assert zero["zero_loss"] is True and real["zero_loss"] is False
    assert "zero_loss" not in metrics_from_ranks(make_spec(), [{"rank": 0}])  # nothing logged: nothing claimed
    df = pd.DataFrame(
        {
            "status": ["ok", "ok", "oom"],
            "point_id": ["a1", "b2", "c3"],
            "zero_loss": [True, False, True],
            "gc": [1, 0, 1],
        }
    )
    (note,) = zero_loss_notes(df, ["gc"])
    assert "point `a1`" in note and "trained on no signal" in note
    assert zero_loss_notes(df.drop(columns="zero_loss")) == []
