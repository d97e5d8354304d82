"""The pre-flight (docs/gate.md, "The pre-flight"): the libraries themselves refuse a point before any rank starts,
and the refusal names the sweeper key (docs/cases.md#u01, #u04-#u09). The real worker process
(``python -m sweeper.job.preflight``) builds the real TrainingArguments, FSDP plugin arguments, DeepSpeed config,
meta-device model and callbacks; the CLI tests run the real ``python -m sweeper``."""

from __future__ import annotations

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
]


@pytest.mark.parametrize(("case", "overrides", "keys", "words"), REFUSED)
def test_the_libraries_refuse_the_point_naming_the_sweeper_key(case, overrides, keys, words):
    e = preflight.refusal(spec(**overrides), CPU)
    assert e is not None, case
    assert list(e.keys) == keys and (e.status, e.kind) == ("invalid", "config"), case
    assert words in str(e) and str(e).startswith(keys[0]), (case, str(e))
    assert e.rule == (preflight.RULE_NO_EFFECT if case == "u01" else preflight.RULE_LIBRARY)


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
    ],
)
def test_what_the_libraries_accept_passes(overrides):
    assert preflight.refusal(spec(**overrides), CPU) is None


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
