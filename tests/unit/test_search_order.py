"""The frontier search's decisions on synthetic predictions (sweeper.search.order): the predicted fronts and their
order, "surely dominated" against the report's rule, the margins, the screen's cost rule."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from sweeper.results.frontier import pareto_frontier
from sweeper.search.order import (
    STANDINGS,
    Guess,
    Measured,
    crowding,
    front_order,
    fronts,
    margin,
    margins_by_standing,
    overhead_estimate,
    screen_pays,
    surely_dominated,
    width_floor,
)


def test_fronts_peel_the_predicted_frontier_and_put_unpredictable_points_first():
    gs = [
        Guess("fast-big", 100.0, 10.0),
        Guess("slow-small", 50.0, 2.0),
        Guess("mid", 80.0, 5.0),
        Guess("dominated", 70.0, 6.0),  # by mid
        Guess("worst", 10.0, 20.0),
        Guess("no-peak", None, 3.0),
    ]
    fs = fronts(gs)
    assert {g.pid for g in fs[0]} == {"fast-big", "slow-small", "mid", "no-peak"}
    assert [g.pid for g in fs[1]] == ["dominated"]
    assert [g.pid for g in fs[2]] == ["worst"]
    order = [g.pid for g in front_order(gs)]
    assert order[0] == "no-peak"  # unrankable: measured first, it calibrates its precision
    assert order[1:3] == ["fast-big", "slow-small"]  # a front's extremes (infinite crowding distance) next
    assert order[-2:] == ["dominated", "worst"]
    # several unrankable points: the cheapest to measure (least memory: the smallest batch) first, whatever its id
    more = [*gs, Guess("a-no-peak-big", None, 30.0), Guess("z-no-peak-small", None, 1.0)]
    assert [g.pid for g in front_order(more)][:3] == ["z-no-peak-small", "no-peak", "a-no-peak-big"]


def test_crowding_distance_is_infinite_at_the_ends_and_larger_in_sparse_stretches():
    d = crowding([(1.0, 1.0), (2.0, 2.0), (2.1, 2.1), (10.0, 10.0)])
    assert math.isinf(d[0]) and math.isinf(d[3])
    assert d[2] > d[1]  # (2.1) has a wide gap to 10 on its right; (2.0) sits between 1 and 2.1
    assert crowding([]) == []


def _report_dominates(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether ``a`` dominates ``b``, (low, high, memory) each, by the report's own code: with two points, b is off
    the frontier exactly when a dominates it."""
    on = pareto_frontier([a[0], b[0]], [a[2], b[2]], [a[0], b[0]], [a[1], b[1]])
    return not on[1]


def test_surely_dominated_matches_the_report_rule_for_every_point_within_the_bounds():
    """Whatever a skipped point's real interval [l, h] (h <= upper) and memory (>= mem_low), the witness dominates
    it by the report's rule; and a point the rule does not flag is not dominated at its most favourable corner."""
    rng = random.Random(7)
    for _ in range(400):
        a = Measured("a", *sorted((rng.uniform(0, 10), rng.uniform(0, 10))), float(rng.randint(1, 5)))
        upper, mem_low = rng.uniform(0, 10), float(rng.randint(1, 5))
        by = surely_dominated(upper, mem_low, [a])
        corners = [(lo, hi, m) for lo, hi in [(upper, upper), (0.0, upper)] for m in (mem_low, mem_low + 3)]
        if by is not None:
            assert all(_report_dominates((a.low, a.high, a.memory), c) for c in corners)
        else:  # the best case of such a point, its whole interval at upper with the least memory, survives a
            assert not _report_dominates((a.low, a.high, a.memory), (upper, upper, mem_low))


def test_a_tie_is_judged_on_the_low_end_of_the_points_interval():
    """The report ties two points whose intervals overlap: a point whose median is at most ``upper`` but whose
    interval starts at most at ``low_upper`` is tied with (or slower than) a frontier point reaching ``low_upper``;
    the slower-than rule still needs the whole point below the witness's low end."""
    a = Measured("a", 80.0, 93.3, 2.0)
    assert surely_dominated(103.5, 3.0, [a]) is None  # its median could be above a's top, its interval too
    assert surely_dominated(103.5, 3.0, [a], low_upper=93.15).pid == "a"  # it starts below a's top: tied
    assert surely_dominated(103.5, 3.0, [a], low_upper=93.4) is None
    assert surely_dominated(103.5, 3.0, [a], low_upper=200.0) is None  # never looser than upper
    # with no more memory than a (equal), only a faster a dominates: the low end does not enter
    assert surely_dominated(103.5, 2.0, [a], low_upper=50.0) is None


def test_width_floor_is_the_conformal_rank_from_below_and_zero_while_too_few_points_are_measured():
    assert width_floor([0.1] * 8) == 0.0  # floor(9 x 0.1) = 0: no rank yet, no width assumed
    nine = [k / 100 for k in range(5, 14)]
    assert width_floor(nine) == 0.05  # floor(10 x 0.1) = 1: the narrowest
    assert width_floor([*nine, *(0.2 for _ in range(10))]) == 0.06  # 19 widths: the 2nd narrowest
    assert width_floor([float("nan"), -0.1, *nine]) == 0.05  # not a width: left out
    assert width_floor(nine, coverage=0.95) == 0.0  # floor(10 x 0.05) = 0


def test_surely_dominated_names_the_witness_with_least_memory_and_treats_equal_memory_strictly():
    ms = [Measured("big", 90.0, 110.0, 8.0), Measured("small", 95.0, 105.0, 4.0)]
    assert surely_dominated(100.0, 9.0, ms).pid == "small"
    # same memory as the witness: only a strictly faster witness dominates (a tie with equal memory does not)
    assert surely_dominated(100.0, 4.0, ms) is None
    assert surely_dominated(94.0, 4.0, ms).pid == "small"
    assert surely_dominated(120.0, 9.0, ms) is None  # could be faster than every measured point


def test_margin_is_the_jackknife_quantile_of_the_errors_and_never_below_the_floor():
    assert margin([], 0.1, need=0) == 0.1
    assert math.isinf(margin([], 0.1)) and math.isinf(margin([0.01], 0.1, need=2))  # no measured error yet
    assert margin([0.02, -0.3, 0.05], 0.1) == 0.3  # too few errors for the 90 % rank: the largest
    assert margin([float("nan"), 0.2], 0.05) == 0.2
    # 20 errors: the ceil(21 x 0.9) = 19th smallest covers 90 %, the one outlier beyond it does not set the margin
    errors = [-0.5, *(0.01 * k for k in range(1, 20))]
    assert margin(errors, 0.1) == 0.19
    assert margin(errors, 0.1, coverage=0.99) == 0.5  # a higher coverage reaches it
    assert margin(errors, 0.1, coverage=0.5) == 0.11  # the 11th smallest, 0.11, above the floor
    # one-sided (the memory margin: how far below its prediction a peak came out): a peak above its prediction
    # (a negative score) does not widen the bound below, a shortfall does
    scores = [-0.036, 0.015, 0.01]
    assert margin(scores, 0.0) == 0.036
    assert margin(scores, 0.0, one_sided=True) == 0.015
    assert margin(scores, 0.02, one_sided=True) == 0.02  # never below the floor
    assert margin([-0.036], 0.0, one_sided=True) == 0.0


@pytest.mark.parametrize("low_end", [False, True], ids=["median-bound", "low-end-bound"])
def test_a_skip_is_a_point_off_the_frontier_whatever_its_real_numbers_within_the_bounds(low_end: bool):
    """With several measured points (ties, chains of ties): whenever surely_dominated names a witness, a point
    anywhere within the bounds (interval top <= upper, its low end <= low_upper when given, memory >= mem_low) is
    off the frontier of the measured points and itself, by the report's code; a tie witness is always a frontier
    point. With one measured point and no witness, the point's best case survives."""
    rng = random.Random(17 if low_end else 11)
    for _ in range(2000):
        measured = []
        for k in range(rng.randint(1, 6)):
            lo = rng.uniform(0, 10)
            measured.append(Measured(f"m{k}", lo, lo + rng.choice([0.0, 0.5, 2.0, 4.0]), float(rng.randint(1, 6))))
        upper, mem_low = rng.uniform(0, 12), float(rng.randint(1, 7))
        low_upper = upper * rng.uniform(0.5, 1.0) if low_end else None
        tie = upper if low_upper is None else low_upper
        by = surely_dominated(upper, mem_low, measured, low_upper)
        if by is None:
            if len(measured) == 1:
                m = measured[0]
                assert not _report_dominates((m.low, m.high, m.memory), (tie, upper, mem_low))
            continue
        for (lo, hi), mem in itertools.product([(tie, upper), (0.0, upper), (tie / 2, upper)], (mem_low, mem_low + 2)):
            pts = [*measured, Measured("x", lo, hi, mem)]
            on = pareto_frontier([(p.low + p.high) / 2 for p in pts], [p.memory for p in pts],
                                 [p.low for p in pts], [p.high for p in pts])  # fmt: skip
            assert not on[-1], (measured, upper, low_upper, mem_low, by)


def test_only_a_frontier_point_witnesses_a_tie():
    """k (least memory) ties the wide a, so a is off the frontier: a point tied with a but faster than k is not
    skipped on a's word; one tied with k is, on k's."""
    k, a = Measured("k", 5.0, 6.0, 1.0), Measured("a", 5.5, 9.2, 2.0)
    assert surely_dominated(9.0, 3.0, [k, a]) is None
    assert surely_dominated(9.0, 3.0, [a]).pid == "a"  # alone, a is on the frontier
    assert surely_dominated(5.8, 3.0, [k, a]).pid == "k"


def test_screen_pays_weighs_the_saving_against_a_second_start_up():
    assert screen_pays(None, 5.0, 0, 0) and screen_pays(10.0, None, 0, 0)  # unknown: screen (it measures them)
    assert not screen_pays(2.0, 15.0, 0, 0)  # tiny CPU points: start-up dominates, measure in full at once
    assert screen_pays(600.0, 30.0, 0, 0)  # long windows: the screen pays
    # once most screens were promoted, the second start-up is paid most of the time
    assert screen_pays(40.0, 30.0, 0, 10) and not screen_pays(40.0, 30.0, 10, 10)


def test_overhead_estimate_is_the_median_wall_time_not_explained_by_the_steps():
    assert overhead_estimate([]) is None
    samples = [(20.0, 10, 0.5), (30.0, 20, 0.5), (100.0, 10, 0.1)]
    assert overhead_estimate(samples) == 20.0  # 15, 20, 99 -> median 20
    assert overhead_estimate([(1.0, 10, 1.0)]) == 0.0  # clamped


def test_front_order_is_a_permutation_and_front_zero_is_the_predicted_frontier():
    rng = random.Random(3)
    gs = [Guess(f"p{i}", rng.uniform(1, 100), float(rng.randint(1, 30))) for i in range(40)]
    order = front_order(gs)
    assert sorted(g.pid for g in order) == sorted(g.pid for g in gs)
    first = {g.pid for g in fronts(gs)[0]}
    on = pareto_frontier([g.throughput for g in gs], [g.memory for g in gs])
    assert first == {g.pid for g, f in zip(gs, on, strict=True) if f}
    # no point of a later front dominates one of an earlier front
    fs = fronts(gs)
    for (i, fa), (j, fb) in itertools.combinations(enumerate(fs), 2):
        for a in fb:
            for b in fa:
                better = a.throughput >= b.throughput and a.memory <= b.memory
                assert not (better and (a.throughput, a.memory) != (b.throughput, b.memory)), (i, j)


def test_each_standing_of_a_prediction_gets_its_own_margin_and_none_without_two_errors():
    """Mondrian margins: well-measured groups are not held to the errors of borrowed ones, nor the reverse; a
    standing with fewer than two errors has no margin to trust (infinite: nothing skipped on its word)."""
    errors = [("fitted", 0.05), ("fitted", -0.08), ("borrowed", 0.5), ("borrowed", -0.3), ("one batch size", 0.2)]
    m = margins_by_standing(errors, 0.1)
    assert m["fitted"] == 0.1 and m["borrowed"] == 0.5  # the floor; the largest of two
    assert math.isinf(m["one batch size"]) and math.isinf(m["another engine"]) and math.isinf(m["none"])
    assert m["*"] == 0.5  # pooled, for the log
    assert set(m) == {"*", *STANDINGS}


def test_standing_says_which_group_a_prediction_rests_on():
    from sweeper.capacity.calibrate import fit_calibration
    from sweeper.search.decide import standing
    from tests.unit.specs import make_spec
    from tests.unit.test_time_calibration import LINK, _record, _step

    ddp = [make_spec(per_device_batch_size=b, ranks_per_node=2) for b in (2, 8)]
    fsdp = make_spec(per_device_batch_size=2, ranks_per_node=2, fsdp="full_shard", gc=True)
    cal = fit_calibration([_record(s, _step(s, 0.04, 5e9)) for s in [*ddp, fsdp]], comm=LINK)

    def spec(**kw):
        return make_spec(per_device_batch_size=4, ranks_per_node=2, **kw)

    assert standing(spec(), cal) == "fitted"
    assert standing(spec(fsdp="full_shard", gc=True), cal) == "one batch size"
    assert standing(spec(fsdp="full_shard"), cal) == "borrowed"  # FSDP gc=true: its own family first
    assert standing(spec(zero=2), cal) == "another engine"
    assert standing(spec(precision="bf16"), cal) == "none" and standing(spec(), None) == "none"


def test_widths_are_each_intervals_reach_below_its_median():
    from sweeper.search.order import widths

    ms = [Measured("a", 90.0, 110.0, 1.0, 100.0), Measured("b", 40.0, 60.0, 2.0, 50.0), Measured("c", 1.0, 2.0, 3.0)]
    assert widths(ms) == [pytest.approx(0.1), pytest.approx(0.2)]  # c: no median, no width
