"""The pre-flight (docs/gate.md, "The pre-flight"): the libraries themselves refuse a point before any rank starts,
and the refusal names the sweeper key (docs/cases.md#u01, #u04-#u09). The real worker process
(``python -m sweeper.job.preflight``) builds the real TrainingArguments, FSDP plugin arguments, DeepSpeed config,
meta-device model and callbacks; the CLI tests run the real ``python -m sweeper``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.config.target import Target
from sweeper.point import preflight
from tests.unit.specs import make_spec as _make_spec

CPU = Target("local", "cpu")
TINY = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "model" / "tiny.yaml"))


def spec(**kw):
    """The tiny model's point with ``kw`` merged (``model={"config": {...}}`` merges into tiny's config)."""
    model = kw.pop("model", {})
    return _make_spec(model={**TINY, **model, "config": {**TINY["config"], **model.get("config", {})}}, **kw)


# (case, overrides, the keys named, words of the library's reason)
REFUSED = [
    ("u04", dict(model={"config": {"num_key_value_heads": 3}}), ["model.config.num_key_value_heads"], "size of tensor"),
    ("u05", dict(callbacks=[{"_target_": "no_such_module.Cb"}]), ["callbacks[0]"], "no module named 'no_such_module'"),
    ("u05", dict(callbacks=[{"_target_": "tests.faults.NoSuchClass"}]), ["callbacks[0]"], "not a missing package"),
    ("u05", dict(callbacks=[{"_target_": "tests.faults.HangRank", "not_an_arg": 1}]), ["callbacks[0]"], "not_an_arg"),
    ("u06", dict(seed=-1), ["seed"], "Seed must be between 0 and 2**32 - 1"),
    (
        "u07",
        dict(zero=2, deepspeed_config={"zero_optimization": {"stage3_max_live_parameters": "abc"}}),
        ["deepspeed_config.zero_optimization.stage3_max_live_parameters"],
        "valid integer",
    ),
    (
        "u08",
        dict(training_args={"dataloader_num_workers": -1}),
        ["training_args.dataloader_num_workers"],
        "non-negative",
    ),
    ("u09", dict(training_args={"tf32": True}), ["training_args.tf32"], "tf32 requires Ampere"),
    (
        "u01",
        dict(fsdp="full_shard", fsdp_config={"min_num_params": 1000}),
        ["fsdp_config.min_num_params"],
        "read only with fsdp_config.auto_wrap_policy=SIZE_BASED_WRAP",
    ),
    # parsed by DeepSpeed, never consumed on the Trainer's path (sweeper.job.preflight_resolved.DEEPSPEED_UNCONSUMED)
    (
        "ds-unconsumed",
        dict(zero=2, deepspeed_config={"dataloader_drop_last": True}),
        ["deepspeed_config.dataloader_drop_last"],
        "accelerate passes no training_data",
    ),
    (
        "ds-unconsumed",
        dict(zero=1, deepspeed_config={"pipeline": {"activation_checkpoint_interval": 2}}),
        ["deepspeed_config.pipeline.activation_checkpoint_interval"],
        "only for a PipelineModule",
    ),
    (
        "ds-unconsumed",
        dict(zero=2, deepspeed_config={"data_efficiency": {"data_sampling": {"num_workers": 2}}}),
        ["deepspeed_config.data_efficiency.data_sampling.num_workers"],
        "never builds",
    ),
]
RULES = {"u01": preflight.RULE_NO_EFFECT, "ds-unconsumed": preflight.RULE_UNCONSUMED}


@pytest.mark.parametrize(("case", "overrides", "keys", "words"), REFUSED)
def test_the_libraries_refuse_the_point_naming_the_sweeper_key(case, overrides, keys, words):
    e = preflight.refusal(spec(**overrides), CPU)
    assert e is not None, case
    assert list(e.keys) == keys and (e.status, e.kind) == ("invalid", "config"), case
    assert words in str(e) and str(e).startswith(keys[0]), (case, str(e))
    assert e.rule == RULES.get(case, preflight.RULE_LIBRARY)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        dict(fsdp="full_shard", fsdp_config={"cpu_offload": True}),  # changes the plugin: a real setting
        dict(fsdp="full_shard", fsdp_config={"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 1000}),
        dict(fsdp="full_shard", fsdp_config={"reshard_after_forward": True}),  # restates full_shard: never refused
        dict(zero=3, deepspeed_config={"zero_optimization": {"stage3_max_live_parameters": 1000}}),
        dict(zero=1),
        dict(callbacks=[{"_target_": "tests.faults.HangRank", "at_step": 2, "rank": 1}]),
        dict(seed=2**32 - 1, training_args={"dataloader_num_workers": 0, "max_grad_norm": 0.5}),
        dict(zero=2, deepspeed_config={"dataloader_drop_last": False}),  # DeepSpeed's default: restated, not refused
    ],
)
def test_what_the_libraries_accept_passes(overrides):
    assert preflight.refusal(spec(**overrides), CPU) is None


# (what the libraries resolve to the point without it, the same point written plainly)
RESOLVED_EQUAL = [
    # HF's "auto" reduce_bucket_size is hidden² (64² for the tiny model)
    (dict(zero=2, deepspeed_config={"zero_optimization": {"reduce_bucket_size": 4096}}), dict(zero=2)),
    (dict(zero=2, deepspeed_config={"zero_optimization": {"offload_optimizer": {"device": "none"}}}), dict(zero=2)),
    (dict(zero=2, deepspeed_config={"dataloader_drop_last": False}), dict(zero=2)),
    (dict(model={"config": {"rope_theta": 10000.0}}), {}),  # Llama's default
    (dict(model={"config": {"rope_theta": 10000}}), {}),
]


@pytest.mark.parametrize(("given", "plain"), RESOLVED_EQUAL)
def test_two_points_whose_resolved_objects_are_equal_are_one_point(given, plain):
    from sweeper.point.identity import point_id
    from sweeper.point.lifecycle import identity_of

    a, b = spec(**given), spec(**plain)
    assert point_id(a) != point_id(b)  # the specs differ as written
    assert identity_of(a, CPU) == identity_of(b, CPU)
    assert preflight.restating(a) and identity_of(a) == identity_of(b)  # remembered for the process


@pytest.mark.parametrize(
    "given",
    [
        dict(zero=2, deepspeed_config={"zero_optimization": {"reduce_bucket_size": 8192}}),
        dict(model={"config": {"rope_theta": 500000.0}}),
        dict(training_args={"max_grad_norm": 0.5}),
    ],
)
def test_an_entry_the_libraries_resolve_differently_is_a_point_of_its_own(given):
    from sweeper.point.lifecycle import identity_of

    plain = {k: v for k, v in given.items() if k == "zero"}
    assert not preflight.restating(spec(**given), CPU)
    assert identity_of(spec(**given), CPU) != identity_of(spec(**plain), CPU)


def test_a_refused_single_point_exits_2_before_any_rank_and_a_grid_records_it_as_config(sweeper_cli):
    run = sweeper_cli("model.config.num_key_value_heads=3")
    assert run.proc.returncode == 2, run.output[-2000:]
    assert "sweeper: invalid point (model.config.num_key_value_heads): model.config.num_key_value_heads=3" in (
        run.proc.stderr
    )
    assert not list(run.cwd.glob("**/rank*.json")) and not (run.cwd / "outputs").exists()
    grid = sweeper_cli("-m", "+training_args.dataloader_num_workers=-1,0", "timed_steps=3", "warmup_steps=1")
    assert grid.proc.returncode == 0, grid.output[-3000:]
    bad = grid.by(training_args={"dataloader_num_workers": -1})
    good = grid.by(training_args={"dataloader_num_workers": 0})
    assert (bad.status, bad.error_kind, bad.failure["rule"]) == ("invalid", "config", "F01")
    assert bad.failure["keys"] == ["training_args.dataloader_num_workers"]
    assert not list((grid.sweep_dir / "points" / bad.point_id).glob("rank*.json"))
    assert good.status == "ok"


def test_reset_stops_the_worker_and_the_next_question_starts_a_fresh_one():
    first = preflight.refusal(spec(seed=-1), CPU)
    assert first is not None and preflight._worker is not None
    old = preflight._worker.proc
    preflight.reset()
    assert old.poll() is not None and preflight._worker is None  # stopped, not left behind
    again = preflight.refusal(spec(seed=-1), CPU)
    assert again is not None and str(again) == str(first) and preflight._worker.proc is not old


def test_spec_files_written_while_the_worker_answers_are_removed_for_a_refused_point_and_an_earlier_one_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from sweeper.point.lifecycle import Prepared, begin_many, identity_of
    from sweeper.results.opening import open_sweep
    from sweeper.results.sweepdir import SPEC_FILE, SweepDir

    monkeypatch.setenv("SWEEPER_SWEEP_ID", "pf0001")  # open_sweep sets it for this process's children otherwise
    open_sweep(tmp_path, "multirun", 3, [])
    sweep = SweepDir(tmp_path)
    preflight.reset()  # a fresh worker: the spec files are written while it still imports the libraries
    ok, refused, earlier = spec(seed=1), spec(seed=-1), spec(seed=2**33)
    old = sweep.point(identity_of(earlier)) / SPEC_FILE
    old.parent.mkdir(parents=True)
    old.write_text('{"from": "an earlier attempt"}')
    out = begin_many([(s, [f"seed={s.seed}"], CPU) for s in (ok, refused, earlier)], sweep)
    assert isinstance(out[0], Prepared) and (out[0].pdir / SPEC_FILE).exists()
    assert json.loads((out[0].pdir / SPEC_FILE).read_text()) == ok.to_dict()
    for record, s in zip(out[1:], (refused, earlier), strict=True):
        assert (record.status, record.failure["keys"]) == ("invalid", ["seed"]), record
        assert sweep.read_record(identity_of(s)).status == "invalid"
    assert not (sweep.point(identity_of(refused)) / SPEC_FILE).exists()  # written ahead, removed again
    assert old.read_text() == '{"from": "an earlier attempt"}'  # not overwritten, not removed
