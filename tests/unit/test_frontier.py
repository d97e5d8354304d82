"""The Pareto frontier: fastest configurations for each memory budget."""

import math
import random

import pandas as pd
import pytest

from sweeper.results.frontier import mark_frontier, pareto_frontier


def brute_force(t, m):
    def ok(x):
        return x is not None and math.isfinite(x)

    def dominates(j, i):
        return t[j] >= t[i] and m[j] <= m[i] and (t[j] > t[i] or m[j] < m[i])

    valid = [ok(a) and ok(b) for a, b in zip(t, m, strict=True)]
    return [valid[i] and not any(valid[j] and dominates(j, i) for j in range(len(t))) for i in range(len(t))]


def test_a_slower_point_with_more_memory_is_dominated():
    assert pareto_frontier([100.0, 80.0, 90.0], [10.0, 5.0, 12.0]) == [True, True, False]


def test_same_memory_slower_and_same_speed_more_memory_are_dominated():
    assert pareto_frontier([100.0, 90.0, 100.0], [10.0, 10.0, 11.0]) == [True, False, False]


def test_exact_duplicates_are_both_on_the_frontier():
    assert pareto_frontier([100.0, 100.0, 50.0], [10.0, 10.0, 20.0]) == [True, True, False]


def test_nan_and_none_are_never_on_the_frontier_and_never_dominate():
    # the NaN-memory point would dominate everything if it counted
    assert pareto_frontier([1000.0, 100.0, None, 50.0], [float("nan"), 10.0, 1.0, 5.0]) == [
        False,
        True,
        False,
        True,
    ]


def test_empty_and_single():
    assert pareto_frontier([], []) == []
    assert pareto_frontier([1.0], [1.0]) == [True]


def test_lengths_must_match():
    with pytest.raises(ValueError, match="2 values but memory has 3"):
        pareto_frontier([1.0, 2.0], [1.0, 2.0, 3.0])


def test_matches_brute_force_on_random_points_with_ties():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 12)
        t = [rng.choice([1.0, 2.0, 3.0, 4.0, None, float("nan")]) for _ in range(n)]
        m = [rng.choice([1.0, 2.0, 3.0, float("nan")]) for _ in range(n)]
        assert pareto_frontier(t, m) == brute_force(t, m), (t, m)


def test_mark_frontier_ignores_failed_rows():
    df = pd.DataFrame(
        {
            "status": ["ok", "ok", "oom", "error"],
            "tokens_per_s_per_device": [100.0, 50.0, 1e9, None],
            "peak_mem_bytes": [2**30, 2**31, 1, None],
        },
        index=[10, 11, 12, 12],  # duplicate labels must not confuse the assignment
    )
    assert mark_frontier(df).tolist() == [True, False, False, False]
    assert mark_frontier(df).index.tolist() == [10, 11, 12, 12]
