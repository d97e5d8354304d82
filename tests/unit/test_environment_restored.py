"""tests/environment.py: a test's writes to ``os.environ`` never reach the next test or the processes it starts."""

from __future__ import annotations

import os

import pytest
from transformers import TrainingArguments

from tests.environment import restored_environment

_PROBE = "SWEEPER_TEST_ENV_PROBE"


def test_what_a_body_sets_changes_or_removes_is_put_back(monkeypatch, tmp_path):
    monkeypatch.setenv(_PROBE + "_KEPT", "before")
    monkeypatch.setenv(_PROBE + "_REMOVED", "here")
    monkeypatch.delenv(_PROBE, raising=False)
    with restored_environment():
        os.environ[_PROBE] = "leaked"
        os.environ[_PROBE + "_KEPT"] = "changed"
        del os.environ[_PROBE + "_REMOVED"]
    assert _PROBE not in os.environ
    assert os.environ[_PROBE + "_KEPT"] == "before"
    assert os.environ[_PROBE + "_REMOVED"] == "here"


def test_a_library_write_is_put_back_even_when_the_body_raises(monkeypatch, tmp_path):
    """transformers' TrainingArguments with fsdp exports FSDP_CPU_RAM_EFFICIENT_LOADING (one of the leaks found)."""
    monkeypatch.delenv("FSDP_CPU_RAM_EFFICIENT_LOADING", raising=False)
    with pytest.raises(RuntimeError), restored_environment():
        TrainingArguments(output_dir=str(tmp_path), fsdp="full_shard", use_cpu=True, report_to=[])
        assert "FSDP_CPU_RAM_EFFICIENT_LOADING" in os.environ  # the write the context must undo
        raise RuntimeError
    assert "FSDP_CPU_RAM_EFFICIENT_LOADING" not in os.environ


def test_every_test_runs_inside_it(request):
    assert "_environment_restored" in request.fixturenames
