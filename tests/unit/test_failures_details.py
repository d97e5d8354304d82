"""Failures keep what a person needs: the rank, the line that names the fix, the missing module, and which rank
stopped or died at which step (cases T06, T07, T13)."""

from __future__ import annotations

import traceback

import pytest

from sweeper.failures import classify, parse_oom
from sweeper.failures.text import informative_summary, rank_from_prefix
from sweeper.results.outcome import summarize_ranks
from sweeper.results.rankfile import read_rank_steps, write_rank_step
from tests.unit.specs import make_spec as _spec
from tests.unit.test_failures import SEED, SEED_BYTES, training_traceback
from tests.unit.test_measure_summary import TORCHRUN_SUMMARY

GLOO = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:12477. This is typically caused by a remote worker crashing. Check the logs of the remote worker "
    "before reporting an error."
)
COLLECTIVE_TB = training_traceback(
    "/venv/torch/nn/parallel/distributed.py:2363:_distributed_broadcast_coalesced", exc="RuntimeError: " + GLOO
)


# ------------------------------------------------------------------------------------------ T13: [rankN]: prefix


def test_t13_the_rank_is_read_from_the_rank_prefix_and_the_bytes_stay_exact():
    f = classify("OutOfMemoryError", "[rank3]: torch.OutOfMemoryError: " + SEED)
    assert (f.status, f.rank) == ("oom", 3)
    assert {k: f.details["oom"][k] for k in SEED_BYTES} == SEED_BYTES
    assert f.reason.startswith("out of memory on cuda:1 while trying to allocate 340.00 MiB")
    assert "[rank3]" not in f.reason
    assert f.to_dict()["rank"] == 3


def test_t13_a_message_prefixed_on_every_wrapped_line_parses_like_the_plain_one():
    wrapped = SEED.replace(" GiB of which", " GiB of which\n").replace("memory 86.44", "memory\n86.44")
    prefixed = "\n".join(f"[rank3]: {line}" for line in ("torch.OutOfMemoryError: " + wrapped).splitlines())
    assert parse_oom(prefixed) == parse_oom(SEED)
    assert classify("OutOfMemoryError", prefixed).rank == 3


def test_the_rank_of_an_interleaved_log_is_the_one_whose_line_carries_the_message():
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/venv/transformers/trainer.py", line 1870, in training_step\n'
        "[rank0]: RuntimeError: " + GLOO + "\n"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    assert rank_from_prefix("CUDA out of memory. Tried to allocate 2.00 GiB.", log) == 1
    assert rank_from_prefix(GLOO, log) == 0
    assert rank_from_prefix("something else", log) is None  # two ranks, neither carries it
    assert rank_from_prefix("x", "[rank2]: a\n[rank2]: b\n") == 2
    assert rank_from_prefix("no prefix anywhere", "Traceback ...\n") is None
    assert classify("OutOfMemoryError", SEED).rank is None


def test_a_rank_file_message_with_a_prefix_names_that_rank_in_the_record(tmp_path):
    spec = _spec(warmup_steps=1, timed_steps=1, memory_steps=1, profile_steps=1)
    ranks = [_ok(0, spec.total_steps), _failed(1, "OutOfMemoryError", "[rank3]: torch.OutOfMemoryError: " + SEED)]
    out = summarize_ranks(spec, ranks, returncode=1, timed_out=False, log_tail="")
    assert out["status"] == "oom" and out["failure"]["rank"] == 3
    assert out["failure"]["requested_bytes"] == SEED_BYTES["requested_bytes"]


# ------------------------------------------------------------------------- the line that names the key or the fix


def test_a_config_error_keeps_its_third_line_that_names_the_key_and_the_fix():
    msg = (
        "Invalid evaluation settings.\n"
        "The strategy given for evaluation is not available in this version.\n"
        "Use `training_args.eval_strategy` instead of `evaluation_strategy`."
    )
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/transformers/training_args.py", line 1650, in __post_init__\n'
        f"ValueError: {msg}\n"
    )
    f = classify("ValueError", msg, tb)
    assert (f.error_kind, f.phase) == ("config", "setup")
    assert "Invalid evaluation settings. ... Use `training_args.eval_strategy` instead of `evaluation_strategy`." in (
        f.reason
    )
    assert "not available in this version" not in f.reason  # a line that names nothing is left out


def test_a_runtime_error_keeps_the_advice_of_a_later_sentence_of_a_long_line():
    msg = "The tensor has a non-zero number of elements but its data is not allocated yet. " * 4 + (
        "Set gc=false or try use_reentrant=true."
    )
    f = classify("RuntimeError", msg)
    assert f.error_kind == "runtime"
    assert "Set gc=false or try use_reentrant=true." in f.reason
    assert f.reason.startswith("RuntimeError: The tensor has a non-zero number of elements")


def test_the_kept_lines_are_bounded_and_a_single_line_is_kept_whole():
    noisy = "headline\n" + "\n".join(f"set option_{i}=1 and try again" for i in range(200))
    summary = informative_summary(noisy, limit=300)
    assert len(summary) <= 300 and summary.startswith("headline set option_0=1")
    assert summary.endswith("...")
    one = "--load_best_model_at_end requires the save and eval strategy to match"
    assert informative_summary(one) == one
    assert informative_summary("[rank1]: a\n[rank1]: use x_y instead") == "a use x_y instead"
    assert informative_summary("") == ""


# ------------------------------------------------------------------------ T06: an import error wrapped in another


def _raise_wrapped(message_names_module: bool, chained: bool) -> tuple[str, str]:
    """A real chained traceback, as transformers' lazy import raises it (``_LazyModule._get_module``)."""
    try:
        try:
            import sweeper_no_such_tracker  # noqa: F401
        except ModuleNotFoundError as e:
            msg = (
                "Failed to import sweeper.trackers.integration because of the following error (look up to see its "
                f"traceback):\n{e}"
                if message_names_module
                else "the tracker could not be set up"
            )
            if chained:
                raise RuntimeError(msg) from e
            raise RuntimeError(msg)  # noqa: B904 - "During handling of the above exception": not the cause
    except RuntimeError as e:
        return str(e), traceback.format_exc()
    raise AssertionError("unreachable")


def test_t06_an_import_error_wrapped_in_a_runtime_error_is_kind_import_naming_the_module():
    message, tb = _raise_wrapped(message_names_module=True, chained=True)
    f = classify("RuntimeError", message, tb)
    assert (f.status, f.error_kind, f.phase) == ("error", "import", "setup")
    assert "module 'sweeper_no_such_tracker' is missing" in f.reason
    assert "needed by sweeper.trackers.integration" in f.reason
    wandb = (
        "Failed to import transformers.integrations.integration_utils because of the following error (look up to see "
        "its traceback):\nNo module named 'wandb'"
    )
    f = classify("RuntimeError", wandb)
    assert f.error_kind == "import" and "'wandb'" in f.reason


def test_an_import_error_chained_as_the_direct_cause_is_found_in_the_traceback():
    message, tb = _raise_wrapped(message_names_module=False, chained=True)
    assert "The above exception was the direct cause" in tb
    f = classify("RuntimeError", message, tb)
    assert f.error_kind == "import" and "'sweeper_no_such_tracker'" in f.reason


def test_an_import_error_only_handled_on_the_way_is_not_the_cause():
    message, tb = _raise_wrapped(message_names_module=False, chained=False)
    assert "During handling of the above exception" in tb
    assert classify("RuntimeError", message, tb).error_kind == "runtime"


# ----------------------------------------------------------------- T07: a rank that left early; a killed rank's step


def _ok(rank: int, steps: int) -> dict:
    return {"rank": rank, "status": "ok", "steps_completed": steps, "step_times_s": [0.1]}


def _failed(rank: int, exc: str, message: str, tb: str = "", step: int | None = 4) -> dict:
    failure = {"exception_type": exc, "message": message, "traceback": tb, "phase": "train", "step": step}
    return {"rank": rank, "status": "failed", "steps_completed": step, "failure": failure}


SPEC_9 = dict(warmup_steps=3, timed_steps=3, memory_steps=1, profile_steps=2)  # 9 optimizer steps


def test_t07_a_rank_that_stopped_early_is_the_cause_and_the_gloo_error_its_consequence():
    spec = _spec(**SPEC_9)
    ranks = [_failed(0, "RuntimeError", GLOO, COLLECTIVE_TB, step=4), _ok(1, 4)]
    out = summarize_ranks(spec, ranks, returncode=1, timed_out=False, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "early-exit")
    assert out["reason"].startswith("rank 1 stopped early at step 4 of 9 (fewer steps than asked)")
    assert "consequence" in out["reason"] and "rank 0: RuntimeError: [/__w/pytorch" in out["reason"]
    assert "hung" not in out["reason"]
    f = out["failure"]
    assert (f["rank"], f["step"], f["steps_asked"], f["phase"]) == (1, 4, 9, "train")
    assert (f["consequence"]["rank"], f["consequence"]["error_kind"]) == (0, "collective")


def test_t07_when_the_others_waited_until_the_timeout_the_early_rank_is_still_the_cause():
    spec = _spec(**SPEC_9, timeout_s=30)
    out = summarize_ranks(spec, [_ok(1, 4)], returncode=-9, timed_out=True, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "early-exit")
    assert "rank 1 stopped early at step 4 of 9" in out["reason"] and "until timeout_s=30 s" in out["reason"]


def test_ranks_that_all_stopped_early_together_are_not_an_ok_point():
    """Every rank stopped at step 5 of 9 (e.g. an EarlyStoppingCallback on all ranks): no collective failed, but the
    windows after step 5 never ran, so the numbers are not those of the point asked for."""
    spec = _spec(**SPEC_9)
    out = summarize_ranks(spec, [_ok(0, 5), _ok(1, 5)], returncode=0, timed_out=False, log_tail="")
    assert (out["status"], out["error_kind"]) == ("error", "early-exit")
    assert out["reason"].startswith("every rank stopped early at step 5 of 9 (fewer steps than asked)")
    assert "other ranks" not in out["reason"]
    assert out["failure"]["ranks_stopped_early"] == {"0": 5, "1": 5}


def test_ranks_that_all_ran_every_step_are_not_early():
    spec = _spec(**SPEC_9)
    out = summarize_ranks(spec, [_ok(0, 9), _ok(1, 9)], returncode=0, timed_out=False, log_tail="")
    assert out["status"] == "ok" and out["reason"] is None
    # a genuine failure next to a rank that finished every step keeps its own kind
    ranks = [_failed(0, "RuntimeError", GLOO, COLLECTIVE_TB), _ok(1, 9)]
    assert summarize_ranks(spec, ranks, returncode=1, timed_out=False, log_tail="")["error_kind"] == "collective"


def test_a_sigkilled_rank_keeps_its_rank_and_step_from_its_step_file(tmp_path):
    spec = _spec(**SPEC_9)
    write_rank_step(tmp_path, 0, 3)
    for step in range(3):  # rank 1 finished steps 0, 1 and 2 (file holds 3), then was killed during step 3
        write_rank_step(tmp_path, 1, step + 1)
    steps = read_rank_steps(tmp_path)
    assert steps == {0: 3, 1: 3}
    ranks = [_failed(0, "RuntimeError", GLOO, COLLECTIVE_TB, step=3)]
    out = summarize_ranks(spec, ranks, returncode=1, timed_out=False, log_tail=TORCHRUN_SUMMARY, steps=steps)
    assert (out["status"], out["error_kind"]) == ("error", "crash")
    f = out["failure"]
    assert (f["rank"], f["step"], f["phase"], f["ranks_missing"]) == (1, 3, "train", [1])
    assert out["reason"].startswith("rank 1 died at step 3 of 9 without writing its results: killed (SIGKILL)")


#: torchrun's summary when rank 1 was SIGKILLed and rank 0, blocked in its next collective, was stopped by torchrun's
#: SIGTERM before it could write its rank file (seen in CI on a loaded machine)
BOTH_MISSING_SUMMARY = """
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 28742)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 28742
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 28743)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 28743
"""


def test_when_both_ranks_left_no_file_the_one_a_signal_other_than_torchruns_sigterm_ended_is_the_cause(tmp_path):
    spec = _spec(**SPEC_9)
    write_rank_step(tmp_path, 0, 2)
    write_rank_step(tmp_path, 1, 2)
    out = summarize_ranks(
        spec, [], returncode=1, timed_out=False, log_tail=BOTH_MISSING_SUMMARY, steps=read_rank_steps(tmp_path)
    )
    f = out["failure"]
    assert (f["rank"], f["step"], f["phase"], f["ranks_missing"]) == (1, 2, "train", [0, 1])
    assert out["reason"].startswith("rank 1 died at step 2 of 9 without writing its results: killed (SIGKILL)")
    # without a summary that tells them apart, both are named
    plain = summarize_ranks(spec, [], returncode=-9, timed_out=False, log_tail="Signal 9 (SIGKILL) received", steps={})
    assert plain["failure"]["ranks_missing"] == [0, 1] and plain["reason"].startswith("ranks 0, 1 died")


def test_a_rank_killed_before_training_began_is_said_to_have_died_in_setup():
    spec = _spec(**SPEC_9)
    out = summarize_ranks(spec, [], returncode=-9, timed_out=False, log_tail="Signal 9 (SIGKILL) received", steps={})
    assert out["reason"].startswith("ranks 0, 1 died before training began (setup)")
    assert (out["failure"]["rank"], out["failure"]["phase"], out["failure"]["step"]) == (0, "setup", None)


def test_step_files_are_read_as_ascii_integers_and_anything_else_is_skipped(tmp_path):
    write_rank_step(tmp_path, 2, 17)
    assert (tmp_path / "rank2.step").read_text() == "17"  # the whole content: digits, no newline
    (tmp_path / "rank5.step").write_text("")  # being replaced / unreadable as an integer
    (tmp_path / "rank6.step").write_text("x7")
    (tmp_path / ".rank7.step.tmp").write_text("9")
    (tmp_path / "rank1.json").write_text("{}")
    assert read_rank_steps(tmp_path) == {2: 17}
    assert read_rank_steps(tmp_path / "missing") == {}
    assert not list(tmp_path.glob(".rank2.step.tmp"))  # the temporary file was renamed onto the step file


@pytest.mark.parametrize("step", [0, 1, 12345])
def test_write_then_read_round_trips(tmp_path, step):
    write_rank_step(tmp_path, 0, step)
    assert read_rank_steps(tmp_path) == {0: step}
