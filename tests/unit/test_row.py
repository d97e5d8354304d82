"""The typed result row: one schema for CSV, Parquet and the report; every swept key is a column (case T11)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hydra.types import RunMode

from sweeper.config.spec import PointSpec, from_config, replay_command
from sweeper.launchers.slurm.accounting import record_from_scheduler
from sweeper.report import build_report
from sweeper.results.collect import collect_records
from sweeper.results.columns import COLUMNS, FAMILY, SCHEMA_VERSION, fp32_master_weights
from sweeper.results.record import Record
from sweeper.results.row import read_results_csv, records_to_frame, row_from_record
from sweeper.results.sweepdir import SweepDir
from tests.unit.test_compose import loader_and_master  # noqa: F401 - fixture

PASSTHROUGH = [
    "+training_args.max_grad_norm=0.5",
    "+fsdp_config.reshard_after_forward=true",
    "+deepspeed_config.zero_optimization.stage=3",
]
#: Spec fields whose column is named as on the command line (``model.model_type=...``), not as in the spec.
CLI_NAMES = {"model_type": "model.model_type", "decoder_layer": "model.decoder_layer", "model_config": "model.config"}
DICT_FIELDS = {"fsdp_config", "deepspeed_config", "training_args", "model_config", "plan", "timing", "search"}


def composed(loader_and_master, overrides: list[str]) -> PointSpec:  # noqa: F811 - the fixture's value
    """The point spec Hydra composes for ``overrides`` (the real config tree and schema)."""
    loader, _ = loader_and_master
    cfg = loader.load_configuration("config", overrides=overrides, run_mode=RunMode.RUN)
    return from_config(cfg)


def ok_record(spec: PointSpec, overrides: list[str], pid: str = "abcdef012345", **metrics) -> Record:
    return Record(
        sweep_id="sw-row",
        point_id=pid,
        status="ok",
        overrides=overrides,
        spec=spec.to_dict(),
        replay=replay_command(overrides),
        ran={"world_size": spec.world_size},
        metrics={"tokens_per_s_per_device": 1000.0, "peak_mem_bytes": 2**30, **metrics},
    )


def test_every_point_spec_field_is_a_column_of_the_csv_and_the_parquet(loader_and_master, tmp_path: Path):  # noqa: F811
    overrides = [*PASSTHROUGH, "host_mem_limit_gib=8", "seed=7"]
    spec = composed(loader_and_master, overrides)
    SweepDir(tmp_path).write_record(ok_record(spec, overrides))
    build_report(tmp_path)
    csv = pd.read_csv(tmp_path / "results.csv")
    parquet = pd.read_parquet(tmp_path / "results.parquet")
    for frame in (csv, parquet):
        row = frame.iloc[0]
        for f in dataclasses.fields(PointSpec):
            name = CLI_NAMES.get(f.name, f.name)
            value = getattr(spec, f.name)
            if f.name in DICT_FIELDS:
                assert value, f"{f.name}: the test composes a non-empty dict for every dict field"
                assert any(c.startswith(f"{name}.") for c in frame.columns), f.name
            elif isinstance(value, list):
                assert json.loads(row[name]) == value, f.name
            else:
                assert row[name] == value, f.name
        assert row["training_args.max_grad_norm"] == 0.5
        assert bool(row["fsdp_config.reshard_after_forward"]) is True
        assert row["deepspeed_config.zero_optimization.stage"] == 3
        assert row["model.config.hidden_size"] == 64 and row["model.model_type"] == "llama"
        assert row["host_mem_limit_gib"] == 8.0 and row["seed"] == 7


def test_dotted_columns_sit_beside_their_key_and_take_one_type_each():
    spec = {"model": "tiny", "fsdp": "full_shard", "zero": 0, "fsdp_config": {"b": 1, "a": {"x": [1, 2]}}}
    records = [
        Record(sweep_id="s", point_id="p1", status="ok", spec={**spec, "training_args": {"max_grad_norm": 1}}),
        Record(sweep_id="s", point_id="p2", status="ok", spec={**spec, "training_args": {"max_grad_norm": 0.5}}),
        Record(sweep_id="s", point_id="p3", status="ok", spec={**spec, "training_args": {"optim": True}}),
        Record(sweep_id="s", point_id="p4", status="ok", spec={**spec, "training_args": {"optim": "adamw_torch"}}),
    ]
    assert list(row_from_record(records[0]))[3:6] == ["fsdp", "fsdp_config.a.x", "fsdp_config.b"]
    assert row_from_record(records[0])["fsdp_config.a.x"] == "[1, 2]"  # lists as JSON
    df = records_to_frame(records)
    assert df["training_args.max_grad_norm"].dtype == "float64"  # ints and floats: floats
    assert df["training_args.optim"].tolist()[2:] == ["True", "adamw_torch"]  # any other mix: strings
    assert df["fsdp_config.b"].dtype == "Int64"


def test_a_spec_key_the_schema_does_not_know_still_becomes_a_column():
    r = Record(sweep_id="s", point_id="p", status="ok", spec={"model": "tiny", "new_axis": 3, "new_dict": {"k": 1}})
    row = row_from_record(r)
    names = list(row)
    assert row["new_axis"] == 3 and row["new_dict.k"] == 1
    assert "model.config" not in names and "training_args" not in names  # families only as dotted columns
    assert names.index("new_axis") < names.index("step_time_s_median")  # in the configuration block


def test_ids_that_look_like_numbers_read_back_as_text(tmp_path: Path):
    """A sweep id is 6 random hex digits and a point id 12: ``723e67`` or ``000000004512`` parse as numbers in a
    plain ``pd.read_csv`` (a CI failure of the W&B test); :func:`read_results_csv` keeps every text column text."""
    records = [Record(sweep_id="723e67", point_id="000000004512", status="ok", spec={"model": "tiny", "seq_len": 8})]
    path = tmp_path / "results.csv"
    records_to_frame(records).to_csv(path, index=False)
    assert pd.read_csv(path)["sweep_id"].iloc[0] != "723e67"  # why the reader exists
    df = read_results_csv(path)
    assert (df["sweep_id"].iloc[0], df["point_id"].iloc[0], df["model"].iloc[0]) == ("723e67", "000000004512", "tiny")
    assert df["seq_len"].iloc[0] == 8  # numbers stay numbers


@pytest.mark.parametrize(
    ("model_dtype", "precision", "zero", "expected"),
    [
        ("float32", "fp32", 0, True),  # fp32 training
        ("float32", "bf16", 0, True),  # autocast over fp32 weights
        ("float32", "fp16", 0, True),
        ("float32", "bf16", 3, True),
        ("bfloat16", "bf16", 0, False),  # pure bf16: the optimizer updates bf16 weights
        ("float16", "fp16", 0, False),
        ("bfloat16", "fp32", 0, False),
        ("bfloat16", "bf16", 1, True),  # DeepSpeed keeps fp32 partitions of the weights
        ("bfloat16", "bf16", 3, True),
        ("float16", "fp16", 2, True),
        ("bfloat16", "fp32", 2, False),  # DeepSpeed's half-precision optimizers are off
        (None, "bf16", 0, None),
    ],
)
def test_fp32_master_weights_truth_table(model_dtype, precision, zero, expected):
    assert fp32_master_weights(model_dtype, precision, zero) is expected
    spec = {"model": "tiny", "model_dtype": model_dtype, "precision": precision, "zero": zero}
    assert row_from_record(Record(sweep_id="s", point_id="p", status="ok", spec=spec))["fp32_master_weights"] is (
        expected
    )


def test_schema_version_is_a_column_of_the_csv_and_parquet_and_parquet_metadata(tmp_path: Path):
    SweepDir(tmp_path).write_record(Record(sweep_id="s", point_id="p1", status="invalid", reason="fsdp with zero > 0"))
    build_report(tmp_path)
    assert pd.read_csv(tmp_path / "results.csv")["schema_version"].tolist() == [SCHEMA_VERSION]
    assert pd.read_parquet(tmp_path / "results.parquet")["schema_version"].tolist() == [SCHEMA_VERSION]
    schema = pq.read_schema(tmp_path / "results.parquet")
    assert schema.metadata[b"sweeper.schema_version"] == str(SCHEMA_VERSION).encode()
    assert schema.field("peak_mem_bytes").metadata[b"unit"] == b"bytes"
    assert schema.field("step_time_s_median").metadata[b"unit"] == b"s"


def test_every_number_carries_its_unit_in_its_name():
    suffix = {"bytes": "_bytes", "s": "_s", "GiB": "_gib"}
    for c in COLUMNS:
        if c.unit in suffix:
            assert c.name.endswith(suffix[c.unit]) or f"{suffix[c.unit]}_" in c.name, c.name
    names = [c.name for c in COLUMNS]
    assert len(names) == len(set(names))
    assert all(c.doc for c in COLUMNS) and {c.dtype for c in COLUMNS} <= {"str", "Int64", "float64", "boolean", FAMILY}


def test_slurm_job_state_elapsed_and_limit_are_columns():
    entry = {"job_id": "77_3", "overrides": ["gc=true"], "spec": {"model": "tiny", "gc": True}}
    job = {"state": "TIMEOUT", "exit_code": "0:15", "elapsed_s": 61, "time_limit_s": 60, "reason": ""}
    ended = record_from_scheduler(entry, job, "", "sw", "p1")  # the scheduler ended it: sacct's numbers
    own = Record(  # the job wrote its own record while RUNNING (as sweeper.launchers.slurm.in_job does)
        sweep_id="sw",
        point_id="p2",
        status="ok",
        env={"slurm_job_id": "77_4", "slurm_time_limit_s": 900, "slurm_elapsed_s": 42.5, "slurm_restart_count": 1},
    )
    local = Record(sweep_id="sw", point_id="p3", status="timeout", reason="ran past timeout_s", failure={})
    df = records_to_frame([ended, own, local]).set_index("point_id")
    assert df.loc["p1", ["slurm_job_id", "slurm_state", "slurm_exit_code"]].tolist() == ["77_3", "TIMEOUT", "0:15"]
    assert (df.loc["p1", "slurm_elapsed_s"], df.loc["p1", "slurm_time_limit_s"]) == (61.0, 60.0)
    assert df.loc["p2", ["slurm_job_id", "slurm_elapsed_s", "slurm_time_limit_s"]].tolist() == ["77_4", 42.5, 900.0]
    assert df.loc["p2", "slurm_restart_count"] == 1 and pd.isna(df.loc["p2", "slurm_state"])
    assert df.loc["p3", ["slurm_job_id", "slurm_state", "slurm_elapsed_s"]].isna().all()


def test_a_point_still_queued_on_slurm_is_pending_with_its_job_id(tmp_path: Path):
    (tmp_path / "points" / "feed00000001").mkdir(parents=True)
    SweepDir(tmp_path).add_submitted(
        {"feed00000001": {"job_id": "88_0", "overrides": ["gc=true"], "spec": {"gc": True}}}
    )
    (r,) = collect_records(tmp_path)
    assert (r.status, r.reason) == ("pending", "no result yet (SLURM job 88_0)")
    row = records_to_frame([r]).iloc[0]
    assert (row["slurm_job_id"], row["gc"], row["overrides"]) == ("88_0", True, "gc=true")


def test_host_memory_limit_and_peak_are_columns_for_local_and_slurm_points():
    """Local records carry them in metrics (every point) or failure (host_oom); SLURM kills in failure."""
    from sweeper.results.record import Record
    from sweeper.results.row import records_to_frame

    ok = Record(
        sweep_id="s",
        point_id="a",
        status="ok",
        metrics={"host_mem_limit_bytes": 2 * 2**30, "host_rss_peak_bytes": 900 * 2**20},
    )
    killed = Record(
        sweep_id="s",
        point_id="b",
        status="host_oom",
        reason="SLURM killed it for memory",
        failure={"host_mem_limit_bytes": 300 * 2**20, "host_rss_bytes": 320 * 2**20},
    )
    df = records_to_frame([ok, killed]).set_index("point_id")
    assert df.loc["a", "host_mem_limit_bytes"] == 2 * 2**30 and df.loc["a", "host_rss_peak_bytes"] == 900 * 2**20
    assert df.loc["b", "host_mem_limit_bytes"] == 300 * 2**20 and df.loc["b", "host_rss_peak_bytes"] == 320 * 2**20
