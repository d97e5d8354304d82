"""The 95 % confidence interval of the median step time (order statistics), the stop rule of ``timed_steps=auto``,
the gate and grid errors for a bad ``timed_steps``, and the frontier on the interval."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sweeper.config.schema import timed_steps_error
from sweeper.config.spec import from_config
from sweeper.failures.attribution import steps_planned
from sweeper.job.timing import StepTimer, Windows
from sweeper.point.identity import point_id
from sweeper.results.frontier import mark_frontier, mark_ties, throughput_interval
from sweeper.results.metrics import metrics_from_ranks, series_from_ranks, step_statistics
from sweeper.results.stats import StopRule, binom_half_cdf, median_ci, median_ci_ranks, stop_rule
from tests.unit.trainer_loop import run_steps


def _reference_ranks(n: int) -> tuple[int, int] | None:
    """The largest j with P(Binomial(n, 1/2) < j) <= 0.025, straight from the definition (scipy when installed)."""
    try:
        from scipy.stats import binom

        cdf = lambda k: float(binom.cdf(k, n, 0.5))  # noqa: E731
    except ImportError:
        cdf = lambda k: sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # noqa: E731
    js = [j for j in range(1, n + 1) if cdf(j - 1) <= 0.025]
    return (max(js), n + 1 - max(js)) if js else None


@pytest.mark.parametrize(("n", "ranks"), [(8, (1, 8)), (20, (6, 15)), (50, (18, 33))])
def test_order_statistic_ranks_match_the_tables(n, ranks):
    assert median_ci_ranks(n) == ranks == _reference_ranks(n)


def test_order_statistic_ranks_agree_with_the_binomial_definition_for_every_n():
    for n in range(1, 130):
        assert median_ci_ranks(n) == _reference_ranks(n), n


def test_below_six_samples_no_interval_reaches_95_percent_and_it_is_flagged():
    for n in range(1, 6):
        assert median_ci_ranks(n) is None
        ci = median_ci([float(i) for i in range(n, 0, -1)])
        assert (ci.low, ci.high, ci.exact) == (1.0, float(n), False)
        assert ci.coverage == pytest.approx(1 - 2 ** (1 - n)) and ci.coverage < 0.95
    ci = median_ci([float(i) for i in range(6)])
    assert ci.exact and ci.coverage >= 0.95 and (ci.low, ci.high) == (0.0, 5.0)


def test_the_interval_uses_the_sorted_samples_and_states_its_coverage():
    xs = [float(x) for x in (17, 3, 9, 1, 20, 6, 11, 14, 2, 8, 19, 5, 13, 4, 16, 7, 12, 10, 18, 15)]
    ci = median_ci(xs)
    assert (ci.low, ci.median, ci.high) == (6.0, 10.5, 15.0)  # x_(6), median, x_(15)
    assert ci.coverage == pytest.approx(1 - 2 * binom_half_cdf(5, 20)) and ci.coverage >= 0.95
    assert ci.half_width_rel == pytest.approx((15 - 6) / 2 / 10.5)


def test_the_stop_rule_waits_for_min_steps_stops_when_narrow_and_at_the_cap():
    rule = StopRule(ci_rel=0.02, min_steps=8, max_steps=12)
    steady = [1.0 + 0.001 * (i % 3) for i in range(12)]
    assert [rule.decide(steady[:n]) for n in range(1, 8)] == [None] * 7  # fewer than min_steps
    assert rule.decide(steady[:8]) == "ci"
    noisy = [1.0, 2.0] * 6
    assert [rule.decide(noisy[:n]) for n in range(1, 12)] == [None] * 11
    assert rule.decide(noisy) == "cap"
    # each bound must lie within ±ci_rel: a tight low side does not excuse a wide high side
    one_slow = [1.0] * 7 + [1.05]
    assert median_ci(one_slow).half_width_rel == pytest.approx(0.025)
    assert StopRule(0.03, 8, 64).decide(one_slow) is None  # high = +5 % > 3 %, although half-width 2.5 % < 3 %
    assert StopRule(0.06, 8, 64).decide(one_slow) == "ci"


def test_the_stop_rule_never_stops_on_a_flagged_interval():
    assert StopRule(0.5, 3, 64).decide([1.0] * 5) is None  # [min, max] of 5 steps is not a 95 % interval
    assert StopRule(0.5, 3, 64).decide([1.0] * 6) == "ci"


def _timer_run(rule: StopRule | None, times: list[float], warmup: int = 1, cap: int = 10) -> tuple[Windows, list]:
    """Drive a StepTimer through steps with the given timed-step durations (fake clock), as the Trainer would."""
    import sweeper.job.timing as measure

    w = Windows(warmup, cap, 1, 2, rule)
    timer = StepTimer(w, cuda=False)
    clock = iter(x for t in [0.1] * warmup + times + [0.1] * 10 for x in (0.0, t))
    real = measure.time.perf_counter
    stops = []
    measure.time.perf_counter = lambda: next(clock)
    try:
        stopped = run_steps(timer, warmup + cap + 3)
        if stopped is not None:
            stops.append(stopped)
    finally:
        measure.time.perf_counter = real
    return w, stops


def test_windows_follow_the_dynamic_end_and_training_stops_after_the_profile_window():
    w, stops = _timer_run(StopRule(0.5, 8, 10), [1.0] * 10)
    assert (w.timed, w.memory, w.profile, w.stop_reason) == (range(1, 9), range(9, 10), range(10, 12), "ci")
    assert stops == [12]  # warm-up 1 + timed 8 + memory 1 + profile 2
    w, stops = _timer_run(StopRule(0.0001, 3, 10), [1.0, 2.0] * 5)
    assert (w.timed, w.stop_reason, stops) == (range(1, 11), "cap", [14])


def test_fixed_windows_are_decided_from_the_start_and_leave_the_stop_to_max_steps():
    w, stops = _timer_run(None, [1.0] * 10)
    assert (w.decided, w.stop_reason, w.timed, stops) == (True, "fixed", range(1, 11), [])


def _auto_spec(**over):
    cfg = {
        "model": {"name": "tiny", "model_type": "llama", "decoder_layer": "LlamaDecoderLayer", "config": {}},
        "fsdp": "none",
        "fsdp_config": {},
        "gc": False,
        "use_reentrant": False,
        "precision": "fp32",
        "model_dtype": "float32",
        "zero": 0,
        "deepspeed_config": {},
        "per_device_batch_size": 4,
        "seq_len": 128,
        "grad_accum": 1,
        "ranks_per_node": 2,
        "nodes": 1,
        "device": "cpu",
        "warmup_steps": 1,
        "timed_steps": "auto",
        "memory_steps": 1,
        "profile_steps": 2,
        "eval": False,
        "seed": 0,
        "timeout_s": 900.0,
        "timing": {"ci_rel": 0.02, "min_timed_steps": 8, "max_timed_steps": 20},
    }
    cfg.update(over)
    return from_config(cfg)


def test_auto_is_identity_its_budgets_are_not_and_total_steps_counts_the_cap():
    spec = _auto_spec()
    assert spec.timed_auto and spec.timed_steps == 20 and spec.total_steps == 1 + 20 + 1 + 2
    assert stop_rule(spec) == StopRule(0.02, 8, 20)
    same = _auto_spec(timing={"ci_rel": 0.05, "min_timed_steps": 10, "max_timed_steps": 40})
    assert point_id(same) == point_id(spec)
    fixed20 = _auto_spec(timed_steps=20)
    assert not fixed20.timed_auto and stop_rule(fixed20) is None
    assert point_id(fixed20) != point_id(spec)


def test_a_bad_timed_steps_is_refused_by_the_schema_check_and_the_gate():
    assert timed_steps_error(8) is None and timed_steps_error("auto") is None
    msg = timed_steps_error("lots")
    assert "timed_steps='lots'" in msg and "auto" in msg
    assert timed_steps_error(True) is not None

    from sweeper.config.target import Target
    from sweeper.point.gate import InvalidPoint, check

    target = Target(launcher="local", device_type="cpu")
    with pytest.raises(InvalidPoint) as e:
        check(_auto_spec(timed_steps="lots"), target)
    assert "timed_steps='lots'" in str(e.value) and e.value.rule == "G03"
    with pytest.raises(InvalidPoint) as e:
        check(_auto_spec(timing={"ci_rel": 0.02, "min_timed_steps": 30, "max_timed_steps": 20}), target)
    assert e.value.rule == "G11" and "min_timed_steps=30" in str(e.value)
    with pytest.raises(InvalidPoint) as e:
        check(_auto_spec(timing={"ci_rel": 0.0, "min_timed_steps": 8, "max_timed_steps": 20}), target)
    assert e.value.rule == "G11" and "timing.ci_rel" in str(e.value)
    for bad in (-0.1, 1.0, True, "high"):
        with pytest.raises(InvalidPoint) as e:
            check(_auto_spec(timing={"contention_warn_frac": bad}), target)
        assert e.value.rule == "G11" and "timing.contention_warn_frac" in str(e.value)
    check(_auto_spec(timing={"contention_warn_frac": 0.0}), target)  # 0: every wait is reported


def test_step_statistics_record_the_interval_of_the_slowest_rank_per_step():
    a = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3, 1.05, 0.95]
    b = [1.1, 1.0, 1.0, 1.0, 1.2, 1.0, 1.0, 1.0]
    stats = step_statistics([a, b])
    slowest = [max(x, y) for x, y in zip(a, b, strict=True)]
    assert stats["timed_steps"] == 8
    assert (stats["step_time_s_ci95_low"], stats["step_time_s_ci95_high"]) == (min(slowest), max(slowest))
    assert stats["step_time_ci95_rel"] == pytest.approx((max(slowest) - min(slowest)) / 2 / stats["step_time_s_median"])
    assert stats["step_time_ci95_coverage"] == pytest.approx(1 - 2 / 256)


def test_auto_series_windows_and_planned_steps_come_from_the_ranks_timed_window():
    spec = _auto_spec()  # warm-up 1, cap 20, memory 1, profile 2
    walls = [0.1] * 12  # 1 + 9 timed + 1 + 2 steps... 12 = 1 + 8 + 1 + 2
    ranks = [
        {
            "rank": r,
            "status": "ok",
            "steps_completed": 12,
            "step_times_s": [1.0] * 8,
            "timed_window": [1, 9],
            "timed_stop": "ci",
            "series": {"step_wall_s": walls, "mem_high_water_bytes": [1] * 12, "mem_kind": "rss_peak"},
        }
        for r in (0, 1)
    ]
    series = series_from_ranks(spec, ranks)
    assert series["window"] == ["warmup"] + ["timed"] * 8 + ["memory"] + ["profile"] * 2
    assert steps_planned(spec, ranks[0]) == 12  # not the cap's 24: the ranks did not leave early
    m = metrics_from_ranks(spec, ranks)
    assert m["timed_stop"] == "ci" and m["timed_steps"] == 8


def _frame(rows: list[tuple[str, float, float, float, float, float, float, float]]) -> pd.DataFrame:
    cols = [
        "point_id",
        "tokens_per_s_per_device",
        "peak_mem_bytes",
        "step_time_s_median",
        "step_time_s_p10",
        "step_time_s_p90",
        "step_time_s_ci95_low",
        "step_time_s_ci95_high",
    ]
    df = pd.DataFrame(rows, columns=cols)
    return df.assign(status="ok", timed_steps_measured=20)


def test_the_frontier_uses_the_median_interval_when_the_row_has_it():
    # a: 1000 tok/s at 1.0 s median, b: 960 tok/s at 1.0417 s; their p10-p90 spreads overlap, their CI95s do not
    df = _frame(
        [
            ("a", 1000.0, 2.0, 1.0, 0.9, 1.1, 0.99, 1.01),
            ("b", 960.0, 1.0, 1.0417, 0.94, 1.15, 1.035, 1.048),
        ]
    )
    low, high = throughput_interval(df)
    assert low[0] == pytest.approx(1000 / 1.01) and high[0] == pytest.approx(1000 / 0.99)
    assert mark_frontier(df).tolist() == [True, True]  # a faster, b less memory: both on it
    assert mark_ties(df).tolist() == [None, None]
    # the old records (no interval): the p10-p90 spreads overlap, so b (less memory) dominates a
    old = df.drop(columns=["step_time_s_ci95_low", "step_time_s_ci95_high"])
    assert mark_frontier(old).tolist() == [False, True]
    assert mark_ties(old).tolist() == ["b", "a"]


def test_overlapping_median_intervals_are_a_tie_decided_by_memory():
    df = _frame(
        [
            ("a", 1000.0, 2.0, 1.0, 0.99, 1.01, 0.95, 1.05),
            ("b", 980.0, 1.0, 1.0204, 1.01, 1.03, 0.99, 1.06),
        ]
    )
    assert mark_frontier(df).tolist() == [False, True]
    assert mark_ties(df).tolist() == ["b", "a"]


def test_a_row_without_a_usable_interval_falls_back_to_its_spread():
    df = _frame([("a", 1000.0, 1.0, 1.0, 0.9, 1.1, float("nan"), float("nan"))])
    low, high = throughput_interval(df)
    assert low[0] == pytest.approx(1000 / 1.1) and high[0] == pytest.approx(1000 / 0.9)


def test_the_row_never_labels_an_auto_point_with_its_cap_as_the_steps_it_timed():
    from dataclasses import asdict

    from sweeper.results.record import Record
    from sweeper.results.row import records_to_frame

    auto = _auto_spec()
    fixed = _auto_spec(timed_steps=8)
    records = [
        Record("s", "a" * 12, "ok", spec=asdict(auto), metrics={"timed_steps": 13, "timed_stop": "ci"}),
        Record("s", "b" * 12, "ok", spec=asdict(fixed), metrics={"timed_steps": 8, "timed_stop": "fixed"}),
    ]
    df = records_to_frame(records).set_index("point_id")
    assert pd.isna(df.loc["a" * 12, "timed_steps"]) and bool(df.loc["a" * 12, "timed_auto"]) is True
    assert df.loc["a" * 12, "timed_steps_measured"] == 13 and df.loc["a" * 12, "timed_stop"] == "ci"
    assert df.loc["b" * 12, "timed_steps"] == 8 and df.loc["b" * 12, "timed_steps_measured"] == 8
