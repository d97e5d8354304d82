"""The frontier with ties: throughput is an interval from the step-time spread, and overlapping intervals are ties
that the medians never break (docs/report.md, sweeper.results.frontier)."""

import itertools
import random

import pandas as pd

from sweeper.results.frontier import mark_frontier, pareto_frontier, throughput_interval, throughput_ties
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame

MIB = 2**20


def point(pid: str, median: float, p10: float, p90: float, mem: int, steps: int = 8, tokens: int = 512) -> Record:
    """An ok point of ``tokens`` tokens per step per device: tokens/s per device = tokens / median step time."""
    return Record(
        sweep_id="sw-ties",
        point_id=pid,
        status="ok",
        overrides=[f"seed={pid}"],
        metrics={
            "step_time_s_median": median,
            "step_time_s_p10": p10,
            "step_time_s_p90": p90,
            "timed_steps": steps,
            "tokens_per_s_per_device": tokens / median,
            "peak_mem_bytes": mem,
        },
    )


def frame(*records: Record) -> pd.DataFrame:
    return records_to_frame(list(records)).set_index("point_id", drop=False)


def test_overlapping_spreads_never_split_on_median_order_alone():
    # the same two configurations measured twice: the medians swap, the spreads overlap both times, memory differs
    for fast_median, slow_median in [(0.100, 0.104), (0.104, 0.100)]:
        df = frame(
            point("aaaa00000001", fast_median, 0.095, 0.110, 10 * MIB),
            point("aaaa00000002", slow_median, 0.096, 0.112, 12 * MIB),
        )
        # a tie on throughput: the one with strictly less memory dominates, whichever median is higher
        assert df["on_frontier"].to_dict() == {"aaaa00000001": True, "aaaa00000002": False}
        assert df.loc["aaaa00000001", "frontier_tie_with"] == "aaaa00000002"
        assert pd.isna(df.loc["aaaa00000002", "frontier_tie_with"])  # not on the frontier: not listed


def test_disjoint_spreads_rank_as_before():
    df = frame(
        point("bbbb00000001", 0.100, 0.098, 0.102, 12 * MIB),  # faster, more memory: frontier
        point("bbbb00000002", 0.200, 0.195, 0.205, 10 * MIB),  # slower, less memory: frontier
        point("bbbb00000003", 0.200, 0.195, 0.205, 13 * MIB),  # slower and more memory than 1: dominated
        point("bbbb00000004", 0.150, 0.148, 0.152, 12 * MIB),  # same memory as 1, measurably slower: dominated
    )
    assert df["on_frontier"].tolist() == [True, True, False, False]
    assert df["on_frontier"].tolist() == pareto_frontier(df["tokens_per_s_per_device"], df["peak_mem_bytes"])
    # 3 has 2's spread: tied with 2, but with more memory (so dominated); listed on 2's row only
    assert df["frontier_tie_with"].to_dict() == {
        "bbbb00000001": None,
        "bbbb00000002": "bbbb00000003",
        "bbbb00000003": None,
        "bbbb00000004": None,
    }


def test_equal_memory_and_overlapping_spreads_are_both_on_the_frontier_marked_tied():
    df = frame(
        point("cccc00000001", 0.100, 0.090, 0.120, 10 * MIB),
        point("cccc00000002", 0.105, 0.095, 0.125, 10 * MIB),
        point("cccc00000003", 0.300, 0.290, 0.310, 20 * MIB),  # slower and bigger: dominated by both
    )
    assert df["on_frontier"].tolist() == [True, True, False]
    assert df.loc["cccc00000001", "frontier_tie_with"] == "cccc00000002"
    assert df.loc["cccc00000002", "frontier_tie_with"] == "cccc00000001"


def test_a_point_without_a_spread_is_a_zero_width_interval():
    few = point("dddd00000001", 0.100, 0.050, 0.200, 10 * MIB, steps=2)  # 2 timed steps: spread ignored
    bare = point("dddd00000002", 0.100, 0.050, 0.200, 10 * MIB)
    del bare.metrics["step_time_s_p10"], bare.metrics["step_time_s_p90"]
    df = frame(few, bare)
    low, high = throughput_interval(df)
    assert low.tolist() == high.tolist() == df["tokens_per_s_per_device"].tolist()


def test_intervals_use_tokens_per_step_so_different_batches_compare_fairly():
    # 1024 tokens per step at 0.2 s = 512 tokens per step at 0.1 s: the same throughput, a tie
    df = frame(point("eeee00000001", 0.1, 0.09, 0.11, MIB), point("eeee00000002", 0.2, 0.18, 0.22, MIB, tokens=1024))
    low, high = throughput_interval(df)
    assert low.iloc[0] == low.iloc[1] and high.iloc[0] == high.iloc[1]
    assert df["on_frontier"].all()


def brute_force(lo, hi, mem):
    def dominates(a, b):
        faster = lo[a] > hi[b]
        tied = not faster and not lo[b] > hi[a]
        return (faster and mem[a] <= mem[b]) or (tied and mem[a] < mem[b])

    # from the least memory up: off the frontier when a frontier point with less memory, or any point with the
    # same memory, dominates it
    n = len(mem)
    on = [False] * n
    for b in sorted(range(n), key=lambda i: mem[i]):
        on[b] = not any(
            dominates(a, b) for a in range(n) if a != b and (on[a] if mem[a] < mem[b] else mem[a] == mem[b])
        )
    return on


def test_a_point_dominated_only_through_a_dominated_point_stays_on_the_frontier():
    """A chain of ties: the wide-interval 2 is tied with 1 (less memory: 2 is dominated) and with 3 (3 has more
    memory), but 3 is measurably faster than 1, the only frontier point below it: 3 is on the frontier."""
    lo, hi, mem = [5.0, 5.5, 9.1], [6.0, 9.2, 15.0], [4.45, 4.71, 5.67]
    t = [(a + b) / 2 for a, b in zip(lo, hi, strict=True)]
    assert pareto_frontier(t, mem, lo, hi) == [True, False, True]
    assert brute_force(lo, hi, mem) == [True, False, True]
    # and 4, tied with 3 and with more memory, is dominated by 3, a frontier point
    assert pareto_frontier([*t, 12.0], [*mem, 6.0], [*lo, 10.0], [*hi, 14.0]) == [True, False, True, False]


def test_matches_brute_force_and_is_never_empty():
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(1, 10)
        t = [rng.choice([1.0, 2.0, 3.0, 4.0]) for _ in range(n)]
        lo = [x - rng.choice([0.0, 0.4, 1.0]) for x in t]
        hi = [x + rng.choice([0.0, 0.4, 1.0]) for x in t]
        m = [rng.choice([1.0, 2.0, 3.0]) for _ in range(n)]
        got = pareto_frontier(t, m, lo, hi)
        assert got == brute_force(lo, hi, m), (t, lo, hi, m)
        assert any(got)
        ties = throughput_ties(t, m, lo, hi)
        for a, b in itertools.permutations(range(n), 2):
            assert (b in ties[a]) == (lo[a] <= hi[b] and lo[b] <= hi[a])


def test_the_order_of_the_rows_does_not_change_the_verdicts():
    records = [
        point("ffff00000001", 0.100, 0.090, 0.120, 10 * MIB),
        point("ffff00000002", 0.105, 0.095, 0.125, 10 * MIB),
        point("ffff00000003", 0.099, 0.098, 0.101, 11 * MIB),
        point("ffff00000004", 0.050, 0.049, 0.051, 30 * MIB),
    ]
    first = frame(*records)[["on_frontier", "frontier_tie_with"]].sort_index()
    for perm in itertools.permutations(records):
        again = frame(*perm)[["on_frontier", "frontier_tie_with"]].sort_index()
        pd.testing.assert_frame_equal(first, again)
    assert mark_frontier(frame(*records)).tolist() == [True, True, False, True]
