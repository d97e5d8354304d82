"""Secrets on the command line become environment references (sweeper.redact): the rule, the three placements,
the round trip to the rank side, and the guards (scrub, the W&B writer's environment, shell-quoted commands)."""

from __future__ import annotations

import json
import os

import pytest
from omegaconf import OmegaConf

from sweeper import redact
from sweeper.point.identity import point_id
from sweeper.results.atomic import write_json_atomic, write_text_atomic
from tests.unit.specs import TINY, make_spec

TOKEN = "hf_unitTESTtoken0123456789abcdef"
KEY = "unit-api-key-5e1c"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for k in [k for k in os.environ if k.startswith(redact.ENV_PREFIX)]:
        monkeypatch.delenv(k)
    monkeypatch.setattr(redact, "_SEEN", set())
    yield
    for k in [k for k in os.environ if k.startswith(redact.ENV_PREFIX)]:
        os.environ.pop(k, None)


@pytest.mark.parametrize(
    ("path", "value", "secret"),
    [
        ("training_args.hub_token", TOKEN, True),  # transformers' own *_token rule
        ("training_args.push_to_hub_token", TOKEN, True),
        ("callbacks.0.api_key", KEY, True),
        ("callbacks.0.apikey", KEY, True),
        ("deepspeed_config.x.password", "pw", True),
        ("callbacks.0.client_secret", "s", True),
        ("callbacks.0.token", 123456, True),  # a certainly secret name: numbers too
        ("callbacks.0.token_file", "/run/tok", True),  # mentions a token: its strings
        ("model.config.pad_token_id", 0, False),  # ids and counts are numbers
        ("training_args.include_tokens_per_second", True, False),
        ("training_args.average_tokens_across_devices", True, False),
        ("train_tokens", 1.0e12, False),
        ("training_args.hub_token", None, False),
        ("training_args.hub_token", "", False),
        ("training_args.hub_token", "${oc.env:HF_TOKEN}", False),  # an interpolation is not a value
        ("training_args.max_grad_norm", 0.5, False),
        ("callbacks.0.token_digest", 7, False),
    ],
)
def test_the_rule_is_the_key_and_a_value(path, value, secret):
    assert redact.is_secret_value(path, value) is secret


def test_an_override_a_passthrough_dict_and_a_nested_value_become_references():
    argv = [
        "-m",
        f"+training_args.hub_token={TOKEN}",
        f"+fsdp_config={{cpu_offload:false,api_key:{KEY}}}",
        f"+callbacks=[{{_target_:m.Cb,api_key:{KEY},x:1,name:'a b'}}]",
        "fsdp=none,full_shard",
        "model.config.pad_token_id=0",
    ]
    out = redact.redact_argv(argv)
    joined = " ".join(out)
    assert TOKEN not in joined and KEY not in joined
    assert out[0] == "-m" and out[4:] == argv[4:]  # everything else as typed
    assert out[1] == "+training_args.hub_token=${oc.env:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN}"
    assert out[2] == "+fsdp_config={cpu_offload:false,api_key:${oc.env:SWEEPER_SECRET_FSDP_CONFIG_API_KEY}}"
    assert (
        out[3]
        == (
            "+callbacks=[{_target_:m.Cb,api_key:${oc.env:SWEEPER_SECRET_CALLBACKS_0_API_KEY},x:1,name:a\\ b}]"  # Hydra's escaping
        )
    )
    assert os.environ["SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN"] == TOKEN
    assert os.environ["SWEEPER_SECRET_CALLBACKS_0_API_KEY"] == KEY
    # Hydra parses what it is given back to the same structure, the references as interpolations
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(out[1:4])
    assert parsed[2].value()[0]["api_key"] == "${oc.env:SWEEPER_SECRET_CALLBACKS_0_API_KEY}"
    assert parsed[2].value()[0]["name"] == "a b"


def test_a_sweep_over_a_secret_is_refused_without_the_value():
    with pytest.raises(redact.SecretError) as e:
        redact.redact_argv([f"+training_args.hub_token={TOKEN},other"])
    assert "training_args.hub_token" in str(e.value) and TOKEN not in str(e.value)


def test_the_spec_holds_references_whatever_way_the_secret_came():
    """A secret from a config file or an interpolation reaches from_config resolved: the spec keeps the reference,
    the identity is the same as for the command-line reference, and the rank side gets the value back."""
    spec = make_spec(
        training_args={"hub_token": TOKEN, "max_grad_norm": 0.5}, callbacks=[{"_target_": "m.Cb", "api_key": KEY}]
    )
    text = str(spec.to_dict())
    assert TOKEN not in text and KEY not in text
    assert spec.training_args["hub_token"] == redact.reference("training_args.hub_token")
    assert spec.training_args["max_grad_norm"] == 0.5
    as_reference = make_spec(
        training_args={"hub_token": redact.reference("training_args.hub_token"), "max_grad_norm": 0.5},
        callbacks=[{"_target_": "m.Cb", "api_key": redact.reference("callbacks.0.api_key")}],
    )
    assert point_id(as_reference) == point_id(spec)
    assert redact.reveal(spec.training_args) == {"hub_token": TOKEN, "max_grad_norm": 0.5}
    assert redact.reveal(spec.callbacks) == [{"_target_": "m.Cb", "api_key": KEY}]
    # another token is the same point: a secret is not identity
    other = make_spec(
        training_args={"hub_token": "hf_another", "max_grad_norm": 0.5},
        callbacks=[{"_target_": "m.Cb", "api_key": KEY}],
    )
    assert point_id(other) == point_id(spec)
    # a secret in the model's config (model.config.*) too
    with_model = make_spec(model={**TINY, "config": {"api_key": KEY}})
    assert with_model.model_config["api_key"] == redact.reference("model.config.api_key")


def test_reveal_names_the_missing_variable():
    with pytest.raises(redact.SecretError, match="SWEEPER_SECRET_CALLBACKS_0_API_KEY"):
        redact.reveal({"api_key": redact.reference("callbacks.0.api_key")})


def test_hydra_sweeper_escaping_and_unresolved_task_overrides():
    escaped = r"+training_args.hub_token=$\{oc.env\:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN\}"
    assert (
        redact.plain_references(escaped) == "+training_args.hub_token=${oc.env:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN}"
    )
    os.environ["SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN"] = TOKEN
    node = OmegaConf.create(
        {"overrides": {"task": ["+training_args.hub_token=${oc.env:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN}"]}}
    )
    assert list(node.overrides.task) == [f"+training_args.hub_token={TOKEN}"]  # why the node is never iterated
    assert redact.task_overrides(node) == ["+training_args.hub_token=${oc.env:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN}"]
    assert redact.missing_variables(redact.task_overrides(node)) == []
    del os.environ["SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN"]
    assert redact.missing_variables([escaped]) == ["SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN"]


def test_the_writers_scrub_known_values_and_the_wandb_child_gets_none(tmp_path):
    redact.redact_argv([f"+callbacks=[{{_target_:m.Cb,api_key:{KEY}}}]"])
    write_json_atomic(tmp_path / "a.json", {"error": f"library said: bad key {KEY}"})
    write_text_atomic(tmp_path / "b.txt", f"echo {KEY}")
    for name in ("a.json", "b.txt"):
        text = (tmp_path / name).read_text()
        assert KEY not in text and redact.REDACTED in text
    env = redact.without_secrets({**os.environ, "PATH": "/bin"})
    assert not any(k.startswith(redact.ENV_PREFIX) for k in env) and env["PATH"] == "/bin"


def test_a_short_value_is_never_scrubbed_out_of_a_record(tmp_path):
    """The last guard replaces text; a secret of a few characters would corrupt a record's numbers (``"0"``)."""
    redact.redact_argv(["+callbacks=[{_target_:m.Cb,api_key:0}]", "+training_args.hub_token=ab"])
    write_json_atomic(tmp_path / "r.json", {"steps": 10, "loss": 0.5, "name": "ab cd"})
    assert json.loads((tmp_path / "r.json").read_text()) == {"steps": 10, "loss": 0.5, "name": "ab cd"}
