"""The report tells rows apart by their configuration: every swept key is a column of its tables (case T11)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from sweeper.config.spec import replay_command
from sweeper.report import build_report
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from tests.unit.test_compose import loader_and_master  # noqa: F401 - fixture
from tests.unit.test_row import composed


def section(text: str, title: str) -> str:
    return text.split(f"## {title}")[1].split("\n## ")[0]


def table_rows(section_text: str) -> list[dict[str, str]]:
    """The first table of a section as dicts (header -> cell, padding stripped)."""
    lines = [ln for ln in section_text.split("\n### ")[0].splitlines() if ln.startswith("|")]
    split = lambda ln: [c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]]  # noqa: E731
    header = split(lines[0])
    return [dict(zip(header, split(ln), strict=True)) for ln in lines[2:]]


def run(loader_and_master, sweep_dir: Path, grid: list[list[str]], status=lambda i: "ok") -> str:  # noqa: F811
    for i, overrides in enumerate(grid):
        spec = composed(loader_and_master, overrides)
        st = status(i)
        SweepDir(sweep_dir).write_record(
            Record(
                sweep_id="sw-axes",
                point_id=f"{i:012x}",
                status=st,
                reason=None if st == "ok" else "the gate refused it",
                overrides=overrides,
                spec=spec.to_dict(),
                replay=replay_command(overrides),
                metrics={"tokens_per_s_per_device": 1000.0 + i, "peak_mem_bytes": (i + 1) * 2**20}
                if st == "ok"
                else {},
            ),
        )
    return build_report(sweep_dir).read_text()


T11 = [["model_dtype=float32", "precision=bf16"], ["model_dtype=bfloat16", "precision=bf16"]]


def test_t11_model_dtype_sweep_shows_the_dtype_and_whether_fp32_master_weights_exist(loader_and_master, tmp_path):  # noqa: F811
    text = run(loader_and_master, tmp_path, T11)
    rows = table_rows(section(text, "Results"))
    assert {(r["model_dtype"], r["fp32 master weights"]) for r in rows} == {("float32", "true"), ("bfloat16", "false")}
    assert "precision" not in rows[0]  # the same for every point: in the grid's "Fixed" line, not a column
    assert "`precision=bf16`" in section(text, "Grid")
    csv = pd.read_csv(tmp_path / "results.csv").set_index("model_dtype")
    assert csv.loc["float32", "fp32_master_weights"] and not csv.loc["bfloat16", "fp32_master_weights"]
    assert (csv["precision"] == "bf16").all()


def test_refused_points_show_their_configuration_in_the_failures_table(loader_and_master, tmp_path):  # noqa: F811
    text = run(loader_and_master, tmp_path, T11, status=lambda i: "ok" if i == 0 else "invalid")
    (row,) = table_rows(section(text, "Failures"))
    assert (row["status"], row["model_dtype"], row["fp32 master weights"]) == ("invalid", "bfloat16", "false")


def test_a_constant_fp32_master_weights_is_stated_once_not_a_column(loader_and_master, tmp_path):  # noqa: F811
    text = run(loader_and_master, tmp_path, [["gc=true"], ["gc=false"]])
    assert "fp32 master weights" not in table_rows(section(text, "Results"))[0]
    assert "Derived: `fp32_master_weights=true` for every point" in section(text, "Grid")


def test_passthrough_axes_are_columns_and_architecture_numbers_follow_the_model(loader_and_master, tmp_path):  # noqa: F811
    grid = [
        [f"model={m}", f"+training_args.max_grad_norm={g}", "+deepspeed_config.zero_optimization.stage=2"]
        for m in ("tiny", "gpt2")
        for g in ("0.5", "1.0")
    ]
    text = run(loader_and_master, tmp_path, grid)
    rows = table_rows(section(text, "Results"))
    assert {(r["model"], r["training_args.max_grad_norm"]) for r in rows} == {
        (m, g) for m in ("tiny", "gpt2") for g in ("0.5", "1.0")
    }
    assert not any(k.startswith("model.") for k in rows[0])  # hidden_size etc. follow from model
    assert "`deepspeed_config.zero_optimization.stage=2`" in section(text, "Grid")
    csv = pd.read_csv(tmp_path / "results.csv")
    assert {
        "model.config.hidden_size",
        "training_args.max_grad_norm",
        "deepspeed_config.zero_optimization.stage",
    } <= set(csv.columns)
    tiny, gpt2 = (csv[csv["model"] == m].iloc[0] for m in ("tiny", "gpt2"))
    assert tiny["model.config.hidden_size"] == 64 and gpt2["model.config.n_embd"] == 768
    assert pd.isna(gpt2["model.config.hidden_size"])  # each architecture's own keys


def test_the_grid_tells_what_the_command_line_fixed_from_the_defaults(loader_and_master, tmp_path):  # noqa: F811
    grid = [
        ["gc=true", "timed_steps=3", "+training_args.max_grad_norm=0.5"],
        ["gc=false", "timed_steps=3", "+training_args.max_grad_norm=0.5"],
    ]
    grid_text = section(run(loader_and_master, tmp_path, grid), "Grid")
    given, _, rest = grid_text.partition("### ")
    assert "Fixed on the command line: " in given
    assert "`timed_steps=3`" in given and "`training_args.max_grad_norm=0.5`" in given
    assert "`precision=" not in given and "`seq_len=" not in given  # defaults: folded below, not among the given
    assert rest.startswith("The same for every point, from the defaults (")
    assert "`precision=fp32`" in rest and "`timed_steps=3`" not in rest
    assert "**gc**" in given  # the swept key, with its values


def test_a_search_resumed_with_search_grid_has_no_search_axis_and_its_line_says_what_was_measured_since(
    loader_and_master,  # noqa: F811
    tmp_path,
):
    """A frontier search skipped 2 of 4 points; ``search=grid`` in the same directory measured them. The search
    keys tell how the multirun walked the grid (budgets), so they are no axis and no part of a label even though
    the records now hold both values; the search's own figures stay, with how many skipped points were measured
    since."""
    from sweeper.search.state import Log

    grid = [[f"gc={g}", f"per_device_batch_size={b}", f"search={w}"] for g, b, w in
            [("true", 2, "frontier"), ("false", 2, "frontier"), ("true", 8, "grid"), ("false", 8, "grid")]]  # fmt: skip
    log = Log(grid=4, stop="no unmeasured point is predicted non-dominated (with margin)")
    log.cost = {"grid_points": 4, "measured_full": 2, "screened": 0, "skipped": 2, "refused": 0, "point_seconds": 12.0,
                "model_grid_point_seconds": 25.0, "overhead_s": 5.0}  # fmt: skip
    log.write(SweepDir(tmp_path))
    text = run(loader_and_master, tmp_path, grid)
    assert "search.name" not in section(text, "Grid") and "**search" not in section(text, "Grid")
    assert all(not k.startswith("search") for k in table_rows(section(text, "Results"))[0])
    first = text.split("## ")[1] if text.startswith("## ") else text.split("\n## ")[0]
    assert "ran 2 of 4 point(s)" in first and "2 skipped" in first
    assert "Since then, 2 of the points it skipped were run (`search=grid` in this directory)" in first, first
