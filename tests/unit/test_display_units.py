"""The one module of display formats (:mod:`sweeper.units`): every number, size, percent, day count and boolean a
table, a sentence, a plan or a report writes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sweeper import units
from sweeper.units import GIB, MIB, MISSING


@pytest.mark.parametrize("v", [None, math.nan, np.nan, np.float64("nan"), pd.NA])
def test_missing_values_are_missing_and_shown_as_a_dash(v):
    assert units.missing(v)
    for fmt in (units.num, units.count, units.percent, units.days):
        assert fmt(v) == MISSING
    assert units.in_unit(v, "GiB") == MISSING
    assert units.yes_no(v) == "unknown"


@pytest.mark.parametrize("v", [0, 0.0, 1, "x", np.int64(3), False, np.array([1.0, math.nan])])
def test_values_are_not_missing(v):
    assert not units.missing(v)


@pytest.mark.parametrize(
    "v, text",
    [(1234.4, "1,234"), (1234, "1,234"), (123_456.0, "123,456"), (100, "100"), (99.96, "100"), (12.34, "12.3"),
     (0.5, "0.5"), (0.01234, "0.0123")],
)  # fmt: skip
def test_days(v, text):
    assert units.days(v) == text


def test_days_in_every_plan_table_are_the_one_formatter():
    """The deadline report printed 1,234 days as ``1.23e+03`` (its own formatter): both plan tables use units.days."""
    from sweeper.plan import deadline_report, table

    answers = pd.DataFrame(
        {
            "cluster": ["h100"],
            "status": ["met"],
            "nodes": [2],
            "world_size": [16],
            "engine": ["FSDP full_shard"],
            "gc": [True],
            "per_device_batch_size": [1],
            "predicted_tokens_per_s_per_device": [8000.0],
            "predicted_train_days": [1234.4],
            "predicted_gpu_hours": [473_000.0],
            "predicted_cost": [None],
        }
    )
    shown = deadline_report.display(answers)
    assert shown["days"].tolist() == ["1,234"]
    assert shown["nodes"].tolist() == ["2"] and shown["GPUs"].tolist() == ["16"]
    assert dict((h, f) for h, _, f in table._MAIN)["days"] is units.days


@pytest.mark.parametrize(
    "args, text",
    [((0.1234,), "12.3 %"), ((0.1234, 0), "12 %"), ((-0.041,), "-4.1 %"), ((0.041, 1, True), "+4.1 %"),
     ((0.041, 1, True, ""), "+4.1"), ((0.234, None), "23 %"), ((0.05, None), "5 %"), ((0.012, None), "1.2 %"),
     ((1.5, None), "150 %"), ((0.0996, None), "10 %")],
)  # fmt: skip
def test_percent(args, text):
    assert units.percent(*args) == text


@pytest.mark.parametrize(
    "n, unit, kw, text",
    [(3 * GIB, "GiB", {}, "3.00 GiB"), (1500 * GIB, "GiB", {}, "1,500.00 GiB"), (0, "GiB", {}, "0.00 GiB"),
     (1.23e-3 * GIB, "GiB", {"label": False}, "0.00123"), (5 * MIB + 512, "MiB", {"decimals": 3}, "5.000 MiB"),
     (80 * 10**9, "GB", {"decimals": 0}, "80 GB")],
)  # fmt: skip
def test_in_unit(n, unit, kw, text):
    assert units.in_unit(n, unit, **kw) == text


def test_size_text_and_peak_text_pick_mib_below_a_gib():
    assert units.size_text(5 * MIB) == "5.00 MiB"
    assert units.size_text(2.5 * GIB) == "2.50 GiB"
    assert units.peak_text(12_140_000) == "11.6 MiB"
    assert units.peak_text(3 * GIB) == "3.00 GiB"


def test_numbers_counts_and_booleans():
    assert units.num(1234.4) == "1,234"
    assert units.num(0.000123456) == "0.0001235"
    assert units.num("auto") == "auto"
    assert units.num(3 * GIB, GIB, 3, zeros=True) == "3.00"
    assert units.count(1234) == "1,234"
    assert (units.yes_no(True), units.yes_no(False), units.yes_no(None, "n/a")) == ("yes", "no", "n/a")
    assert (units.flag(True), units.flag(np.bool_(False))) == ("true", "false")
    with pytest.raises(KeyError):
        units.in_unit(1, "parsecs")
