"""Every key a plan sweeps is a column of ``plan.csv`` and of the plan table (docs/cases.md#u17): points that differ
only in a ``plan.*``, passthrough or cluster key are rows told apart by that key. Configs are composed by Hydra from
``conf/plan.yaml`` and the real catalogue; the predictions are the real model's."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

import sweeper.plan.__main__  # noqa: F401 - registers hydra/sweeper=sweeper_plan, which conf/plan.yaml selects
from sweeper.paths import conf_dir
from sweeper.plan.app import make_plan
from sweeper.plan.points import expand, named_keys, plan_points
from sweeper.plan.rows import COLUMNS, axis_columns, plan_axes, plan_frame
from sweeper.plan.table import main_table

OFFLOAD = "deepspeed_config.zero_optimization.offload_optimizer.device"


@pytest.fixture(scope="module")
def loader():
    GlobalHydra.instance().clear()
    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir())))


def multirun(loader, fixed: list[str], swept: dict[str, list[str]]):
    """The points of ``-m <fixed> key=a,b ...``, composed one by one as the plan's sweeper composes them."""
    configs = []
    for values in itertools.product(*swept.values()):
        overrides = [*fixed, *(f"{k}={v}" for k, v in zip(swept, values, strict=True))]
        configs.append(loader.load_configuration("plan", overrides=overrides, run_mode=RunMode.RUN))
    named = named_keys(fixed) | {k.lstrip("+") for k in swept}
    return plan_points(expand(configs, named))


U17 = ["model=llama-2-7b", "cluster=l40s-48gb", "seq_len=2048", "zero=3", "gc=true"]


def test_rows_that_differ_only_in_a_passthrough_and_a_plan_key_are_told_apart_by_those_columns(loader):
    points = multirun(loader, U17, {f"+{OFFLOAD}": ["none", "cpu"], "plan.efficiency": ["0.3", "0.4"]})
    assert axis_columns(points) == [OFFLOAD, "plan.efficiency"]
    df = plan_frame(points)
    assert plan_axes(df) == [OFFLOAD, "plan.efficiency"]
    assert list(zip(df[OFFLOAD], df["plan.efficiency"], strict=True)) == [
        ("none", 0.3),
        ("none", 0.4),
        ("cpu", 0.3),
        ("cpu", 0.4),
    ]
    # no two rows are the same in the columns a reader sees
    keys = df[[*COLUMNS[: COLUMNS.index("world_size") + 1], *plan_axes(df)]].astype(str)
    assert not keys.duplicated().any()
    shown = main_table(df)
    assert {OFFLOAD, "plan.efficiency"} <= set(shown.columns)
    assert not shown.astype(str).duplicated().any()


def test_the_axis_columns_reach_plan_csv_and_plan_md(loader, tmp_path):
    configs = [
        loader.load_configuration("plan", overrides=[*U17, f"+training_args.optim={o}"], run_mode=RunMode.RUN)
        for o in ("adamw_torch", "sgd")
    ]
    df = make_plan(expand(configs, named_keys([*U17, "+training_args.optim=sgd"])), tmp_path)
    csv = pd.read_csv(tmp_path / "plan.csv")
    assert list(csv["training_args.optim"]) == ["adamw_torch", "sgd"] == list(df["training_args.optim"])
    assert "training_args.optim" in (tmp_path / "plan.md").read_text()


def test_a_model_config_key_that_only_follows_the_model_is_not_a_column_but_one_swept_within_a_model_is(loader):
    two_models = multirun(
        loader, ["cluster=h100-80gb", "seq_len=1024", "gc=true", "zero=3"], {"model": ["llama-2-7b", "gpt2"]}
    )
    assert not [c for c in axis_columns(two_models) if c.startswith(("model.config.", "model_type"))]
    widths = multirun(
        loader,
        ["cluster=h100-80gb", "seq_len=1024", "gc=true", "zero=3", "model=llama-2-7b"],
        {"model.config.num_hidden_layers": ["16", "32"]},
    )
    assert axis_columns(widths) == ["model.config.num_hidden_layers"]


def test_a_cluster_key_swept_for_one_cluster_is_a_column_and_the_clusters_own_numbers_are_not(loader):
    clusters = multirun(loader, U17, {"cluster": ["l40s-48gb", "a100-80gb"]})
    assert axis_columns(clusters) == []
    memory = multirun(loader, U17, {"cluster.gpu_mem_gib": ["40", "44.52"]})
    assert axis_columns(memory) == ["cluster.gpu_mem_gib"]
    df = plan_frame(memory)
    assert list(df["cluster.gpu_mem_gib"]) == [40.0, 44.52]
