"""Unit tests never write to the user's cache: the TrainingArguments field cache lives in pytest's temp dir; and no
unit test reads what another test measured on this host (the gloo link, the matmul peak): each starts with an empty
``SWEEPER_CACHE_DIR``, so its result does not depend on which integration tests ran before it."""

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


@pytest.fixture(autouse=True)
def _empty_host_cache(tmp_path, monkeypatch):
    """An empty host cache per test (``sweeper.capacity.hostcomm``, ``sweeper.job.cpu_peak``): the link and peak
    a test sees are the ones it wrote itself."""
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path / "host-cache"))
