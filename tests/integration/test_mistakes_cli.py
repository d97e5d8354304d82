"""A user's first-hour mistakes on the real commands (issue 39): one clear message naming the key and the fix, the
documented exit status (2: refused before launch), no traceback, and no folder that looks like a sweep."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import _sweeper_env, run_sweeper
from tests.integration.test_plan_cli import run_plan


def _no_sweep_left(cwd):
    return not (cwd / "multirun").exists() or not any((cwd / "multirun").iterdir())


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["-m", "+gcc=true,false"], "did you mean gc?"),  # Hydra ran this one: four jobs, gcc ignored
        (["-m", "gcc=true,false"], "did you mean gc?"),  # Hydra's own advice was "use +gcc=true"
        (["precison=bf16"], "did you mean precision?"),
        (["-m", "cluster.gpu_mem=80", "fsdp=none,full_shard"], "cluster.gpu_mem_gib"),
    ],
)
def test_a_misspelt_key_is_refused_before_hydra_with_the_nearest_keys(tmp_path, args, named):
    run = run_sweeper(args, tmp_path, timeout=120)
    assert run.proc.returncode == 2, run.output[-2000:]
    assert named in run.proc.stderr and "Traceback" not in run.output, run.output[-2000:]
    assert _no_sweep_left(tmp_path)


def test_a_plan_with_a_misspelt_key_is_refused_alike(tmp_path):
    proc, _ = run_plan(["model=llama-2-7b", "cluster=h100-80gb", "seq_len=4096", "+sq_len=2"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "did you mean seq_len?" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "plans").exists()


def test_slurm_without_a_cluster_is_one_line_exit_2_and_no_sweep_folder(tmp_path):
    run = run_sweeper(["-m", "launcher=slurm", "fsdp=none,full_shard"], tmp_path, timeout=120)
    assert run.proc.returncode == 2, run.output[-2000:]
    assert "cluster=<name>" in run.proc.stderr and "Traceback" not in run.output, run.output[-2000:]
    assert _no_sweep_left(tmp_path)


def test_slurm_on_a_machine_without_slurm_is_one_line_exit_2_and_no_sweep_folder(tmp_path):
    """The machine has no SLURM client: PATH holds only this Python's folder (submitit's ``Could not detect "srun"``
    traceback came after the sweep folder was made)."""
    env = {k: v for k, v in _sweeper_env().items() if not k.startswith("SLURM")}
    env["PATH"] = os.path.dirname(sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", "-m", "launcher=slurm", "cluster=dev", "fsdp=none"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "sbatch and srun not found on PATH" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert _no_sweep_left(tmp_path)


def test_the_replay_of_a_point_with_a_model_of_the_users_config_folder_runs_as_printed(tmp_path):
    """The replay line dropped ``hydra.searchpath``, so no replay of a sweep with the user's own model ran as printed.
    The folder is given relative to the sweep's working directory; the replay runs from another one."""
    import json
    import shlex

    from sweeper.paths import conf_dir

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "myconf" / "model").mkdir(parents=True)
    elsewhere.mkdir()
    text = (conf_dir() / "model" / "tiny.yaml").read_text().replace("name: tiny", "name: mine")
    (work / "myconf" / "model" / "mine.yaml").write_text(text)
    steps = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]
    run = run_sweeper(["hydra.searchpath=[file://myconf]", "model=mine", *steps, "wandb=off"], work, timeout=300)
    assert run.proc.returncode == 0, run.output[-3000:]
    (record,) = (work / "multirun").glob("*/points/*/result.json")
    replay = json.loads(record.read_text())["replay"]
    assert f"file://{work / 'myconf'}" in replay, replay
    argv = shlex.split(replay)
    assert argv[:3] == ["python", "-m", "sweeper"]
    again = run_sweeper([*argv[3:], f"hydra.run.dir={elsewhere / 'again'}"], elsewhere, timeout=300)
    assert again.proc.returncode == 0, again.output[-3000:]
    (other,) = (elsewhere / "again").glob("points/*/result.json")
    assert json.loads(other.read_text())["spec"]["model"] == "mine"
