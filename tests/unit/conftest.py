"""Unit tests never write to the user's cache: the TrainingArguments field cache lives in pytest's temp dir."""

from __future__ import annotations

import pytest

from sweeper.point.rules.ta_schema import training_args_schema


@pytest.fixture(autouse=True, scope="session")
def _schema_cache(tmp_path_factory):
    """One TrainingArguments field cache for the whole session (built once by the real helper process)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    training_args_schema.cache_clear()
    yield
    training_args_schema.cache_clear()
    mp.undo()
