"""Faults of sweeper's own set-up code in a rank (sweeper.job.trainer_setup) are ``internal``, never the user's
``config``: real local points (2 gloo ranks, the real HF Trainer), the faults injected with ``SWEEPER_FAULT_INJECT``
(docs/failures.md)."""

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
