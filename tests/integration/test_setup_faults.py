"""Faults of sweeper's own set-up code in a rank (its read of ``spec.json``, sweeper.job.trainer_setup) are
``internal``, never the user's ``config`` nor a crash: real local points (2 gloo ranks, the real HF Trainer), the
faults injected with ``SWEEPER_FAULT_INJECT`` (docs/failures.md)."""

from __future__ import annotations

import pytest

from sweeper.job.faults import FAULT_ENV
from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]


@pytest.mark.parametrize(
    ("site", "point"),
    [("trainer-args", ["fsdp=none"]), ("trainer-shim", ["fsdp=full_shard"])],
)
def test_a_fault_in_sweeper_s_own_trainer_set_up_is_internal_not_config(site, point, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, site)  # the ranks inherit it
    run = run_sweeper([*point, *STEPS], tmp_path)
    assert run.proc.returncode == 1, run.output[-3000:]
    (r,) = run.records()
    assert (r.status, r.error_kind) == ("error", "internal"), r.reason
    assert f"sweeper's own {site} code failed" in r.reason
    assert r.failure["site"] == site and r.failure["phase"] == "setup"


def test_a_fault_reading_spec_json_leaves_each_ranks_file_and_is_internal_not_a_crash(tmp_path, monkeypatch):
    """The read runs first thing in the rank, before the rank's work: the rank still writes its rank file with the
    failure and the site, so the driver records ``internal`` rather than a rank that died without a word."""
    monkeypatch.setenv(FAULT_ENV, "rank-spec")
    run = run_sweeper(STEPS, tmp_path)
    assert run.proc.returncode == 1, run.output[-3000:]
    (r,) = run.records()
    assert (r.status, r.error_kind) == ("error", "internal"), r.reason
    assert "sweeper's own rank-spec code failed" in r.reason and "InjectedFault" in r.reason
    assert r.failure["site"] == "rank-spec" and r.failure["phase"] == "setup" and r.failure["step"] is None
    assert "ranks_missing" not in r.failure  # every rank wrote its file: no rank died without a word
