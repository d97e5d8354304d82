"""The fast tier (``pytest tests/unit``): unit tests and golden files, and no process started (``tests/spawn_guard.py``
fails a test that starts one). They never write to the user's cache: the ``TrainingArguments`` fields are read once,
in this process, into the session's cache; and no unit test reads what another test measured on this host (the gloo
link, the matmul peak): each starts with an empty ``SWEEPER_CACHE_DIR``, so its result does not depend on which
integration tests ran before it."""

from __future__ import annotations

import json

import matplotlib.font_manager  # noqa: F401  (see below)
import pytest

from sweeper.point.rules import ta_schema
from sweeper.point.rules.ta_schema import training_args_schema

# matplotlib builds its font cache the first time it is imported on a machine, by running ``fc-list``: imported here,
# at collection (outside the guard), so the report tests that draw a PNG start no process on a fresh machine either
# (a fresh clone's ``pytest tests/unit`` failed 33 of them; in the full tier an integration test had built the cache).


@pytest.fixture(autouse=True, scope="session")
def _schema_cache(tmp_path_factory):
    """The installed ``TrainingArguments`` fields, read once for the session by the helper's own code run in this
    process (``sweeper.job.ta_fields.fields``, what ``python -m sweeper.job.ta_fields`` prints) and loaded through the
    real cache (:func:`~sweeper.point.rules.ta_schema.load_schema` reads the file it would have written): the gate's
    name and type checks run on the real field list without a helper process."""
    from sweeper.job.ta_fields import fields

    directory = tmp_path_factory.getbasetemp() / "ta-cache"
    path = ta_schema.cache_path(ta_schema.installed_transformers(), directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields()))
    mp = pytest.MonkeyPatch()
    mp.setenv("SWEEPER_CACHE_DIR", str(directory))
    training_args_schema.cache_clear()
    assert training_args_schema() is not None  # loaded from the file: every later call gets it from memory
    mp.undo()
    yield
    training_args_schema.cache_clear()


@pytest.fixture(autouse=True)
def _empty_host_cache(tmp_path, monkeypatch):
    """An empty host cache per test (``sweeper.capacity.hostcomm``, ``sweeper.job.cpu_peak``): the link and peak
    a test sees are the ones it wrote itself."""
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path / "host-cache"))
