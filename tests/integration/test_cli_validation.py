"""Bad input gets a clear error before any rank starts (real ``python -m sweeper`` commands, no training)."""

from __future__ import annotations

import json

import pytest

from sweeper.results.sweepdir import SweepDir


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (["fsdp=full_shard", "zero=2"], ["fsdp", "zero"]),
        (["per_device_batch_size=0"], ["per_device_batch_size"]),
        (["seq_len=0"], ["seq_len"]),
        (["seq_len=4096"], ["seq_len", "model"]),  # tiny's max_position_embeddings is 2048
        (["precision=fp16", "model_dtype=float16"], ["precision", "model_dtype"]),  # case P03
        (["fsdp=full_shard", "gc=true", "use_reentrant=true"], ["fsdp", "gc", "use_reentrant"]),
        (["seq_len=1"], ["seq_len"]),  # docs/cases.md#u03: no next-token target
        (["cluster.gpu_mem_gib=-1", "prune=true"], ["cluster.gpu_mem_gib"]),  # docs/cases.md#u10: invalid, not pruned
        (["launcher=slurm", "cluster=dev"], ["launcher", "-m launcher=slurm cluster=dev"]),  # docs/cases.md#u02
    ],
)
def test_an_invalid_single_point_exits_non_zero_naming_its_keys_before_any_rank(sweeper_cli, overrides, keys):
    run = sweeper_cli(*overrides)
    assert run.proc.returncode == 2, run.output[-2000:]
    for key in keys:
        assert f"{key}=" in run.proc.stderr or key in run.proc.stderr, run.proc.stderr
    assert "invalid point" in run.proc.stderr
    assert not (run.cwd / "multirun").exists()  # refused before Hydra made any directory, no rank ever started


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model=llama-9000"], ["llama-9000", "tiny", "gpt2", "llama-3.2-1b", "llama-2-7b"]),
        (["precision=fp8"], ["precision", "fp32", "bf16", "fp16"]),
        (["fsdp=sharded"], ["fsdp", "full_shard", "shard_grad_op", "hybrid_shard"]),
        (["per_device_batch_size=four"], ["per_device_batch_size"]),
    ],
)
def test_unknown_values_are_refused_by_hydra_listing_the_allowed_ones(sweeper_cli, overrides, expected):
    run = sweeper_cli("-m", *overrides, "gc=true,false")
    assert run.proc.returncode != 0
    for word in expected:
        assert word in run.output, (word, run.output[-1500:])
    assert not list(run.cwd.glob("multirun/*/points/*"))  # refused before any job


def test_invalid_points_of_a_grid_are_recorded_and_the_grid_goes_on(sweeper_cli):
    run = sweeper_cli("-m", "fsdp=full_shard,shard_grad_op", "zero=1,3")
    assert run.proc.returncode == 0, run.output[-2000:]
    records = SweepDir(run.sweep_dir).records()
    assert len(records) == 4
    assert {r.status for r in records} == {"invalid"}
    for r in records:
        assert "fsdp=" in r.reason and "zero=" in r.reason
        assert r.failure["keys"] == ["fsdp", "zero"]
    assert "invalid" in run.report.read_text()


def test_passthrough_refusals_in_a_grid_are_recorded_with_their_dotted_keys_and_rule(sweeper_cli):
    run = sweeper_cli("-m", "zero=1,2", "+deepspeed_config.zero_optimization.stage=3")
    assert run.proc.returncode == 0, run.output[-2000:]
    records = SweepDir(run.sweep_dir).records()
    assert [r.status for r in records] == ["invalid", "invalid"]
    for r in records:
        assert r.failure["rule"] == "P10"
        assert set(r.failure["keys"]) == {"zero", "deepspeed_config.zero_optimization.stage"}
        assert f"zero={r.spec['zero']}" in r.reason
    assert not list(run.sweep_dir.glob("points/*/rank*.json"))


def test_fp16_on_cpu_is_unsupported_not_silently_fp32(sweeper_cli):
    run = sweeper_cli("-m", "precision=fp16", "zero=0,2")
    assert run.proc.returncode == 0, run.output[-2000:]
    records = SweepDir(run.sweep_dir).records()
    assert [r.status for r in records] == ["unsupported", "unsupported"]
    assert all("fp16" in r.reason and "CPU" in r.reason for r in records)
    assert not list(run.sweep_dir.glob("points/*/rank*.json"))


def test_two_sweeps_started_in_the_same_second_get_their_own_directories(tmp_path):
    """Case P09: the sweep directory carries a random id besides the time."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SWEEPER_SWEEP_ID"}  # each command draws its own id
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sweeper", "-m", "fsdp=full_shard", "zero=1"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    dirs = sorted((tmp_path / "multirun").iterdir())
    assert len(dirs) == 2
    ids = {json.loads((d / "sweep.json").read_text())["sweep_id"] for d in dirs}
    assert len(ids) == 2
    for d in dirs:
        assert len(SweepDir(d).records()) == 1


def test_resuming_a_sweep_directory_keeps_final_records_and_reruns_only_what_is_asked(sweeper_cli):
    first = sweeper_cli("-m", "fsdp=full_shard", "zero=1,2")
    sweep_dir = first.sweep_dir
    before = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("points/*/result.json")}
    assert len(before) == 2
    again = sweeper_cli("-m", "fsdp=full_shard", "zero=1,2", f"hydra.sweep.dir={sweep_dir}")
    assert again.proc.returncode == 0, again.output[-2000:]
    assert {p: p.stat().st_mtime_ns for p in sweep_dir.glob("points/*/result.json")} == before  # not run again
    assert json.loads((sweep_dir / "sweep.json").read_text())["resumed"] == 1
    rerun = sweeper_cli(
        "-m", "fsdp=full_shard", "zero=1,2", f"hydra.sweep.dir={sweep_dir}", "launcher.rerun_statuses=[invalid]"
    )
    assert rerun.proc.returncode == 0, rerun.output[-2000:]
    assert len(list(sweep_dir.glob("points/*/result.0.json"))) == 2  # the earlier records are kept
    assert len(SweepDir(sweep_dir).records()) == 2


@pytest.mark.parametrize("multirun", [True, False])
def test_an_unusable_sweep_or_run_folder_exits_2_naming_the_key_the_path_and_the_fix(sweeper_cli, tmp_path, multirun):
    """docs/cases.md#u12: a folder under a file, an existing file, a folder that cannot be made: exit 2, one line,
    no traceback, nothing run."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    for folder, why in ((a_file, "is a file, not a folder"), (a_file / "sub", "is a file"), ("/proc/forbidden", "")):
        run = sweeper_cli(*(["-m", "gc=true,false"] if multirun else []), f"{key}={folder}")
        assert run.proc.returncode == 2, run.output[-2000:]
        assert f"{key}={folder} cannot be used" in run.proc.stderr and why in run.proc.stderr
        assert "Traceback" not in run.output and "leave " + key + " out" in run.proc.stderr
        assert not list(run.cwd.glob("**/rank*.json"))
    assert a_file.read_text() == "not a folder\n"
