"""One per-host cache: ``SWEEPER_CACHE_DIR`` moves all three of its files (it moved two of three before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.capacity.hostcomm import comm_cache_file
from sweeper.job.cpu_peak import cache_file
from sweeper.paths import CACHE_ENV, cache_dir
from sweeper.point.rules.ta_schema import cache_path, installed_transformers


def _files() -> list[Path]:
    return [cache_file(), comm_cache_file(), cache_path(installed_transformers())]


def test_sweeper_cache_dir_moves_every_per_host_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "moved"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert {f.parent for f in _files()} == {tmp_path / "moved"}
    monkeypatch.delenv(CACHE_ENV)
    assert {f.parent for f in _files()} == {tmp_path / "xdg" / "sweeper"} == {cache_dir()}
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "sweeper"
