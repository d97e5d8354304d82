"""The point's per-step series (``Record.series``) merged from the ranks' ``series`` (no torch, no ranks run)."""

from __future__ import annotations

import json

import pytest

from sweeper.config.spec import PointSpec
from sweeper.results.metrics import WINDOWS, metrics_from_ranks, series_from_ranks, step_window
from sweeper.results.record import Record, read_record
from sweeper.results.row import records_to_frame, row_from_record
from sweeper.results.sweepdir import SweepDir

# 2 warm-up, 3 timed, 1 memory, 1 profile: 7 steps
WINDOW_OF_STEP = ["warmup", "warmup", "timed", "timed", "timed", "memory", "profile"]


@pytest.fixture
def spec() -> PointSpec:
    from tests.unit.specs import make_spec

    return make_spec(warmup_steps=2, timed_steps=3, memory_steps=1, profile_steps=1, ranks_per_node=2)


def _rank(rank: int, walls: list[float], mems: list[int], losses: list[float] | None = None, **kw) -> dict:
    """A rank file as the harness writes it (timed window: steps 3-5, 0-based 2..4)."""
    losses = [10.0 - i for i in range(len(walls))] if losses is None else losses
    return {
        "rank": rank,
        "status": "ok",
        "step_times_s": walls[2:5],
        "losses": losses,
        "series": {
            "step_wall_s": walls,
            "mem_high_water_bytes": mems,
            "mem_kind": "rss_peak",
            "loss_steps": list(range(1, len(losses) + 1)),
        },
        **kw,
    }


def test_every_step_is_a_row_with_its_window_in_run_order(spec):
    walls = [1.0, 0.5, 0.2, 0.21, 0.22, 0.9, 1.5]
    s = series_from_ranks(spec, [_rank(0, walls, [100, 200, 200, 250, 250, 300, 300])])
    assert s["step"] == [1, 2, 3, 4, 5, 6, 7]
    assert s["window"] == WINDOW_OF_STEP
    assert s["step_time_s"] == walls
    assert s["loss"] == [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0]
    assert s["mem_high_water_bytes"] == [100, 200, 200, 250, 250, 300, 300]
    assert s["mem_kind"] == "rss_peak"
    columns = [k for k in s if k != "mem_kind"]
    assert {len(s[k]) for k in columns} == {7}
    assert json.loads(json.dumps(s)) == s  # plain JSON data


def test_step_window_follows_the_spec_counts(spec):
    assert [step_window(spec, i) for i in range(1, 8)] == WINDOW_OF_STEP
    assert step_window(spec, 8) is None
    assert WINDOWS == ("warmup", "timed", "memory", "profile")
    none_timed = PointSpec.from_dict({**spec.to_dict(), "warmup_steps": 0, "memory_steps": 0})
    assert step_window(none_timed, 1) == "timed"


def test_step_time_and_memory_are_the_max_over_ranks_and_timed_steps_equal_the_statistics_inputs(spec):
    r0 = _rank(0, [1.0, 0.5, 0.20, 0.30, 0.22, 0.9, 1.5], [100, 200, 210, 220, 230, 240, 250])
    r1 = _rank(1, [1.1, 0.4, 0.25, 0.21, 0.23, 0.8, 1.6], [90, 210, 205, 230, 231, 232, 260], losses=[])
    s = series_from_ranks(spec, [r1, r0])  # any order
    assert s["step_time_s"] == [1.1, 0.5, 0.25, 0.30, 0.23, 0.9, 1.6]
    assert s["mem_high_water_bytes"] == [100, 210, 210, 230, 231, 240, 260]
    assert s["loss"] == [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0]  # rank 0's, not rank 1's (none)
    timed = [t for t, w in zip(s["step_time_s"], s["window"], strict=True) if w == "timed"]
    assert timed == [max(a, b) for a, b in zip(r0["step_times_s"], r1["step_times_s"], strict=True)]
    m = metrics_from_ranks(spec, [r0, r1])
    assert m["timed_steps"] == 3 and m["step_time_s_median"] == sorted(timed)[1]


def test_a_rank_that_stopped_early_gives_what_it_has_and_the_failed_point_keeps_its_history(spec):
    r0 = _rank(0, [1.0, 0.5, 0.2, 0.3], [100, 200, 210, 220], status="failed")  # failed in step 5
    r1 = _rank(1, [1.1, 0.4], [90, 250])  # stopped after step 2
    s = series_from_ranks(spec, [r0, r1])
    assert s["step"] == [1, 2, 3, 4]
    assert s["window"] == ["warmup", "warmup", "timed", "timed"]
    assert s["step_time_s"] == [1.1, 0.5, 0.2, 0.3]
    assert s["mem_high_water_bytes"] == [100, 250, 210, 220]
    assert s["loss"] == [10.0, 9.0, 8.0, 7.0]


def test_losses_are_aligned_by_the_step_they_were_logged_at(spec):
    r0 = _rank(0, [1.0, 0.5, 0.2], [1, 2, 3], losses=[9.0, 7.0])
    r0["series"]["loss_steps"] = [1, 3]  # step 2 logged no loss
    assert series_from_ranks(spec, [r0])["loss"] == [9.0, None, 7.0]
    r0["series"]["loss_steps"] = []  # no step numbers: the Trainer logs every step, the i-th loss is step i + 1
    assert series_from_ranks(spec, [r0])["loss"] == [9.0, 7.0, None]
    r1 = _rank(1, [1.0, 0.5, 0.2], [1, 2, 3], losses=[1.0, 1.0, 1.0])
    lone = series_from_ranks(spec, [r1])  # rank 0 left no file: the lowest reporting rank's losses
    assert lone["loss"] == [1.0, 1.0, 1.0]


def test_no_step_recorded_is_none(spec):
    assert series_from_ranks(spec, []) is None
    assert series_from_ranks(spec, [_rank(0, [], [], losses=[]), _rank(1, [], [])]) is None
    old = {"rank": 0, "status": "ok", "step_times_s": [0.2, 0.2, 0.2], "losses": [1.0] * 7}  # no "series"
    assert series_from_ranks(spec, [old]) is None


def test_the_series_round_trips_through_the_record_and_stays_out_of_the_row(spec, tmp_path):
    s = series_from_ranks(spec, [_rank(0, [1.0, 0.5, 0.2], [1, 2, 3])])
    r = Record(sweep_id="s1", point_id="abc123abc123", status="ok", spec=spec.to_dict(), series=s)
    path = SweepDir(tmp_path).write_record(r)
    assert read_record(path).series == s
    row = row_from_record(read_record(path))
    assert not any("series" in k or "mem_high_water" in k for k in row)
    assert not any(isinstance(v, str) and "mem_high_water" in v for v in row.values())
    df = records_to_frame([read_record(path)])
    assert len(df) == 1 and "series" not in df.columns


def test_an_old_record_without_series_loads_with_none(tmp_path):
    r = Record(sweep_id="s1", point_id="abc123abc123", status="ok")
    data = r.to_dict()
    del data["series"]
    path = SweepDir(tmp_path).point(r.point_id) / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    assert read_record(path).series is None


def test_the_step_timer_times_every_step_and_keeps_the_timed_window_apart():
    from types import SimpleNamespace

    from sweeper.job.harness import LossLog
    from sweeper.job.timing import StepTimer, Windows

    timer, log = StepTimer(Windows(2, 3, 1, 1), cuda=False), LossLog()
    state = SimpleNamespace(global_step=0)
    for _ in range(7):
        timer.on_step_begin(None, state, None)
        state.global_step += 1  # the Trainer increments it just before on_step_end
        timer.on_step_end(None, state, None)
        log.on_log(None, state, None, logs={"loss": 5.0, "learning_rate": 1e-3})
    log.on_log(None, state, None, logs={"train_loss": 5.0})  # the end-of-training summary is not a step's loss
    assert len(timer.wall_s) == len(timer.mem_high_water_bytes) == 7
    assert timer.times_s == timer.wall_s[2:5]  # the same numbers, not a second measurement
    assert timer.mem_kind == "rss_peak" and timer.mem_high_water_bytes == sorted(timer.mem_high_water_bytes)
    assert all(b > 0 for b in timer.mem_high_water_bytes)
    assert (log.steps, log.losses) == ([1, 2, 3, 4, 5, 6, 7], [5.0] * 7)


def test_learning_rate_and_grad_norm_follow_the_loss_they_were_logged_with(spec):
    r0 = _rank(0, [1.0, 0.5, 0.2], [1, 2, 3], losses=[9.0, 7.0])
    r0["series"] |= {"loss_steps": [1, 3], "learning_rate": [5e-5, 4e-5], "grad_norm": [2.5, None]}
    s = series_from_ranks(spec, [r0])
    assert s["learning_rate"] == [5e-5, None, 4e-5]
    assert s["grad_norm"] == [2.5, None, None]
    old = _rank(0, [1.0, 0.5, 0.2], [1, 2, 3], losses=[9.0, 7.0, 6.0])  # a rank file from before: no such lists
    assert series_from_ranks(spec, [old])["learning_rate"] == [None, None, None]
    r0["series"]["grad_norm"] = [1.0]  # a list of another length is not aligned to anything: none
    assert series_from_ranks(spec, [r0])["grad_norm"] == [None, None, None]


def test_the_harness_keeps_the_trainers_logged_learning_rate_and_grad_norm():
    """sweeper's own LossLog callback, fed what ``Trainer._maybe_log_save_evaluate`` logs (a float, a 0-d tensor,
    a missing key, NaN)."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from sweeper.job.harness import LossLog

    log = LossLog()
    log.on_log(None, SimpleNamespace(global_step=1), None, {"loss": 9.0, "learning_rate": 5e-5, "grad_norm": 2.5})
    log.on_log(None, SimpleNamespace(global_step=2), None, {"loss": 8.0, "grad_norm": torch.tensor(1.5)})
    log.on_log(None, SimpleNamespace(global_step=3), None, {"loss": 7.0, "learning_rate": 1e-5, "grad_norm": "nan"})
    log.on_log(None, SimpleNamespace(global_step=4), None, {"train_runtime": 3.0})  # the final summary: no loss
    assert log.steps == [1, 2, 3]
    assert log.learning_rates == [5e-5, None, 1e-5]
    assert log.grad_norms == [2.5, 1.5, None]
