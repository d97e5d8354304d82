"""``python -m sweeper.plan`` with tensor parallelism (issue 34): the default grid adds the tp degrees the model and
the node allow, the answer may choose them, and plan.csv carries tp and dp. Configs composed by Hydra from
``conf/plan.yaml``; every number the real model's."""

from __future__ import annotations

import pandas as pd

from tests.unit.test_plan_app import loader, plan  # noqa: F401 - the module's Hydra loader fixture

SEVENTY_B = ["model=llama-2-70b", "cluster=h100-80gb", "nodes=8", "seq_len=4096"]


def test_the_default_grid_plans_llama_2_70b_at_every_legal_tp_degree(loader):  # noqa: F811
    df = plan(loader, *SEVENTY_B)
    tp_rows = df[df["tp"] > 1]
    # ZeRO-1 and ZeRO-2 (AutoTP's engines whose bf16 states are modelled) x tp 2, 4, 8 (64 heads, 8 KV heads,
    # 8 GPUs per node) x gc off/on
    assert len(tp_rows) == 2 * 3 * 2 and set(tp_rows["tp"]) == {2, 4, 8}
    assert (tp_rows["dp"] == 64 // tp_rows["tp"]).all() and (df[df["tp"] == 1]["dp"] == 64).all()
    assert set(tp_rows["engine"]) >= {"ZeRO-1 + TP 8", "ZeRO-2 + TP 4"}
    # TP divides the states a rank holds: ZeRO-1's predicted peak falls with every degree
    z1 = df[(df["zero"] == 1) & (~df["gc"])].set_index("tp")["predicted_peak_bytes"]
    assert z1[1] > z1[2] > z1[4] > z1[8]
    assert (tp_rows["status"] == "planned").all() and tp_rows["predicted_tokens_per_s_per_device"].notna().all()


def test_a_tp_degree_the_heads_or_the_node_do_not_allow_is_left_out_and_a_tied_head_gets_none(loader):  # noqa: F811
    small_node = plan(loader, "model=llama-2-70b", "cluster=h100-80gb", "ranks_per_node=4", "seq_len=4096")
    assert set(small_node["tp"]) == {1, 2, 4}
    tied = plan(loader, "model=llama-3.2-1b", "cluster=h100-80gb", "seq_len=4096")
    assert set(tied["tp"]) == {1}  # how AutoTP splits a tied output head is not measured: never guessed


def test_a_named_tp_on_a_tied_model_is_planned_as_unknown_with_the_reason(loader):  # noqa: F811
    df = plan(loader, "model=llama-3.2-1b", "cluster=h100-80gb", "seq_len=4096", "tp=2", "zero=1", "gc=true")
    row = df.iloc[0]
    assert pd.isna(row["predicted_peak_bytes"]) and "tied output head" in row["predicted_note"]
