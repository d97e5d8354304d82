"""``per_device_batch_size=auto`` without ranks: the search's choices against an exhaustive scan over peak curves,
its verdicts and files, the schema and gate rules for ``auto``, and the budget's OOM (raised on CPU, worded as a
GPU's, parsed like one)."""

from __future__ import annotations

import math

import pytest

from sweeper.config.schema import batch_size_error, help_keys
from sweeper.config.target import Target
from sweeper.failures.oom import parse_oom
from sweeper.point.batch_search import MAX_BATCH, SEARCH_FILE, SearchState, Trial, searched_batch, trial_bound
from sweeper.point.gate import InvalidPoint, check
from tests.unit.specs import make_spec

MIB = 2**20
CPU_BUDGET = Target("local", "cpu", None, {}, {"name": "local", "gpu_mem_gib": 0.025})


def search(peak, capacity: int, margin: float, seed: int) -> SearchState:
    """Run a search against ``peak(batch)`` (bytes): past ``capacity`` a trial runs out of memory."""
    state = SearchState(capacity, margin, seed, "test")
    while (step := state.next_batch()) is not None:
        batch, why = step
        p = peak(batch)
        state.trials.append(Trial(batch, "oom", why) if p > capacity else state.verdict(batch, [p], why))
        assert len(state.trials) <= 200
    return state


def exhaustive(peak, usable: int) -> int:
    b = 0
    while b < MAX_BATCH and peak(b + 1) <= usable:
        b += 1
    return b


CURVES = {
    "affine": lambda fixed, per: lambda b: fixed + per * b,
    "convex": lambda fixed, per: lambda b: int(fixed + per * b * (1 + 0.05 * math.log(b))),
    "concave": lambda fixed, per: lambda b: int(fixed + per * b**0.8),
    "stepped": lambda fixed, per: lambda b: fixed + per * 3 * math.ceil(b / 3),  # monotone plateaus, not affine
}


@pytest.mark.parametrize("curve", sorted(CURVES))
@pytest.mark.parametrize("margin", [0.0, 0.05, 0.2])
def test_the_search_finds_the_exhaustive_answer_in_logarithmically_many_trials(curve, margin):
    for fixed in (0, 2 * MIB, 5 * 2**30):
        for per in (100_000, 3 * MIB, 100 * MIB):
            for capacity in (2**26, 80 * 2**30):
                peak = CURVES[curve](fixed, per)
                want = exhaustive(peak, math.floor(capacity * (1 - margin)))
                for seed in (1, max(1, want), max(1, want // 3), max(1, int(want * 1.3)), 1000):
                    state = search(peak, capacity, margin, seed)
                    assert state.answer == want, (curve, fixed, per, capacity, seed)
                    assert len(state.trials) <= trial_bound(want, seed)
                    if want > 64:  # the exhaustive scan needs want + 1 trials
                        assert len(state.trials) <= 4 * math.log2(max(want, seed))


def test_an_affine_peak_takes_two_trials_from_the_right_seed_and_five_from_batch_1():
    peak = CURVES["affine"](2_527_152, 2_821_632)  # the tiny model at seq_len 128 (MemTracker bytes per rank)
    for seed, most in ((8, 2), (7, 3), (3, 4), (1, 5)):
        state = search(peak, 26_843_545, 0.05, seed)
        assert state.answer == 8 and len(state.trials) <= most, [(t.batch, t.chosen_by) for t in state.trials]


def test_a_fitted_step_never_more_than_doubles_and_stays_inside_the_bracket():
    state = SearchState(10**12, 0.0, 4, "test")
    state.trials.append(state.verdict(4, [1000 + 4 * 10], "seed"))  # a line through the origin says ~10**11
    assert state.next_batch() == (8, "double")  # the fit is past 2 x lo: doubling it is
    state.trials += [Trial(9, "oom", "double")]
    state.trials.append(state.verdict(8, [1000 + 8 * 10], "fitted"))
    assert state.bracket() == (8, 9) and state.done and state.answer == 8


def test_the_verdict_compares_the_largest_rank_with_the_capacity_less_the_margin():
    state = SearchState(1000, 0.1, 1, "test")
    assert state.usable_bytes == 900
    assert state.verdict(3, [900, 10], "seed").outcome == "fits"
    over = state.verdict(4, [10, 901], "double")
    assert (over.outcome, over.peak_bytes, over.peak_bytes_per_rank) == ("over_margin", 901, [10, 901])
    with pytest.raises(ValueError, match="gpu_mem_gib"):
        SearchState(None, 0.1, 1, "test").verdict(1, [1], "seed")


def test_a_fit_above_a_failure_is_not_trusted():
    state = SearchState(1000, 0.0, 1, "test")
    state.trials = [Trial(4, "fits", peak_bytes=1), Trial(6, "oom"), Trial(8, "fits", peak_bytes=2)]
    assert state.bracket() == (4, 6) and state.next_batch() is not None and not state.done


def test_not_even_one_sample_is_answer_zero_and_a_search_that_reaches_the_cap_stops():
    state = search(lambda b: 10**9, 1000, 0.05, 16)
    assert state.answer == 0 and state.bracket() == (0, 1)
    capped = SearchState(10**12, 0.0, 1, "test", max_batch=32)
    while (step := capped.next_batch()) is not None:
        capped.trials.append(capped.verdict(step[0], [step[0]], step[1]))
    assert capped.answer == 32


def test_the_state_file_round_trips_and_names_the_batch_found(tmp_path):
    state = SearchState(1000, 0.05, 2, "test", launches=2)
    state.trials = [Trial(2, "fits", "seed", 500, [500, 400], launch=1), Trial(3, "oom", "fitted", rank=1, launch=1)]
    state.write(tmp_path)
    back = SearchState.read(tmp_path)
    assert back == state and back.to_dict()["answer"] == 2 and back.to_dict()["smallest_failing"] == 3
    assert searched_batch(tmp_path) == 2
    SearchState(1000, 0.05, 2, "test", trials=[Trial(1, "oom")]).write(tmp_path)
    with pytest.raises(ValueError, match="no batch was found"):
        searched_batch(tmp_path)
    assert SearchState.read(tmp_path / "nowhere") is None


def test_load_says_why_a_state_that_must_be_there_cannot_be_read_where_read_gives_none(tmp_path):
    with pytest.raises(FileNotFoundError):
        SearchState.load(tmp_path)
    (tmp_path / SEARCH_FILE).write_text('{"capacity_bytes": 1000, "margin": 0.05}')  # no seed: not a state
    with pytest.raises(TypeError, match="seed"):
        SearchState.load(tmp_path)
    assert SearchState.read(tmp_path) is None


def test_the_driver_takes_ranks_that_ended_well_without_a_finished_search_for_its_own_fault(tmp_path):
    from sweeper.launchers.batch_search import _after_launch
    from sweeper.launchers.host_memory import Limit, WatchResult
    from sweeper.launchers.torchrun import Launch

    SearchState(1000, 0.05, 2, "test", trials=[Trial(2, "fits", "seed", 500, [500], launch=1)]).write(tmp_path)

    def launch(returncode: int) -> Launch:
        return Launch(returncode, False, [], "", 1.0, Limit(2**30, "test"), WatchResult(2**30, 0.1))

    with pytest.raises(RuntimeError, match="ended well after 1 trial"):
        _after_launch(tmp_path, launch(0))
    state, verdict = _after_launch(tmp_path, launch(1))  # a failed launch: its failure is the point's record
    assert not verdict and [t.batch for t in state.trials] == [2]


def test_the_batch_key_takes_an_integer_or_auto_and_help_says_so():
    assert batch_size_error(8) is None and batch_size_error("auto") is None
    for bad in ("four", "8", 1.5, True):
        assert "per_device_batch_size" in batch_size_error(bad) and "auto" in batch_size_error(bad)
    assert "per_device_batch_size=N|auto" in help_keys()


def test_the_gate_takes_auto_with_a_budget_and_refuses_it_without_one_or_on_slurm():
    auto = make_spec(per_device_batch_size="auto")
    assert auto.batch_search and auto.with_batch(3).per_device_batch_size == 3
    check(auto, CPU_BUDGET)
    cases = [
        (auto, Target("local", "cpu", None, {}, {"name": "local"}), "B01", "cluster.gpu_mem_gib"),
        (auto, Target("slurm", "cpu", None, {}, {"name": "dev", "gpu_mem_gib": 1.0}), "B02", "launcher"),
        (make_spec(per_device_batch_size="four"), CPU_BUDGET, "G02", "per_device_batch_size"),
    ]
    for spec, target, rule, key in cases:
        with pytest.raises(InvalidPoint) as e:
            check(spec, target)
        assert e.value.rule == rule and key in e.value.keys, str(e.value)
    check(make_spec(per_device_batch_size="auto"), Target("local", "cuda", "NVIDIA H100 80GB HBM3", {}, {}))


def test_the_cpu_budget_raises_the_oom_a_gpu_would_with_numbers_that_parse():
    torch = pytest.importorskip("torch")
    from sweeper.job.budget import BudgetTracker

    with pytest.raises(torch.OutOfMemoryError) as e, BudgetTracker(3 * MIB) as tracker:
        held = [torch.empty(MIB, dtype=torch.uint8) for _ in range(2)]
        held.append(torch.empty(2 * MIB, dtype=torch.uint8))  # 4 MiB > 3 MiB: raised by this allocation
    info = parse_oom(str(e.value))
    assert info.device_kind == "cuda" and "raised on CPU by sweeper" in str(e.value)
    assert (info.requested_bytes, info.allocated_bytes, info.capacity_bytes) == (2 * MIB, 2 * MIB, 3 * MIB)
    assert info.free_bytes == MIB and tracker.peak_bytes >= 2 * MIB and len(held) == 2


def test_the_row_shows_the_batch_that_ran_and_that_it_was_searched():
    from sweeper.results.record import Record
    from sweeper.results.row import frame_to_arrow, records_to_frame

    base = make_spec().to_dict()
    searched = Record("s", "a" * 12, "ok", spec={**base, "per_device_batch_size": 7}, ran={"batch_search": {}})
    refused = Record("s", "b" * 12, "invalid", reason="no budget", spec={**base, "per_device_batch_size": "auto"})
    fixed = Record("s", "c" * 12, "ok", spec={**base, "per_device_batch_size": 4})
    df = records_to_frame([searched, refused, fixed])
    assert df["per_device_batch_size"].tolist()[::2] == [7, 4] and df["per_device_batch_size"].isna().tolist()[1]
    assert df["batch_searched"].tolist() == [True, True, False]
    frame_to_arrow(df)  # Parquet takes it: one type per column
