"""Tests of ``tests/unit/test_gate_passthrough.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import json

import pytest

from sweeper.point.rules import ta_schema
from sweeper.point.rules.ta_schema import load_schema, training_args_schema
from tests.unit.specs import make_spec as spec


def test_the_field_list_comes_from_the_installed_transformers_and_is_cached_per_version(tmp_path):
    from importlib import metadata

    schema = load_schema(tmp_path)
    cached = ta_schema.cache_path(metadata.version("transformers"), tmp_path)
    assert cached.is_file() and schema.transformers == metadata.version("transformers")
    lr = schema.fields["learning_rate"]
    assert (lr.type, lr.default, lr.has_default) == ({"t": "float"}, 5e-05, True)
    assert schema.fields["lr_scheduler_type"].type["t"] == "choice"
    assert "constant" in schema.fields["lr_scheduler_type"].type["values"]
    # A second load reads the cache instead of asking transformers: a marker written into it is seen.
    data = json.loads(cached.read_text())
    data["fields"]["zz_marker"] = {"type": {"t": "int"}, "text": "int", "default": 1, "has_default": True}
    cached.write_text(json.dumps(data))
    assert "zz_marker" in load_schema(tmp_path).fields


@pytest.mark.parametrize("junk", ["{not json", '{"format": 999, "fields": {"x": {}}}'])
def test_a_corrupt_cache_is_rebuilt(tmp_path, junk):
    from importlib import metadata

    cached = ta_schema.cache_path(metadata.version("transformers"), tmp_path)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(junk)
    assert "learning_rate" in load_schema(tmp_path).fields
    assert "learning_rate" in json.loads(cached.read_text())["fields"]


def test_when_the_helper_cannot_run_the_gate_says_so_once_and_skips_only_name_and_type_checks(
    tmp_path, monkeypatch, capsys
):
    """A missing helper module (a real failed subprocess): one warning, the other rules still run."""
    from sweeper.config.target import Target
    from sweeper.point.gate import InvalidPoint, check

    monkeypatch.setattr(ta_schema, "HELPER", "sweeper.job.no_such_helper")
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path))
    with pytest.raises(ta_schema.SchemaUnavailable, match="no_such_helper"):
        load_schema(tmp_path)
    training_args_schema.cache_clear()
    try:
        check(spec(training_args={"not_a_field": 1}), Target())
        check(spec(training_args={"also_not_a_field": 1}), Target())
        assert capsys.readouterr().err.count("cannot read the installed TrainingArguments fields") == 1
        with pytest.raises(InvalidPoint, match="report_to"):  # what needs no field list is still refused
            check(spec(training_args={"report_to": ["wandb"]}), Target())
    finally:
        training_args_schema.cache_clear()
