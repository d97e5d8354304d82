"""The inverse question (``plan.deadline_days``, :mod:`sweeper.plan.deadline`): per cluster, the fewest nodes and
the cheapest configuration that trains ``train_tokens`` within the deadline. Configs are composed by Hydra from
``conf/plan.yaml`` and the real catalogue; every prediction is the real model's."""

from __future__ import annotations

import pandas as pd
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

import sweeper.plan.__main__  # noqa: F401 - registers hydra/sweeper=sweeper_plan, which conf/plan.yaml selects
from sweeper.paths import conf_dir
from sweeper.plan import deadline
from sweeper.plan.app import answer_deadline, require
from sweeper.plan.points import named_keys

LLAMA = ["model=llama-2-7b", "seq_len=4096", "train_tokens=2e12", "plan.deadline_days=30"]


@pytest.fixture(scope="module")
def loader():
    GlobalHydra.instance().clear()
    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir())))


def ask(loader, *overrides: str) -> tuple[pd.DataFrame, pd.DataFrame, deadline.Question, list]:
    cfg = loader.load_configuration("plan", overrides=list(overrides), run_mode=RunMode.RUN)
    named = named_keys(overrides)
    q = deadline.question(cfg, named)
    configs = deadline.on_clusters([cfg], named)
    answers, rows = deadline.answer(configs, named, q)
    return answers, rows, q, configs


def test_llama_2_7b_and_2e12_tokens_in_30_days_is_answered_for_every_catalogue_cluster(loader):
    answers, rows, q, configs = ask(loader, *LLAMA)
    assert list(sorted(answers["cluster"])) == sorted(deadline.CATALOGUE)
    met = answers[answers["status"] == deadline.MET]
    assert {"a100-80gb", "h100-80gb", "h200-141gb"} <= set(met["cluster"])
    assert (met["predicted_train_days"] <= 30).all() and (met["nodes"] >= 1).all()
    # GPU-hours first (no prices in the catalogue), and the clusters that cannot meet it last, with a reason
    assert list(met["predicted_gpu_hours"]) == sorted(met["predicted_gpu_hours"])
    assert list(answers["status"])[: len(met)] == [deadline.MET] * len(met)
    assert set(answers["status"][len(met) :]) <= {deadline.NOT_MET, deadline.NO_FIT}
    v100 = answers.set_index("cluster").loc["v100-32gb"]
    assert v100["status"] == deadline.NO_FIT and "bf16" in v100["reason"]  # the catalogue's V100 has no bf16
    # the fewest nodes: one node fewer meets the deadline with no configuration of the grid
    for _, a in met.iterrows():
        group = [c for c in configs if c.cluster.name == a["cluster"]]
        search = deadline._Cluster(group, named_keys(LLAMA), q)
        found = search.best(int(a["nodes"]))
        assert found is not None and found[1] == pytest.approx(a["predicted_train_days"])
        if a["nodes"] > 1:
            assert search.best(int(a["nodes"]) - 1) is None
    # GPU-hours = days x 24 x GPUs, and the rows behind every answer are in plan.csv's frame
    assert (met["predicted_gpu_hours"] - met["predicted_train_days"] * 24 * met["world_size"]).abs().max() < 1e-6 * (
        met["predicted_gpu_hours"].max()
    )
    assert {"nodes", "fits", "predicted_train_days_at_max_batch"} <= set(rows.columns) and len(rows) > len(answers)


def test_a_deadline_no_cluster_can_meet_on_the_nodes_allowed_is_an_answer_with_the_fastest_days(loader):
    answers, _, _, _ = ask(loader, *LLAMA, "cluster=h100-80gb", "plan.max_nodes=2")
    (a,) = answers.to_dict("records")
    assert a["status"] == deadline.NOT_MET and pd.isna(a["nodes"])
    assert "plan.max_nodes=2" in a["reason"] and "days on 2 node(s)" in a["reason"]


def test_nodes_given_answers_at_that_node_count_only(loader):
    answers, rows, _, _ = ask(loader, *LLAMA, "cluster=h100-80gb", "nodes=16")
    (a,) = answers.to_dict("records")
    assert a["status"] == deadline.MET and a["nodes"] == 16 and a["world_size"] == 128
    assert set(rows["nodes"]) == {16}


def test_with_a_price_on_every_cluster_the_cheapest_cluster_comes_first(loader):
    cfgs = []
    for name, price in (("h100-80gb", 10.0), ("a100-80gb", 1.0)):
        overrides = [*LLAMA, f"cluster={name}", f"cluster.price_per_gpu_hour={price}"]
        cfgs.append(loader.load_configuration("plan", overrides=overrides, run_mode=RunMode.RUN))
    named = named_keys([*LLAMA, "cluster=x"])
    answers, _ = deadline.answer(cfgs, named, deadline.question(cfgs[0], named))
    assert list(answers["cluster"]) == ["a100-80gb", "h100-80gb"]  # more GPU-hours, a tenth of the price
    assert answers["predicted_cost"].tolist() == pytest.approx(
        (answers["predicted_gpu_hours"] * answers["price_per_gpu_hour"]).tolist()
    )
    assert answers["predicted_gpu_hours"].iloc[0] > answers["predicted_gpu_hours"].iloc[1]


def test_the_files_and_an_ill_posed_question(loader, tmp_path, capsys):
    cfg = loader.load_configuration("plan", overrides=[*LLAMA, "cluster=h100-80gb"], run_mode=RunMode.RUN)
    answers = answer_deadline([cfg], named_keys([*LLAMA, "cluster=h100-80gb"]), tmp_path)
    assert set(pd.read_csv(tmp_path / "deadline.csv")["cluster"]) == {"h100-80gb"} == set(answers["cluster"])
    text = (tmp_path / "deadline.md").read_text()
    assert text.startswith("# Deadline plan: llama-2-7b") and "## Answer" in text
    assert (tmp_path / "plan.csv").stat().st_size > 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(f"Answer: {tmp_path / 'deadline.md'}")
    bad = loader.load_configuration("plan", overrides=[*LLAMA[:-1], "plan.deadline_days=0"], run_mode=RunMode.RUN)
    with pytest.raises(SystemExit) as e:
        answer_deadline([bad], named_keys(LLAMA), tmp_path / "bad")
    assert e.value.code == 2 and "plan.deadline_days" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_the_deadline_question_needs_no_cluster_but_a_plain_plan_does(capsys):
    require({"model", "seq_len", "plan.deadline_days"})  # no exit
    with pytest.raises(SystemExit):
        require({"model", "seq_len"})
    assert "cluster=" in capsys.readouterr().err
