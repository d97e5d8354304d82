"""rank 0's trainer_run.json (sweeper.results.trainer_run): WandbCallback's config, with secrets never written."""

from __future__ import annotations

from sweeper.redact import REDACTED
from sweeper.results.trainer_run import (
    NUM_PARAMETERS_KEY,
    TRAINER_RUN_FILE,
    read_trainer_run,
    redacted,
    trainer_config,
    write_trainer_run,
)


def test_the_trainer_config_is_the_model_config_under_the_training_arguments_with_the_parameter_count():
    cfg = trainer_config({"learning_rate": 1e-4, "seed": 3}, {"learning_rate": "model's", "hidden_size": 64}, 123)
    assert cfg == {"learning_rate": 1e-4, "seed": 3, "hidden_size": 64, NUM_PARAMETERS_KEY: 123}
    assert NUM_PARAMETERS_KEY not in trainer_config({}, None, None)
    # what JSON cannot hold is written as its text, as json.dumps(default=str) would
    assert trainer_config({"path": object.__new__(type("P", (), {"__str__": lambda s: "p"}))}, None, None) == {
        "path": "p"
    }


def test_secret_values_are_redacted_at_every_level_and_transformers_placeholders_and_counts_kept():
    tree = {
        "hub_token": "<HUB_TOKEN>",  # TrainingArguments.to_dict's own placeholder
        "pad_token_id": 0,  # a count, not a secret
        "fsdp_config": {"nested": [{"api_key": "sk-live-1234567890"}]},
        "deepspeed": {"password": 12345678},
        "hf_token_value": "hf_abcdefghijk",
        "tokens_per_second": True,
    }
    out = redacted(tree)
    assert out["hub_token"] == "<HUB_TOKEN>" and out["pad_token_id"] == 0 and out["tokens_per_second"] is True
    assert out["fsdp_config"]["nested"][0]["api_key"] == REDACTED
    assert out["deepspeed"]["password"] == REDACTED and out["hf_token_value"] == REDACTED
    assert tree["fsdp_config"]["nested"][0]["api_key"] == "sk-live-1234567890"  # the input is left as it was


def test_written_atomically_read_back_and_an_unreadable_file_is_none(tmp_path):
    assert read_trainer_run(tmp_path) is None
    write_trainer_run(tmp_path, {"config": {"a": 1}, "started_at": 1.0, "step_ended_at": [2.0], "final": {}})
    assert read_trainer_run(tmp_path)["step_ended_at"] == [2.0]
    assert [p.name for p in tmp_path.iterdir()] == [TRAINER_RUN_FILE]  # no temporary file left
    (tmp_path / TRAINER_RUN_FILE).write_text("[1, 2]")
    assert read_trainer_run(tmp_path) is None
    (tmp_path / TRAINER_RUN_FILE).write_text("{not json")
    assert read_trainer_run(tmp_path) is None
