"""Faults of sweeper's own measurement code (sweeper.job.faults): contained or attributed ``internal``, never the
user's ``runtime``; and skipped optimizer steps kept out of the timed statistics (sweeper.job.timing.StepTimer).

Real callbacks, real exceptions, real rank files and the real driver merge; no ranks (tests/integration/
test_harness_faults.py runs the same faults in real sweeps)."""

from __future__ import annotations

import json
import types

import pytest
import torch
from transformers import TrainerCallback

from sweeper.job import faults
from sweeper.job.rank import PhaseTracker, Rank
from sweeper.job.timing import StepTimer, Windows
from sweeper.results.outcome import summarize_ranks
from sweeper.results.stats import StopRule
from sweeper.results.sweepdir import SPEC_FILE
from tests.unit.specs import make_spec


class Broken(TrainerCallback):
    """A callback whose own code fails at ``on_step_begin`` of step ``at`` with ``exc``."""

    def __init__(self, exc: BaseException, at: int = 2) -> None:
        self.exc, self.at = exc, at
        self.calls = 0
        self.released = False

    def on_step_begin(self, args, state, control, **kwargs):
        self.calls += 1
        if state.global_step == self.at:
            raise self.exc

    def release(self) -> None:
        self.released = True


def _events(cb: TrainerCallback, steps: int) -> None:
    for step in range(steps):
        cb.on_step_begin(None, types.SimpleNamespace(global_step=step), types.SimpleNamespace())


def test_a_contained_site_keeps_a_note_releases_what_it_held_and_stays_off():
    notes = faults.Degradations(lambda: 2)
    cb = faults.guard_callback(Broken(KeyError("no such category")), "memory", notes)
    broken = faults.guard_callback(Broken(KeyError("no such category")), "profiler", notes, on_fault=lambda: None)
    _events(cb, 5)
    _events(broken, 5)
    assert cb.calls == 3 and broken.calls == 3  # steps 0, 1, 2; off after the fault
    assert [(n["site"], n["exception_type"], n["step"]) for n in notes.notes] == [
        ("memory", "KeyError", 2),
        ("profiler", "KeyError", 2),
    ]


def test_the_release_runs_after_a_contained_fault():
    notes = faults.Degradations()
    cb = Broken(ValueError("bad snapshot"))
    faults.guard_callback(cb, "memory", notes, on_fault=cb.release)
    _events(cb, 3)
    assert cb.released and notes.failed("memory") and not notes.failed("profiler")


def test_an_attributed_site_ends_the_rank_as_a_harness_fault_with_its_site():
    cb = faults.guard_callback(Broken(ZeroDivisionError("division by zero")), "timing")
    with pytest.raises(faults.HarnessFault) as info:
        _events(cb, 3)
    assert info.value.site == "timing" and isinstance(info.value.__cause__, ZeroDivisionError)
    assert faults.site_of(info.value) == "timing"


@pytest.mark.parametrize(
    "outcome",
    [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), MemoryError()],
)
def test_the_points_own_outcome_passes_through_a_guard_unchanged(outcome):
    """The device budget raises the OOM a GPU would from harness code: that is the point's result, not a bug."""
    for notes in (None, faults.Degradations()):
        cb = faults.guard_callback(Broken(outcome), "memory", notes)
        with pytest.raises(type(outcome)):
            _events(cb, 3)
        assert faults.site_of(outcome) is None


def test_a_collective_error_through_the_timer_is_not_the_harness_fault():
    err = torch.distributed.DistBackendError("Connection closed by peer")
    cb = faults.guard_callback(Broken(err), "timing")
    with pytest.raises(torch.distributed.DistBackendError):
        _events(cb, 3)


def test_injection_names_a_site_and_a_step(monkeypatch):
    monkeypatch.setenv(faults.FAULT_ENV, "losses, memory@3")
    assert faults.armed("losses") == 0 and faults.armed("memory") == 3 and faults.armed("timing") is None
    notes = faults.Degradations()
    notes.step = lambda: 3
    cb = faults.guard_callback(Broken(RuntimeError("never raised"), at=99), "memory", notes)
    _events(cb, 3)
    assert not notes.notes  # steps 0-2: before the step the variable names
    _events(cb, 5)
    assert [(n["exception_type"], n["step"]) for n in notes.notes] == [("InjectedFault", 3)]
    assert cb.calls == 6  # steps 0-2 twice; the injected fault came first at step 3, and the site stayed off
    with pytest.raises(faults.InjectedFault):
        faults.inject("losses")
    faults.inject("timing")  # not named: nothing


def _point(tmp_path):
    spec = make_spec(warmup_steps=1, timed_steps=2, memory_steps=1, profile_steps=1, ranks_per_node=1)
    (tmp_path / SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    return spec


def test_a_rank_file_field_that_does_not_serialise_is_internal_and_the_rest_is_kept(tmp_path, monkeypatch):
    spec = _point(tmp_path)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    me = Rank(tmp_path)
    code = me.write(me.header(), {"step_times_s": [0.5, 0.25], "setup": {"dtype": torch.float32}})  # type: ignore
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert code == 1 and data["status"] == "failed"
    assert data["step_times_s"] == [0.5, 0.25] and "setup" not in data
    assert data["failure"]["site"] == "rank-file" and "setup" in data["failure"]["message"]
    out = summarize_ranks(spec, [data], returncode=1, timed_out=False, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "internal")
    assert "sweeper's own rank-file code failed" in out["reason"] and "not your configuration" in out["reason"]
    assert out["metrics"]["step_time_s_median"] == pytest.approx(0.375)


def test_the_first_failure_stays_when_a_later_attempt_fails_too(tmp_path, monkeypatch):
    _point(tmp_path)
    me = Rank(tmp_path)
    phase = PhaseTracker()
    me.attempt(lambda: (_ for _ in ()).throw(ValueError("the user's")), phase)
    me.attempt(lambda: (_ for _ in ()).throw(faults.HarnessFault("peak", KeyError("x"))), phase)
    assert me.failure is not None and me.failure["exception_type"] == "ValueError" and "site" not in me.failure


def test_a_spec_json_that_cannot_be_read_is_the_rank_files_internal_failure(tmp_path, monkeypatch):
    spec = _point(tmp_path)
    (tmp_path / SPEC_FILE).write_text('{"seed": ')  # cut short, as a writer killed midway would not leave it
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    me = Rank(tmp_path)  # never raises: the failure is kept
    assert not me.ok and not me.use_cuda
    with pytest.raises(RuntimeError, match="no point spec"):
        me.spec  # noqa: B018 - the property's refusal is what is tested
    assert me.write_unmeasured() == 1
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert data["status"] == "failed" and data["steps_completed"] is None
    f = data["failure"]
    assert (f["site"], f["phase"], f["exception_type"]) == ("rank-spec", "setup", "HarnessFault")
    assert "JSONDecodeError" in f["message"]
    out = summarize_ranks(spec, [data], returncode=1, timed_out=False, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "internal")
    assert "sweeper's own rank-spec code failed" in out["reason"]


def test_a_batch_search_rank_without_its_search_state_writes_its_rank_file_internal(tmp_path, monkeypatch):
    from sweeper.job.batch_trials import run_search

    spec = _point(tmp_path)  # spec.json, but no batch_search.json
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert run_search(tmp_path) == 1
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert data["failure"]["site"] == "search-state" and "FileNotFoundError" in data["failure"]["message"]
    out = summarize_ranks(spec, [data], returncode=1, timed_out=False, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "internal")


def _failed(rank: int, exc: str, message: str, site: str | None = None) -> dict:
    f = {"exception_type": exc, "message": message, "traceback": "", "phase": "train", "step": 5}
    if site:
        f["site"] = site
    return {"rank": rank, "status": "failed", "steps_completed": 5, "failure": f, "step_times_s": [0.2, 0.3]}


def test_a_harness_fault_is_internal_and_explains_the_other_ranks_collective_error():
    spec = make_spec(warmup_steps=3, timed_steps=4)
    gloo = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234"
    ranks = [
        _failed(0, "HarnessFault", "sweeper's own timing code failed: ZeroDivisionError: float division", "timing"),
        _failed(1, "DistBackendError", gloo),
    ]
    out = summarize_ranks(spec, ranks, returncode=1, timed_out=False, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "internal")
    assert out["failure"]["rank"] == 0 and out["failure"]["site"] == "timing"
    assert out["metrics"]["timed_steps"] == 2  # the timed steps measured before the fault are kept
    # the same message without the site is the user's runtime error: the site, not the text, decides
    plain = [_failed(0, "ZeroDivisionError", "float division"), _failed(1, "DistBackendError", gloo)]
    assert summarize_ranks(spec, plain, returncode=1, timed_out=False, log_tail="")["error_kind"] == "runtime"


def test_contained_faults_leave_an_ok_point_with_a_measurement_note():
    spec = make_spec(warmup_steps=1, timed_steps=2, ranks_per_node=2)
    note = {"site": "memory", "exception_type": "KeyError", "message": "'Total'", "step": 3}
    ranks = [
        {"rank": r, "status": "ok", "steps_completed": spec.total_steps, "step_times_s": [0.2, 0.3]}
        | ({"harness_faults": [note]} if r == 1 else {})
        for r in range(2)
    ]
    out = summarize_ranks(spec, ranks, returncode=0, timed_out=False, log_tail="")
    assert out["status"] == "ok" and out["metrics"]["step_time_s_median"] == pytest.approx(0.25)
    assert out["metrics"]["measurement_note"].startswith("sweeper's own memory code failed on rank 1 at step 3")


# ---------------------------------------------------------------------------------------------- skipped steps


class Scaled:
    """What the Trainer hands callbacks as ``optimizer``: accelerate's wrapper, whose ``step_was_skipped`` says
    whether the GradScaler skipped the update (here set by the test: the unit has no GradScaler)."""

    def __init__(self) -> None:
        self.step_was_skipped = False


def _run(timer: StepTimer, steps: int, skipped: set[int]) -> int | None:
    opt = Scaled()
    for step in range(steps):
        state = types.SimpleNamespace(global_step=step)
        control = types.SimpleNamespace(should_training_stop=False)
        timer.on_step_begin(None, state, control)
        opt.step_was_skipped = step in skipped
        state.global_step = step + 1
        timer.on_step_end(None, state, control, optimizer=opt)
        if control.should_training_stop:
            return state.global_step
    return None


def test_a_skipped_timed_step_is_left_out_of_the_times_and_counted():
    timer = StepTimer(Windows(2, 4, 1, 0), cuda=False)
    _run(timer, 7, skipped={0, 2})  # a warm-up step and the first timed step skipped
    assert timer.skipped_timed == [2]
    assert len(timer.times_s) == 3 and len(timer.wall_s) == 7
    assert timer.skipped == [True, False, True, False, False, False, False]


def test_with_timed_steps_auto_a_skipped_step_does_not_feed_the_stop_rule_and_the_cap_still_ends_it():
    windows = Windows(1, 6, 1, 0, StopRule(0.0001, 3, 6))  # an interval that never gets narrow enough
    timer = StepTimer(windows, cuda=False)
    stopped = _run(timer, 20, skipped={1, 2})
    assert windows.stop_reason == "cap" and windows.timed == range(1, 7)
    assert len(timer.slowest_s) == 4 and timer.skipped_timed == [1, 2]
    assert stopped == 8  # the cap's 6 steps, then the memory step


def test_a_fused_adamw_skips_inside_its_kernel_where_accelerate_sees_no_skip_but_the_loss_scale_falls():
    """The real accelerate wrapper and a real CPU GradScaler (a GPU's fp16 scaler, which accelerate makes on
    accelerators only: the faked part) around the real fused AdamW (transformers 5's default optimizer)."""
    from accelerate import Accelerator
    from accelerate.optimizer import patch_optimizer_step

    from sweeper.job.loss_scale import loss_scale, step_was_skipped

    w = torch.nn.Parameter(torch.ones(4))
    opt = Accelerator(cpu=True).prepare(torch.optim.AdamW([w], lr=0.1, fused=True))
    opt.scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    opt.scaler.scale(torch.ones(()))
    opt._accelerate_step_called = False
    opt._optimizer_original_step_method = opt.optimizer.step
    opt._optimizer_patched_step_method = patch_optimizer_step(opt, opt.optimizer.step)
    before = loss_scale(opt)
    w.grad = torch.full_like(w, float("inf"))
    opt.step()
    after = loss_scale(opt)
    assert torch.equal(w.detach(), torch.ones(4))  # no update
    assert opt.step_was_skipped is False  # accelerate watched the step being called, and it was
    assert (before, after) == (1.0, 0.5) and step_was_skipped(opt, before, after)
    w.grad = torch.ones(4)
    opt.step()
    assert not step_was_skipped(opt, after, loss_scale(opt)) and not torch.equal(w.detach(), torch.ones(4))
    assert not step_was_skipped(torch.optim.SGD([w]), None, None)  # no loss scaling: never skipped


def test_memtrackers_own_refusal_is_the_harness_and_an_op_failing_under_it_is_the_users():
    """The real MemTracker: its refusal of a second forward without reset_mod_stats (what
    sweeper.job.memory.new_micro_batch exists for) is sweeper's fault; a shape error of the model under it is not."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        model(torch.ones(2, 4)).sum().backward()
        with pytest.raises(NotImplementedError) as own:
            model(torch.ones(2, 4))
        tracker.reset_mod_stats()
        with pytest.raises(RuntimeError) as users:
            model(torch.ones(2, 3))  # mat1 and mat2 shapes cannot be multiplied
    assert faults.site_of(own.value) == "memory-tracker"
    assert faults.site_of(users.value) is None
