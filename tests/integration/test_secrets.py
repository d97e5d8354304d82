"""No secret given on the command line reaches a file or the terminal (issue 22, item 1), with the secret in an
override, in a passthrough dict and in a nested value; the ranks still get it, and the replay command works when it
is in the environment (``sweeper.redact``).

Real parts: real sweeps (ranks, Hydra's output folder, the report, offline W&B runs), a resume, a report rebuild,
the planner, a replay. Every file under the working directory is searched byte for byte, and every output."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NEEDS_DEV_SLURM, REPO, SLURM_FEW_STEPS, run_sweeper

pytestmark = pytest.mark.slow

TOKEN = "hf_itestTOKENdoNotLeak7c41e0a9b3"  # an override: +training_args.hub_token=...
DICT_TOKEN = "hf_itestDICTdoNotLeak0e5b7d21"  # a passthrough dict: +training_args={...,hub_token:...}
KEY = "itest-api-key-doNotLeak-52d8e1"  # a nested value: a callback's argument, which reaches the ranks
SECRETS = (TOKEN, DICT_TOKEN, KEY)
FEW = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=1"]
CALLBACK = (
    f"+callbacks=[{{_target_:tests.faults.ExpectSecrets,api_key:{KEY},"
    f"key_digest:{hashlib.sha256(KEY.encode()).hexdigest()}}}]"
)


def _files_with_secrets(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {s[:8]}..." for s in SECRETS if s.encode() in data]
    return found


def test_no_secret_from_the_command_line_in_any_file_or_output(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the W&B run files are searched too
    outputs: list[str] = []

    def sweep(*args: str):
        run = run_sweeper(list(args), tmp_path)
        outputs.append(run.output)
        return run

    # a nested value that reaches a library: each rank checks it got the real value (ExpectSecrets raises if not)
    nested = sweep("-m", "gc=true,false", *FEW, CALLBACK)
    assert nested.proc.returncode == 0, nested.output[-3000:]
    records = list(nested.records())
    assert [r.status for r in records] == ["ok", "ok"], [r.reason for r in records]
    assert all(r.spec["callbacks"][0]["api_key"] == "${oc.env:SWEEPER_SECRET_CALLBACKS_0_API_KEY}" for r in records)
    report = nested.report.read_text()
    assert "SWEEPER_SECRET_CALLBACKS_0_API_KEY" in report  # the replay section says where the value comes from
    assert list((nested.sweep_dir / "wandb").glob("offline-run-*"))  # W&B runs written, and searched below

    # a resume of the same sweep finds the same points (a secret is not identity, the reference is stable)
    again = sweep("-m", "gc=true,false", *FEW, CALLBACK, f"hydra.sweep.dir={nested.sweep_dir}")
    assert again.proc.returncode == 0, again.output[-3000:]
    assert {r.point_id for r in again.records()} == {r.point_id for r in records}
    assert all(r.status == "ok" for r in again.records())

    # an override and a passthrough dict: refused by the gate (sweeper owns the Hub), recorded, with W&B runs
    override = sweep("-m", "seed=0,1", f"+training_args.hub_token={TOKEN}")
    as_dict = sweep("-m", "seed=0", f"+training_args={{max_grad_norm:0.5,hub_token:{DICT_TOKEN}}}")
    for run in (override, as_dict):
        assert run.proc.returncode == 0, run.output[-3000:]
        assert {r.status for r in run.records()} == {"invalid"}
        assert "training_args.hub_token" in run.output

    # a single point refused before launch, a sweep over a secret, the report rebuilt, the planner
    single = sweep(f"+training_args.hub_token={TOKEN}")
    assert single.proc.returncode == 2 and "training_args.hub_token" in single.output
    grid = sweep("-m", f"+training_args.hub_token={TOKEN},{DICT_TOKEN}")
    assert grid.proc.returncode == 2 and "a secret cannot be a grid axis" in grid.output
    rebuilt = subprocess.run(
        [sys.executable, "-m", "sweeper.report", str(nested.sweep_dir)], cwd=tmp_path, capture_output=True, text=True
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    outputs.append(rebuilt.stdout + rebuilt.stderr)
    plan = subprocess.run(
        [sys.executable, "-m", "sweeper.plan", "model=tiny", "cluster=h100-80gb", "seq_len=128", CALLBACK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**_env(), "PYTHONPATH": str(REPO)},
    )
    assert plan.returncode == 0, plan.stderr[-2000:]
    outputs.append(plan.stdout + plan.stderr)

    # the replay command: refused (exit 2, the variable named) without the secret, runs the point with it
    replay = shlex.split(records[0].replay)
    assert replay[:3] == ["python", "-m", "sweeper"]
    without = sweep(*replay[3:])
    assert without.proc.returncode == 2 and "SWEEPER_SECRET_CALLBACKS_0_API_KEY" in without.output
    monkeypatch.setenv("SWEEPER_SECRET_CALLBACKS_0_API_KEY", KEY)
    replayed = sweep(*replay[3:])
    assert replayed.proc.returncode == 0, replayed.output[-3000:]
    assert [r.status for r in replayed.records()] == ["ok"]
    assert [r.point_id for r in replayed.records()] == [records[0].point_id]

    for text in outputs:
        assert not [s for s in SECRETS if s in text], text[-3000:]
    assert _files_with_secrets(tmp_path) == []


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("SWEEPER_SECRET_")}


@pytest.mark.slurm
@NEEDS_DEV_SLURM
def test_a_slurm_job_gets_the_secret_from_the_environment_and_writes_it_nowhere(tmp_path):
    """On SLURM the spec travels pickled by submitit and the job's script is a file of the sweep: both hold only
    the reference; the ranks (SLURM tasks) get the value through sbatch's exported environment."""
    run = run_sweeper(
        ["-m", "launcher=slurm", "cluster=dev", "launcher.poll_interval_s=1", *SLURM_FEW_STEPS, CALLBACK], tmp_path
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    assert [r.status for r in run.records()] == ["ok"], [r.reason for r in run.records()]
    assert not [s for s in SECRETS if s in run.output]
    assert _files_with_secrets(tmp_path) == []
