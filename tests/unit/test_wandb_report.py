"""The W&B comparison report: the specification written offline, the CLI's exit codes, and no API key leaks."""

import json
import sys
from pathlib import Path

import pytest

from sweeper.report.axes import grid_of
from sweeper.results.atomic import write_json_atomic
from sweeper.results.collect import collect_records
from sweeper.results.record import Record
from sweeper.results.row import config_columns, records_to_frame

pytest.importorskip("wandb_workspaces.reports.v2")

from sweeper.results.sweepdir import WANDB_REPORT_FILE as SPEC_FILE
from sweeper.results.sweepdir import SweepDir
from sweeper.tracking.runs import config_path
from sweeper.wandb_report import cli

GIB = 2**30
SWEEP_ID = "ab12cd"
FAKE_KEY = "sk-test-0123456789abcdef"


def spec(fsdp: str, gc: bool) -> dict:
    return {
        "model": "tiny",
        "fsdp": fsdp,
        "gc": gc,
        "use_reentrant": False,
        "precision": "fp32",
        "model_dtype": "float32",
        "zero": 0,
        "per_device_batch_size": 4,
        "seq_len": 128,
        "grad_accum": 1,
        "ranks_per_node": 2,
        "nodes": 1,
        "training_args": {"max_grad_norm": 0.5 if gc else 1.0},
    }


def ok_point(pid: str, fsdp: str, gc: bool, tps: float, mem: int) -> Record:
    return Record(
        sweep_id=SWEEP_ID,
        point_id=pid,
        status="ok",
        overrides=[f"fsdp={fsdp}", f"gc={str(gc).lower()}"],
        spec=spec(fsdp, gc),
        metrics={
            "step_time_s_median": 512 / tps,
            "step_time_s_p10": 0.98 * 512 / tps,
            "step_time_s_p90": 1.03 * 512 / tps,
            "timed_steps": 8,
            "tokens_per_s": 2 * tps,
            "tokens_per_s_per_device": tps,
            "peak_mem_bytes": mem,
            "peak_mem_kind": "max_memory_allocated",
        },
    )


def make_sweep(root: Path, wandb: dict | None = None) -> Path:
    """Four points: two ok (both on the frontier), one oom, one invalid; reasons hold markup characters."""
    d = root / "sweep"
    info = {"sweep_id": SWEEP_ID} | ({"wandb": wandb} if wandb is not None else {})
    write_json_atomic(d / "sweep.json", info)
    SweepDir(d).write_record(ok_point("aaaa00000001", "none", False, 2000.0, 3 * GIB))
    SweepDir(d).write_record(ok_point("aaaa00000002", "full_shard", True, 1200.0, 1 * GIB))
    SweepDir(d).write_record(
        Record(
            sweep_id=SWEEP_ID,
            point_id="aaaa00000003",
            status="oom",
            overrides=["fsdp=none", "gc=true"],
            spec=spec("none", True),
            reason="CUDA out of memory: *tried* to allocate <b>340 MiB</b>",
            failure={"requested_bytes": 340 * 2**20, "phase": "train", "rank": 1, "step": 0},
        ),
    )
    SweepDir(d).write_record(
        Record(
            sweep_id=SWEEP_ID,
            point_id="aaaa00000004",
            status="invalid",
            overrides=["fsdp=full_shard", "gc=false"],
            spec=spec("full_shard", False),
            reason="refused: `fsdp` [x](y)",
            failure={"rule": "some-rule", "keys": ["fsdp"]},
        ),
    )
    return d


def walk(obj):
    """Every dict in ``obj``, depth first."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return make_sweep(tmp_path, {"project": "sweeper-test", "entity": None})


@pytest.fixture
def doc(sweep: Path, capsys) -> dict:
    assert cli.main([str(sweep)]) == 0
    return json.loads((sweep / SPEC_FILE).read_text())


def panels(doc: dict) -> list[dict]:
    grids = [b for b in doc["report"]["blocks"] if b["type"] == "PanelGrid"]
    assert len(grids) == 1
    return grids[0]["panels"]


def test_top_level_structure(doc):
    assert set(doc) == {"format", "sweep_id", "wandb", "publish", "plan", "runsets", "report"}
    assert doc["format"] == "sweeper.wandb_report/1"
    assert doc["sweep_id"] == SWEEP_ID
    assert doc["wandb"] == {"project": "sweeper-test", "entity": None}
    assert doc["report"]["type"] == "Report"
    assert doc["report"]["project"] == "sweeper-test"
    assert SWEEP_ID in doc["report"]["title"]
    assert doc["publish"]["status"] == "not published"


def test_scatter_axes_are_row_columns(doc, sweep):
    df = records_to_frame(collect_records(sweep))
    (scatter,) = [p for p in panels(doc) if p["type"] == "ScatterPlot"]
    assert scatter["x"] == {"type": "SummaryMetric", "name": "peak_mem_gib"}
    assert scatter["y"] == {"type": "SummaryMetric", "name": "tokens_per_s_per_device"}
    for axis in ("x", "y"):
        assert scatter[axis]["name"] in df.columns
    assert "GiB" in scatter["title"] and "tokens/s per device" in scatter["title"]


def test_parallel_coordinates_cover_every_grid_axis(doc, sweep):
    df = records_to_frame(collect_records(sweep))
    axes = grid_of(df).axes(df.columns)
    assert {"fsdp", "gc", "training_args.max_grad_norm"} <= set(axes)
    (pc,) = [p for p in panels(doc) if p["type"] == "ParallelCoordinatesPlot"]
    metrics = [c["metric"] for c in pc["columns"]]
    # each axis at its path in the runs' config: sweeper's columns sit under "sweeper", beside the Trainer's
    assert metrics[: len(axes)] == [
        {"type": "Config", "name": config_path(a, config_columns(df.columns))} for a in axes
    ]
    assert {"sweeper.fsdp", "sweeper.gc", "sweeper.training_args.max_grad_norm"} <= {m["name"] for m in metrics}
    assert metrics[len(axes) :] == [
        {"type": "SummaryMetric", "name": "tokens_per_s_per_device"},
        {"type": "SummaryMetric", "name": "peak_mem_gib"},
    ]
    assert all(m["name"].removeprefix("sweeper.") in df.columns for m in metrics)


def test_run_comparer_exists(doc):
    assert [p["type"] for p in panels(doc)].count("RunComparer") == 1


def test_runsets_filter_on_group_and_frontier_tag(doc):
    (grid,) = [b for b in doc["report"]["blocks"] if b["type"] == "PanelGrid"]
    assert [rs["filters"] for rs in grid["runsets"]] == [rs["filters"] for rs in doc["runsets"]]
    leaves = [{(f["key"]["name"], f["op"]): f["value"] for f in rs["filters_v2"]["filters"]} for rs in doc["runsets"]]
    assert leaves[0] == {("group", "="): SWEEP_ID}
    assert leaves[1] == {("group", "="): SWEEP_ID, ("tags", "IN"): ["frontier"]}
    assert all(rs["project"] == "sweeper-test" for rs in grid["runsets"])


def test_paragraph_names_fastest_and_least_memory_as_code(doc):
    (p,) = [b for b in doc["report"]["blocks"] if b["type"] == "P"]
    code = [t["text"] for t in p["text"] if isinstance(t, dict) and t["type"] == "InlineCode"]
    assert "fsdp=none gc=false" in code  # fastest
    assert "fsdp=full_shard gc=true" in code  # least memory
    assert doc["plan"]["fastest"]["point_id"] == "aaaa00000001"
    assert doc["plan"]["least_memory"]["point_id"] == "aaaa00000002"
    plain = "".join(t for t in p["text"] if isinstance(t, str))
    assert "2 ok" in plain and "1 oom" in plain and "1 invalid" in plain


def test_default_project_without_wandb_key(tmp_path, capsys):
    d = make_sweep(tmp_path, None)
    assert cli.main([str(d)]) == 0
    doc = json.loads((d / SPEC_FILE).read_text())
    assert doc["wandb"] == {"project": "sweeper", "entity": None}


def test_offline_prints_spec_and_publish_commands(sweep, capsys):
    assert cli.main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert str(sweep / SPEC_FILE) in out
    assert f"wandb sync {sweep / 'wandb'}/offline-run-*" in out
    assert f"python -m sweeper.wandb_report {sweep} --publish" in out


def test_not_a_sweep_directory(tmp_path, capsys):
    assert cli.main([str(tmp_path / "missing")]) == 2
    assert cli.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "points/" in err and "Traceback" not in err


def test_wandb_workspaces_missing(sweep, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", None)  # import raises ImportError
    assert cli.main([str(sweep)]) == 2
    assert "pip install 'sweeper[tracking]'" in capsys.readouterr().err
    assert not (sweep / SPEC_FILE).exists()


def test_publish_without_login(sweep, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    assert cli.main([str(sweep), "--publish"]) == 1
    assert "not logged in to W&B" in capsys.readouterr().err
    assert (sweep / SPEC_FILE).exists()


def test_publish_failure_is_one_line_and_redacted(sweep, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)

    def boom(plan):
        raise ConnectionError(f"could not reach W&B with key {FAKE_KEY}\nsecond line")

    monkeypatch.setattr(cli, "_publish", boom)
    assert cli.main([str(sweep), "--publish"]) == 1
    captured = capsys.readouterr()
    assert FAKE_KEY not in captured.out + captured.err
    assert captured.err.count("\n") == 1 and "publishing the report failed" in captured.err
    assert json.loads((sweep / SPEC_FILE).read_text())["publish"]["status"] == "not published"


def test_publish_success_prints_url(sweep, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    url = "https://wandb.ai/me/sweeper-test/reports/x--abc"
    monkeypatch.setattr(cli, "_publish", lambda plan: url)
    assert cli.main([str(sweep), "--publish"]) == 0
    assert f"W&B report: {url}" in capsys.readouterr().out
    published = json.loads((sweep / SPEC_FILE).read_text())["publish"]
    assert (published["status"], published["url"]) == ("published", url)


def test_unfilterable_sweep_id_is_a_clear_error(tmp_path, capsys):
    d = make_sweep(tmp_path)
    write_json_atomic(d / "sweep.json", {"sweep_id": "it's=odd"})
    assert cli.main([str(d)]) == 1
    err = capsys.readouterr().err
    assert "cannot be written as a W&B run filter" in err or "does not parse" in err
