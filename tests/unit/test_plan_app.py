"""``python -m sweeper.plan`` in-process: the planning grid, the rows, the files. Configs are composed by Hydra from
``conf/plan.yaml`` and the real catalogue; every prediction is the real model's (:mod:`sweeper.capacity.predict`)."""

from __future__ import annotations

import pandas as pd
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

import sweeper.plan.__main__  # noqa: F401 - registers hydra/sweeper=sweeper_plan, which conf/plan.yaml selects
from sweeper.paths import conf_dir
from sweeper.plan.app import make_plan
from sweeper.plan.points import ENGINES, default_axes, engine_label, expand, named_keys, plan_points
from sweeper.plan.rows import COLUMNS, plan_frame, term_columns
from sweeper.units import GIB

BASE = ["model=llama-2-7b", "cluster=h100-80gb", "seq_len=4096"]
#: The columns the issue's interface promises in plan.csv.
INTERFACE = [
    "fsdp",
    "zero",
    "gc",
    "precision",
    "fits",
    "max_per_device_batch_size",
    "predicted_peak_bytes",
    "predicted_tokens_per_s_per_device",
]


@pytest.fixture(scope="module")
def loader():
    GlobalHydra.instance().clear()
    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir())))


def plan(loader, *overrides: str) -> pd.DataFrame:
    """The plan of one command line without ``-m`` (what the task function does, without the files)."""
    cfg = loader.load_configuration("plan", overrides=list(overrides), run_mode=RunMode.RUN)
    return plan_frame(plan_points(expand([cfg], named_keys(overrides))))


def test_without_grid_keys_the_plan_covers_six_engines_with_and_without_checkpointing():
    combos = default_axes(named_keys(BASE))
    assert len(combos) == len(ENGINES) * 2 == 12
    assert {engine_label(c["fsdp"], c["zero"]) for c in combos} == {
        "DDP",
        "ZeRO-1",
        "ZeRO-2",
        "ZeRO-3",
        "FSDP full_shard",
        "FSDP shard_grad_op",
    }


@pytest.mark.parametrize(
    ("overrides", "n"),
    [(["gc=true"], 6), (["fsdp=full_shard"], 2), (["zero=3", "gc=false"], 1), (["+fsdp=none", "~gc"], 1)],
)
def test_a_grid_key_given_on_the_command_line_replaces_that_axis_of_the_default_grid(overrides, n):
    assert len(default_axes(named_keys([*BASE, *overrides]))) == n


def test_llama_2_7b_on_8_h100_has_a_row_per_grid_point_with_the_interface_columns(loader):
    df = plan(loader, *BASE)
    # 6 engines x 2 gc, and ZeRO-1/2 (AutoTP's engines modelled in bf16) at tp=2, 4, 8 (32 heads, 8 GPUs) x 2 gc
    assert (
        len(df) == 12 + 12 and set(INTERFACE) <= set(df.columns) and list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    )
    assert (df["status"] == "planned").all()
    assert (df["world_size"] == 8).all() and (df["ranks_per_node"] == 8).all()  # one node of the cluster's 8 GPUs
    assert (df["predicted_device_mem_bytes"] == int(79.19 * GIB)).all()
    ddp = df[(df["fsdp"] == "none") & (df["zero"] == 0)]
    assert not ddp["fits"].any() and (ddp["max_per_device_batch_size"] == 0).all()  # 16 bytes/param do not fit
    sharded = df[df["fsdp"] == "full_shard"]
    assert sharded["fits"].all() and (sharded["max_per_device_batch_size"] >= 1).all()
    assert (df["predicted_tokens_per_s_per_device"] > 0).all() and (df["predicted_train_days"] > 0).all()
    # the breakdown adds up to what must fit on the device
    terms = df[term_columns(df)].fillna(0).sum(axis=1)
    assert (terms == df["predicted_device_bytes"]).all()


def test_nodes_and_ranks_per_node_are_point_keys_that_override_the_clusters_node(loader):
    df = plan(loader, *BASE, "nodes=2", "ranks_per_node=4", "gc=true", "fsdp=full_shard")
    assert df[["nodes", "ranks_per_node", "world_size"]].values.tolist() == [[2, 4, 8]]


def test_a_combination_the_gate_refuses_is_a_row_with_the_reason_and_no_prediction(loader):
    df = plan(loader, *BASE, "fsdp=full_shard", "zero=3", "gc=true")
    row = df.iloc[0]
    assert (row["status"], row["rule"]) == ("invalid", "G04")
    assert "fsdp=full_shard together with zero=3" in row["reason"]
    assert pd.isna(row["fits"]) and pd.isna(row["predicted_peak_bytes"])


def test_bf16_on_v100_is_refused_and_fp16_is_planned(loader):
    refused = plan(loader, "model=llama-3.2-1b", "cluster=v100-32gb", "seq_len=2048", "gc=true")
    assert set(refused["status"]) == {"unsupported"} and set(refused["rule"]) == {"H03"}
    planned = plan(loader, "model=llama-3.2-1b", "cluster=v100-32gb", "seq_len=2048", "gc=true", "precision=fp16")
    assert (planned["status"] == "planned").all() and (planned["predicted_tokens_per_s_per_device"] > 0).all()


def test_an_unknown_device_peak_leaves_throughput_empty_and_says_why(loader):
    df = plan(loader, *BASE, "gc=true", "fsdp=full_shard", "cluster.gpu_name=Mystery Accelerator 9000")
    row = df.iloc[0]
    assert row["status"] == "planned" and bool(row["fits"]) is True  # memory is still predicted
    assert pd.isna(row["predicted_tokens_per_s_per_device"]) and pd.isna(row["predicted_train_days"])
    assert "unknown device 'Mystery Accelerator 9000'" in row["predicted_note"]


def test_per_device_batch_size_auto_plans_the_largest_batch_predicted_to_fit(loader):
    df = plan(loader, *BASE, "gc=true", "fsdp=full_shard", "per_device_batch_size=auto")
    row = df.iloc[0]
    assert row["per_device_batch_size"] == row["max_per_device_batch_size"] >= 1 and bool(row["fits"]) is True


def test_the_files_escape_outside_text_and_label_both_memory_units(loader, tmp_path, capsys):
    name = "NVIDIA H100 80GB HBM3 *bold* [x](y) <b>|"
    cfg = loader.load_configuration("plan", overrides=[*BASE, f"cluster.gpu_name='{name}'"], run_mode=RunMode.RUN)
    df = make_plan(expand([cfg], named_keys([*BASE, "gc=true", "fsdp=full_shard"])), tmp_path)
    text = (tmp_path / "plan.md").read_text()
    assert r"NVIDIA H100 80GB HBM3 \*bold\* \[x\](y) \<b\>\|" in text
    assert "79.19 GiB per device as torch reports it" in text and 'the vendor labels it "80 GB"' in text
    assert (tmp_path / "plan.png").stat().st_size > 0
    assert pd.read_csv(tmp_path / "plan.csv")["predicted_peak_bytes"].tolist() == df["predicted_peak_bytes"].tolist()
    out = capsys.readouterr().out
    assert name in out and out.strip().splitlines()[-1].startswith(f"Plan: {tmp_path / 'plan.md'}")


def test_the_plan_answers_first_with_the_fastest_configuration_predicted_to_fit(loader, tmp_path, capsys):
    """The answer a user plans for, before the tables: the fewest days among the rows that fit (at their largest
    batch), rows within 5 % of it named, the ones that do not fit never chosen."""
    from sweeper.plan.answer import answer_lines
    from sweeper.plan.table import key_names

    cfg = loader.load_configuration("plan", overrides=BASE, run_mode=RunMode.RUN)
    df = make_plan(expand([cfg], named_keys(BASE)), tmp_path)  # the six engines, with and without checkpointing
    fits = df[df["fits"] == True]  # noqa: E712 - a nullable column
    best = fits.loc[fits["predicted_train_days_at_max_batch"].astype(float).idxmin()]
    assert df[df["engine"] == "DDP"]["fits"].eq(False).all()  # 7B DDP does not fit an H100: never the answer
    line = answer_lines(df, key_names(df))[0]
    label = f"{best['engine']} gc={str(bool(best['gc'])).lower()}"
    assert line.startswith(f"Answer: fastest predicted to fit: {label} at per_device_batch_size="), line
    assert f"{int(best['max_per_device_batch_size'])} (the largest predicted to fit)" in line
    assert f"{float(best['predicted_train_days_at_max_batch']):,.0f} days" in line
    assert "A prediction: measure it before relying on it" in line
    devices = f"on {int(best['world_size'])} devices (1 node(s) x {int(best['ranks_per_node'])})"
    assert devices in line, line  # the days are of that many devices
    if int(best["max_per_device_batch_size"]) != int(best["per_device_batch_size"]):
        # the planned batch's bytes would not be the recommended batch's: only that it fits the usable memory
        usable = float(best["predicted_device_mem_bytes"]) * (1 - float(best["predicted_margin"])) / GIB
        assert f"(within the usable {usable:,.2f} GiB per device)" in line, line
    md = (tmp_path / "plan.md").read_text().split("\n\n")
    assert md[2].splitlines()[0] == f"**{line}**", md[2]  # right after the title and the command
    assert capsys.readouterr().out.splitlines()[1] == line  # the terminal: right under the title


def test_the_plan_says_when_nothing_fits_and_when_everything_was_refused(loader):
    from sweeper.plan.answer import answer_lines
    from sweeper.plan.table import key_names

    df = plan(loader, *BASE, "fsdp=none", "gc=true")  # DDP: a full 7B model state per rank
    line = answer_lines(df, key_names(df))[0]
    assert line.startswith("Answer: no configuration is predicted to fit. The smallest, DDP gc=true, needs "), line
    refused = plan(loader, "model=llama-2-7b", "cluster=v100-32gb", "seq_len=4096", "fsdp=none", "precision=bf16")
    assert answer_lines(refused, key_names(refused)) == [
        "Answer: none: every configuration was refused before the model (the reasons are below)"
    ]


def test_a_configuration_that_fits_with_an_unknown_throughput_is_counted_not_passed_over_in_silence(loader):
    """ZeRO-3 with the optimizer offloaded fits, but its time is outside the model: the answer names the fastest of
    the others and says one configuration that fits was not ranked (it may be faster)."""
    from sweeper.plan.answer import answer_lines
    from sweeper.plan.table import key_names

    offload = plan(
        loader, *BASE, "zero=3", "gc=true", "+deepspeed_config.zero_optimization.offload_optimizer.device=cpu"
    )
    assert bool(offload["fits"].iloc[0]) is True and pd.isna(offload["predicted_train_days"].iloc[0])
    sharded = plan(loader, *BASE, "fsdp=full_shard", "gc=true")
    df = pd.concat([offload, sharded], ignore_index=True)
    lines = answer_lines(df, key_names(df))
    assert lines[0].startswith("Answer: fastest predicted to fit: FSDP full_shard gc=true"), lines
    assert lines[1] == (
        "  1 other configuration(s) predicted to fit have an unknown throughput and are not ranked (see the notes): "
        "one of them may be faster"
    ), lines


def test_an_unknown_fit_is_never_answered_as_does_not_fit():
    """Issue 36: a plan whose fits are all unknown (no device memory for the cluster, a model the memory model
    cannot count) answered "no configuration is predicted to fit"."""
    import pandas as pd

    from sweeper.plan.answer import answer_lines

    base = {"status": "planned", "model": "m", "cluster": "c", "engine": "DDP", "gc": False}
    rows = [
        {**base, "fits": None, "predicted_device_bytes": 2**30},
        {**base, "engine": "ZeRO-3", "fits": None, "predicted_device_bytes": 2**29},
    ]
    (line,) = answer_lines(pd.DataFrame(rows), ["gc"])
    assert line.startswith("Answer: whether any configuration fits is unknown"), line
    assert "no configuration is predicted to fit" not in line and "ZeRO-3 gc=false" in line
    mixed = answer_lines(pd.DataFrame([{**rows[0], "fits": False}, rows[1]]), ["gc"])
    assert mixed[0].startswith("Answer: no configuration is predicted to fit of the 1 whose fit is known"), mixed
    assert "1 configuration(s) with an unknown fit" in mixed[1]
