"""Which points' ranks are forked from the pre-flight worker (sweeper.launchers.torchrun.rank_start): plain data
parallelism on CPU by default (measured equal to fresh ranks), every CPU point with SWEEPER_RANK_START=fork, none
with exec, never a CUDA point; a misspelt value is an error naming the allowed ones."""

from __future__ import annotations

import pytest

from sweeper.launchers.torchrun import EXEC, FORK, RANK_START_ENV, rank_start
from tests.unit.specs import make_spec


@pytest.mark.parametrize(
    ("overrides", "asked", "expected"),
    [
        ({}, None, FORK),
        ({}, "auto", FORK),
        ({"fsdp": "full_shard"}, None, EXEC),
        ({"zero": 2}, None, EXEC),
        ({"zero": 2}, "fork", FORK),
        ({"fsdp": "full_shard"}, "fork", FORK),
        ({}, "exec", EXEC),
        ({"device": "cuda"}, None, EXEC),
        ({"device": "cuda"}, "fork", EXEC),
    ],
)
def test_rank_start(monkeypatch, overrides, asked, expected):
    if asked is None:
        monkeypatch.delenv(RANK_START_ENV, raising=False)
    else:
        monkeypatch.setenv(RANK_START_ENV, asked)
    assert rank_start(make_spec(**overrides)) == expected


def test_a_misspelt_rank_start_names_the_allowed_values(monkeypatch):
    monkeypatch.setenv(RANK_START_ENV, "forked")
    with pytest.raises(ValueError, match="expected auto, fork or exec"):
        rank_start(make_spec())


def test_a_misspelt_rank_start_stops_the_sweep_before_any_point(monkeypatch, capsys):
    from sweeper.hydra_callbacks import refuse_bad_rank_start

    monkeypatch.setenv(RANK_START_ENV, "forked")
    with pytest.raises(SystemExit) as stopped:
        refuse_bad_rank_start()
    assert stopped.value.code == 2
    assert "SWEEPER_RANK_START='forked': expected auto, fork or exec" in capsys.readouterr().err
    monkeypatch.setenv(RANK_START_ENV, "exec")
    refuse_bad_rank_start()  # a valid value: nothing said, nothing stopped
    assert capsys.readouterr().err == ""
