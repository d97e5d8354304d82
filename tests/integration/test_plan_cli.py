"""``python -m sweeper.plan`` as a user runs it: a real subprocess, real Hydra, the real catalogue and model.

Nothing here launches a rank or needs a GPU: the plan predicts, it never runs a point.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from tests.conftest import REPO
from tests.unit.test_plan_app import INTERFACE

#: The libraries the plan must never import (the driver side of the torch boundary, docs/architecture.md).
HEAVY = ("torch", "transformers", "accelerate", "deepspeed")


def run_plan(
    args: list[str], cwd: Path, *python_flags: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """``python -m sweeper.plan *args`` in ``cwd`` (``env``: variables set for it alone), and its wall time."""
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *python_flags, "-m", "sweeper.plan", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, time.monotonic() - start


def test_plan_for_llama_2_7b_on_8_h100_writes_its_files_in_seconds_without_importing_torch(tmp_path):
    out = tmp_path / "plan"
    proc, seconds = run_plan(
        ["model=llama-2-7b", "cluster=h100-80gb", "seq_len=4096", f"hydra.run.dir={out}"], tmp_path, "-X", "importtime"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seconds < 60, seconds  # a few seconds on two busy cores: imports and one plot, no model is built
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert imported and not {m for m in imported if m.split(".")[0] in HEAVY}
    df = pd.read_csv(out / "plan.csv")
    assert set(INTERFACE) <= set(df.columns)
    # a row per default grid point: 6 engines x gc on/off, and ZeRO-1/2 at tp = 2, 4, 8 (DeepSpeed AutoTP) x gc
    assert len(df) == 12 + 12
    tp = df[df["tp"] > 1]
    assert sorted(zip(tp["zero"], tp["tp"], tp["gc"], strict=True)) == sorted(
        (z, t, g) for z in (1, 2) for t in (2, 4, 8) for g in (False, True)
    )
    df = df[df["tp"] == 1]
    assert sorted(zip(df["fsdp"], df["zero"], df["gc"], strict=True)) == sorted(
        (f, z, g)
        for f, z in [("none", 0), ("none", 1), ("none", 2), ("none", 3), ("full_shard", 0), ("shard_grad_op", 0)]
        for g in (False, True)
    )
    assert (df["precision"] == "bf16").all() and df["predicted_peak_bytes"].notna().all()
    assert (out / "plan.md").read_text().startswith("# Capacity plan: llama-2-7b on h100-80gb")
    assert (out / "plan.png").stat().st_size > 0
    assert "FSDP full_shard" in proc.stdout and proc.stdout.strip().splitlines()[-1].startswith(f"Plan: {out}")


def test_a_model_too_large_for_any_l40s_configuration_is_answered_with_fits_false_and_exit_0(tmp_path):
    # a 320-layer Llama-2-7b shape (about 64 B parameters) cannot train on 8 x 48 GB in any engine; -m sweeps as in
    # python -m sweeper, and full_shard with zero=3 is refused by the gate, listed with its reason
    out = tmp_path / "sweep"
    args = ["-m", "model=llama-2-7b", "cluster=l40s-48gb", "seq_len=4096", "model.config.num_hidden_layers=320"]
    proc, _ = run_plan([*args, "fsdp=none,full_shard", "zero=0,3", f"hydra.sweep.dir={out}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_csv(out / "plan.csv")
    assert len(df) == 8  # 2 fsdp x 2 zero x gc on/off
    planned, refused = df[df["status"] == "planned"], df[df["status"] != "planned"]
    assert len(planned) == 6 and not planned["fits"].astype(bool).any()
    assert (planned["max_per_device_batch_size"] == 0).all()
    assert set(zip(refused["fsdp"], refused["zero"], refused["status"], refused["rule"], strict=True)) == {
        ("full_shard", 3, "invalid", "G04")
    }
    assert "not predicted, invalid (G04), 2 point(s)" in proc.stdout


def test_a_plan_without_seq_len_exits_2_and_names_what_is_missing(tmp_path):
    proc, _ = run_plan(["model=llama-2-7b", "cluster=h100-80gb"], tmp_path)
    assert proc.returncode == 2
    assert "give seq_len=" in proc.stderr and not (tmp_path / "plans").exists()


def test_the_inverse_question_without_a_cluster_answers_over_the_catalogue_and_exits_0(tmp_path):
    out = tmp_path / "deadline"
    args = ["model=llama-2-7b", "seq_len=4096", "train_tokens=2e12", "plan.deadline_days=30", "plan.max_nodes=16"]
    proc, _ = run_plan([*args, f"hydra.run.dir={out}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = pd.read_csv(out / "deadline.csv")
    assert len(answers) == 6 and answers["status"].notna().all()
    h100 = answers.set_index("cluster").loc["h100-80gb"]
    assert h100["status"] == "meets the deadline" and h100["predicted_train_days"] <= 30
    slow = answers[answers["status"] != "meets the deadline"]  # not within it, or no configuration runs there
    assert len(slow) and slow["reason"].str.contains("plan.max_nodes=16").all()
    assert proc.stdout.strip().splitlines()[-1].startswith(f"Answer: {out / 'deadline.md'}")
