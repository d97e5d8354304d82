"""The CPU matmul peak, measured once per host and reused (sweeper.job.cpu_peak): a real measurement, a real cache
file in tmp_path; the clock is passed in to age the entry."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sweeper.job.cpu_peak import CACHE_ENV, MAX_AGE_S, cache_file, cpu_peak, host_key, measure_cpu_peak
from sweeper.results.mfu import Peak


class Counting:
    """The real measurement (shortened to 50 ms), counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, dtype: str) -> Peak:
        self.calls += 1
        return measure_cpu_peak(dtype, n=256, seconds=0.05)


def test_the_first_point_measures_and_the_next_ones_reuse_the_same_number_and_words(tmp_path: Path):
    path, measure = tmp_path / "cpu_peak.json", Counting()
    first = cpu_peak("fp32", measure, path)
    again = cpu_peak("fp32", measure, path, now=time.time() + 3600)
    assert measure.calls == 1 and first == again and first.flops > 0
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert first.source.startswith("measured: fp32 matmul 256x256, ")
    assert first.source.endswith(f" on {day}, reused on this host for 7 days")
    stored = json.loads(path.read_text())
    import torch

    assert list(stored) == [host_key("fp32", torch.get_num_threads())]
    # another dtype is another entry
    cpu_peak("bf16", measure, path)
    assert measure.calls == 2 and len(json.loads(path.read_text())) == 2


def test_an_entry_older_than_seven_days_is_measured_again(tmp_path: Path):
    path, measure = tmp_path / "cpu_peak.json", Counting()
    t0 = time.time()
    cpu_peak("fp32", measure, path, now=t0)
    cpu_peak("fp32", measure, path, now=t0 + MAX_AGE_S - 60)
    assert measure.calls == 1
    cpu_peak("fp32", measure, path, now=t0 + MAX_AGE_S + 60)
    assert measure.calls == 2
    cpu_peak("fp32", measure, path, now=t0 - 60)  # a clock that went back: not trusted
    assert measure.calls == 3


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"k": 3}', None])
def test_a_corrupt_or_missing_file_is_measured_over_and_rewritten(tmp_path: Path, content: str | None):
    path, measure = tmp_path / "sub" / "cpu_peak.json", Counting()
    if content is not None:
        path.parent.mkdir()
        path.write_text(content)
    peak = cpu_peak("fp32", measure, path)
    assert measure.calls == 1 and peak.flops > 0
    assert cpu_peak("fp32", measure, path) == peak and measure.calls == 1
    leftovers = [p.name for p in path.parent.iterdir() if p.name != path.name]
    assert leftovers == []  # no temp file left beside it


def test_a_bad_entry_under_the_right_key_is_measured_over(tmp_path: Path):
    import torch

    path, measure = tmp_path / "cpu_peak.json", Counting()
    key = host_key("fp32", torch.get_num_threads())
    path.write_text(json.dumps({key: {"flops": "lots", "source": "x", "measured_at": time.time()}}))
    assert cpu_peak("fp32", measure, path).flops > 0 and measure.calls == 1


def test_an_unwritable_cache_still_gives_a_peak(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    measure = Counting()
    peak = cpu_peak("fp32", measure, blocker / "cpu_peak.json")
    assert peak.flops > 0 and measure.calls == 1


def test_the_cache_file_follows_sweeper_cache_dir_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "a"))
    assert cache_file() == tmp_path / "a" / "cpu_peak.json"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_file() == tmp_path / "x" / "sweeper" / "cpu_peak.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_file() == Path.home() / ".cache" / "sweeper" / "cpu_peak.json"
