"""Tests of ``tests/unit/test_planning_gate.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sweeper.point.lifecycle import Prepared, begin, internal_error, predicted_for, target_for
from sweeper.results.record import read_record
from sweeper.results.sweepdir import RESULT_FILE, SweepDir
from tests.unit.test_planning_gate import SMALL, cpu_spec


def test_begin_records_a_pruned_point_with_its_predicted_numbers_and_launches_nothing(tmp_path: Path):
    spec = cpu_spec(per_device_batch_size=64, prune=True)
    target = target_for(spec, "local", SMALL)
    record = begin(spec, ["per_device_batch_size=64"], SweepDir(tmp_path, "sw"), target)
    assert not isinstance(record, Prepared)
    assert record.status == "pruned" and record.failure["rule"] == "C01"
    assert record.predicted == predicted_for(spec, target)
    assert record.predicted["fits"] is False and record.predicted["peak_bytes"] > 0
    pdir = SweepDir(tmp_path).point(record.point_id)
    assert sorted(p.name for p in pdir.iterdir()) == [RESULT_FILE]  # no spec.json: never prepared
    assert read_record(pdir / RESULT_FILE).predicted == record.predicted


def test_a_resumed_pruned_point_runs_once_it_is_no_longer_pruned_and_keeps_the_old_record(tmp_path: Path):
    """prune, cluster and plan are not part of a point's identity: resuming with prune=false decides again."""
    spec = cpu_spec(per_device_batch_size=64, prune=True)
    first = begin(spec, [], SweepDir(tmp_path, "sw"), target_for(spec, "local", SMALL))
    again = begin(spec, [], SweepDir(tmp_path, "sw"), target_for(spec, "local", SMALL))
    assert first.status == again.status == "pruned"
    pdir = SweepDir(tmp_path).point(first.point_id)
    assert not list(pdir.glob("result.*.json"))  # still pruned: the record stays, nothing moved
    unpruned = dataclasses.replace(spec, prune=False)
    prepared = begin(unpruned, [], SweepDir(tmp_path, "sw"), target_for(unpruned, "local", SMALL))
    assert isinstance(prepared, Prepared) and prepared.point_id == first.point_id
    assert [read_record(p).status for p in pdir.glob("result.*.json")] == ["pruned"]


def test_refused_and_internal_error_records_carry_predicted_numbers(tmp_path: Path):
    bad = cpu_spec(fsdp="full_shard", zero=2)  # G04: two sharding engines
    refused = begin(bad, ["fsdp=full_shard", "zero=2"], SweepDir(tmp_path, "sw"), target_for(bad, "local", SMALL))
    assert refused.status == "invalid" and refused.predicted["device_mem_bytes"] == int(0.05 * 2**30)
    spec = cpu_spec(seed=3)
    err = internal_error(spec, ["seed=3"], SweepDir(tmp_path, "sw"), RuntimeError("boom"), cluster=SMALL)
    assert err.status == "error" and err.predicted == predicted_for(spec, target_for(spec, "local", SMALL))
    assert read_record(SweepDir(tmp_path).point(err.point_id) / RESULT_FILE).predicted["fits"] is True
