"""W&B runs from a real sweep, offline: one run per point (ok, oom, error and refused points), read back with
``wandb leet inspect`` (wandb 0.31; notes/cpu-backend.md); updated, not added, by a resume and by
``python -m sweeper.report``; no secret anywhere; and W&B broken three ways never fails the sweep or the report.

The OOM is real: ``cluster.gpu_mem_gib`` is a tensor-byte budget on CPU ranks (sweeper.job.budget raises the
``torch.OutOfMemoryError`` a GPU would). Nothing else is faked.

Every sweep here runs one rank (one core; its driver waits while the rank runs): the three tests' first sweeps run
two at a time (``first_sweeps``), the rest of each test after them as before.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from sweeper.results.row import config_columns, read_results_csv
from sweeper.results.trainer_run import FINAL_METRICS
from sweeper.tracking import runs as runs_module
from sweeper.tracking.runs import config_path
from tests.conftest import REPO

pytestmark = pytest.mark.slow
pytest.importorskip("wandb")

FAKE_KEY = "sk-test-do-not-leak-4f1d9c0b7a2e"
CHEAP = ["ranks_per_node=1", "warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0"]
WANDB = shutil.which("wandb", path=str(Path(sys.executable).parent)) or "wandb"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("SWEEPER_SWEEP_ID", None)
    return env | extra


def _sweep(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeper", *args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=900
    )


def _report(sweep_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeper.report", str(sweep_dir), *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def read_run(run_dir: Path) -> dict:
    """An offline run: ``--summary --json`` (config, summary, tags, state) plus its group and history rows from the
    record stream."""
    summary = subprocess.run([WANDB, "leet", "inspect", "--summary", "--json", str(run_dir)], capture_output=True)
    assert summary.returncode == 0, summary.stderr
    out = json.loads(summary.stdout)
    stream = subprocess.run([WANDB, "leet", "inspect", "--json", str(run_dir)], capture_output=True, text=True)
    assert stream.returncode == 0, stream.stderr
    out["history"] = []
    for line in stream.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "run":
            out["group"] = rec["run"].get("run_group")
        elif rec.get("type") == "history":
            out["history"].append(rec["history"]["item"])
    return out


def offline_runs(sweep_dir: Path) -> dict[str, Path]:
    """``{run id: folder}`` of the offline runs (``offline-run-<date>_<time>-<run id>``)."""
    return {p.name.split("-", 3)[3]: p for p in sorted((sweep_dir / "wandb").glob("offline-run-*"))}


def _no_secret(sweep_dir: Path, *texts: str) -> None:
    for text in texts:
        assert FAKE_KEY not in text
    for path in sweep_dir.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"


@pytest.fixture(scope="module")
def first_sweeps(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The first sweep of each test, two at a time (one rank each, so one core each: the module docstring), each in a
    folder of its own with its sweep in ``<folder>/sweep``: name -> (finished command, folder). ``grid``: the grid
    of ok, oom and refused points (the first test resumes it); ``broken``: one point with ``wandb`` shadowed by a
    module that raises on import; ``layout``: one point whose run the last test compares with WandbCallback's."""
    folders = {name: tmp_path_factory.mktemp(name) for name in ("grid", "broken", "layout")}
    shim = folders["broken"] / "shim" / "wandb"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('wandb is broken on purpose (test)')\n")
    sweeps = {
        "grid": (
            [
                "-m",
                "per_device_batch_size=1,32",  # 32 samples do not fit the 20 MiB budget: a real OOM
                "precision=fp32,fp16",  # fp16 on CPU is refused before launch (unsupported)
                "cluster.gpu_mem_gib=0.02",
                "wandb=offline",
                *CHEAP,
            ],
            {"WANDB_API_KEY": FAKE_KEY},
        ),
        "broken": (
            ["-m", "gc=true", "wandb=offline", *CHEAP],
            {"PYTHONPATH": os.pathsep.join([str(shim.parent), str(REPO)])},
        ),
        "layout": (["-m", "gc=false", "wandb=offline", *CHEAP], {}),
    }

    def run(name: str) -> subprocess.CompletedProcess:
        args, env = sweeps[name]
        return _sweep([*args, f"hydra.sweep.dir={folders[name] / 'sweep'}"], folders[name], **env)

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(sweeps, pool.map(run, sweeps), strict=True))
    return {name: (done[name], folders[name]) for name in sweeps}


def test_one_offline_run_per_point_read_back_then_updated_not_added(first_sweeps):
    first, work = first_sweeps["grid"]
    sweep_dir = work / "sweep"
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "W&B (offline): 4 runs written, 0 unchanged" in first.stdout
    assert f"wandb sync {sweep_dir / 'wandb'}/offline-run-*" in first.stdout
    # a resume adds a failing point (bitsandbytes is not installed): one more run, the others untouched
    second = _sweep(
        [
            "-m",
            "+training_args.optim=adamw_bnb_8bit",
            "per_device_batch_size=1",
            "cluster.gpu_mem_gib=0.02",
            "wandb=offline",
            *CHEAP,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        work,
        WANDB_API_KEY=FAKE_KEY,
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "W&B (offline): 1 runs written, 4 unchanged" in second.stdout, second.stdout[-2000:]

    sweep_id = json.loads((sweep_dir / "sweep.json").read_text())["sweep_id"]
    records = {p.parent.name: json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/result.json"))}
    assert sorted(r["status"] for r in records.values()) == ["error", "ok", "oom", "unsupported", "unsupported"]
    runs = offline_runs(sweep_dir)
    assert set(runs) == {f"{sweep_id}-{pid}" for pid in records}

    table = read_results_csv(sweep_dir / "results.csv")  # a sweep id like 723e67 stays text
    csv_columns = list(table.columns)
    # the CLI reads (two per run, about 2 s each, mostly its start-up), two runs at a time as in test_gate_cli
    with ThreadPoolExecutor(max_workers=2) as pool:
        read = dict(zip(records, pool.map(read_run, [runs[f"{sweep_id}-{pid}"] for pid in records]), strict=True))
    for pid, record in records.items():
        run = read[pid]
        # W&B's state: finished for a measured point, failed (exit code 1) for every other one
        assert run["state"] == ("finished" if record["status"] == "ok" else "failed") and run["project"] == "sweeper"
        assert run["group"] == sweep_id
        assert run["name"] == " ".join(record["overrides"])
        assert run["tags"][0] == record["status"]
        # config: the point's configuration under the CSV names, and the environment
        for key in ("fsdp", "gc", "precision", "per_device_batch_size", "seq_len", "model"):
            node = run["config"]  # nested at the dots (model beside model.config.*: model.name)
            for part in config_path(key, config_columns(csv_columns)).split("."):
                node = node[part]
            assert node == record["spec"][key], key
        assert run["config"]["sweeper"]["env"]["host"] == record["env"]["host"]
        # the Trainer's own config (as WandbCallback logs it) for every point that began training
        if (sweep_dir / "points" / pid / "trainer_run.json").is_file():
            assert run["config"]["model/num_parameters"] > 0 and run["config"]["per_device_train_batch_size"] >= 1
        elif record["status"] == "ok":
            raise AssertionError(f"the ok point {pid} has no trainer_run.json")
        # summary: the typed row, CSV names
        summary = run["summary"]
        assert summary["status"] == record["status"]
        assert {k for k in summary if not k.startswith("_")} - set(HISTORY_NAMES) - set(FINAL_METRICS) <= set(
            csv_columns
        )
        if record["status"] != "ok":
            assert summary["reason"] == record["reason"]
        # every value of the point's results.csv row is in the summary under its column name (predicted_* too)
        row = table.loc[table["point_id"] == pid].iloc[0]
        for col, value in row.items():
            if pd.isna(value):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert summary[col] == pytest.approx(value, rel=1e-9), col
            else:
                assert str(summary[col]) == str(value), col
        if record.get("predicted"):
            assert any(k.startswith("predicted_") for k in summary)
        # history: one row per optimizer step the point ran
        steps = (record.get("series") or {}).get("step") or []
        assert [h["_step"] for h in run["history"]] == steps
        if record["status"] == "ok":
            assert "frontier" in run["tags"]
            assert summary["tokens_per_s_per_device"] == pytest.approx(record["metrics"]["tokens_per_s_per_device"])
            assert len(steps) == 5  # 1 warm-up + 3 timed + 1 memory
            timed = [h["sweeper/step_time_s"] for h in run["history"] if h.get("sweeper/timed")]
            assert timed == pytest.approx(
                [
                    t
                    for t, w in zip(record["series"]["step_time_s"], record["series"]["window"], strict=True)
                    if w == "timed"
                ]
            )
            assert all("train/loss" in h and "sweeper/mem_high_water_bytes" in h for h in run["history"])
            assert [h["train/global_step"] for h in run["history"]] == steps
            assert summary["train_runtime"] > 0  # the Trainer's own final metric, as WandbCallback keeps it
        if record["status"] == "oom":
            assert summary["oom_requested_bytes"] == record["failure"]["requested_bytes"]
    # python -m sweeper.report again: nothing changed, nothing written; with the manifest lost (another machine),
    # every run is rewritten under its id and replaces its folder: still one folder per point
    again = _report(sweep_dir, WANDB_API_KEY=FAKE_KEY)
    assert again.returncode == 0, again.stderr
    assert "W&B (offline): 0 runs written, 5 unchanged" in again.stdout
    (sweep_dir / "wandb" / "sweeper-runs.json").unlink()
    rewrite = _report(sweep_dir, WANDB_API_KEY=FAKE_KEY)
    assert "W&B (offline): 5 runs written, 0 unchanged" in rewrite.stdout
    assert set(offline_runs(sweep_dir)) == set(runs)
    assert len(list((sweep_dir / "wandb").glob("offline-run-*"))) == len(records)
    report = (sweep_dir / "report.md").read_text()
    assert "wandb sync" in report and "python -m sweeper.wandb_report" in report
    _no_secret(sweep_dir, first.stdout, first.stderr, second.stdout, second.stderr, again.stdout, rewrite.stdout)


#: history keys W&B also keeps in the summary (the last logged value)
HISTORY_NAMES = (*runs_module.HISTORY_NAMES.values(), runs_module.TIMED)


def test_broken_wandb_never_fails_the_sweep_or_the_report(first_sweeps):
    """W&B broken three ways: the module missing (a sweep asked for wandb=offline), an unwritable wandb/ folder,
    and a bad WANDB_MODE. Every point is recorded, the report is written, a line says what happened."""
    run, work = first_sweeps["broken"]  # wandb shadowed by a module that raises (first_sweeps)
    sweep_dir = work / "sweep"
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    statuses = [json.loads(p.read_text())["status"] for p in (sweep_dir / "points").glob("*/result.json")]
    assert statuses == ["ok"]
    assert "W&B off: cannot import wandb (wandb is broken on purpose (test))" in run.stdout
    assert run.stdout.strip().splitlines()[-1].endswith("report.md")
    assert not list((sweep_dir / "wandb").glob("offline-run-*"))

    # wandb/ cannot be a folder: a file is in its place
    if (sweep_dir / "wandb").is_dir():
        shutil.rmtree(sweep_dir / "wandb")
    (sweep_dir / "wandb").write_text("not a folder")
    blocked = _report(sweep_dir, "--wandb", "offline")
    assert blocked.returncode == 0, blocked.stderr
    assert "W&B off: cannot create" in blocked.stdout, blocked.stdout
    assert blocked.stdout.strip().splitlines()[-1].endswith("report.md")
    # a bad WANDB_MODE with the default wandb=auto: W&B off, with a note naming it
    (sweep_dir / "wandb").unlink()
    bad = _report(sweep_dir, "--wandb", "auto", WANDB_MODE="sometimes")
    assert bad.returncode == 0, bad.stderr
    assert "WANDB_MODE='sometimes' is not a W&B mode" in bad.stdout
    assert (sweep_dir / "report.md").stat().st_size > 0


#: A plain HF Trainer with transformers' own WandbCallback (offline), on a point's spec: the same model (seed,
#: config) and the same TrainingArguments as the point's ranks build, the same synthetic data.
_PLAIN_TRAINER = """
import json, sys
from pathlib import Path
import torch
from transformers import Trainer
from transformers.integrations import WandbCallback
from sweeper.config.spec import PointSpec
from sweeper.job.trainer_setup import SyntheticTokens, build_model, training_arguments

point_dir, out = Path(sys.argv[1]), sys.argv[2]
spec = PointSpec.from_dict(json.loads((point_dir / "spec.json").read_text()))
torch.manual_seed(spec.seed)
model = build_model(spec)
args = training_arguments(spec, out, use_cpu=True)
n = spec.per_device_batch_size * spec.grad_accum * spec.total_steps
data = SyntheticTokens(n, spec.seq_len, model.config.vocab_size, spec.seed)
Trainer(model=model, args=args, train_dataset=data, callbacks=[WandbCallback()]).train()
"""
#: Config keys whose value says where or how a run was logged, not what it trained: they differ by construction.
NOT_COMPARED = {"output_dir", "logging_dir", "run_name", "report_to"}
#: What WandbCallback logs per step that a W&B user plots (``train/epoch`` aside).
TRAINER_HISTORY = ("train/global_step", "train/loss", "train/learning_rate", "train/grad_norm")


def _config(run: dict) -> dict:
    return {k: v for k, v in run["config"].items() if not k.startswith("_")}


def test_a_runs_layout_is_what_wandb_callback_logs_for_the_same_training_arguments(first_sweeps):
    """Issue 22 item 4: one real point's run, read back offline, against the run HF's WandbCallback writes for a
    plain Trainer on the same spec: the same config keys with the same values (the Trainer's TrainingArguments
    over the model config, the parameter count; only where-it-was-logged keys aside), sweeper's own under
    ``sweeper``; the Trainer's history names, with the same losses step by step; its final metrics in the
    summary."""
    run, work = first_sweeps["layout"]
    sweep_dir = work / "sweep"
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ((_, folder),) = offline_runs(sweep_dir).items()
    (point_dir,) = (p.parent for p in (sweep_dir / "points").glob("*/result.json"))
    script = work / "plain_trainer.py"
    script.write_text(_PLAIN_TRAINER)
    hf_dir = work / "hf"
    hf_dir.mkdir()
    plain = subprocess.run(
        [sys.executable, str(script), str(point_dir), str(work / "hf_out")],
        env=_env(WANDB_MODE="offline", WANDB_DIR=str(hf_dir), WANDB_PROJECT="sweeper", WANDB_SILENT="true"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    (hf_run,) = sorted((hf_dir / "wandb").glob("offline-run-*"))
    ours, theirs = read_run(folder), read_run(hf_run)

    mine, hf = _config(ours), _config(theirs)
    assert set(mine) - {"sweeper"} == set(hf), (set(mine) ^ set(hf)) - {"sweeper"}
    differ = {k for k in hf if k not in NOT_COMPARED and mine[k] != hf[k]}
    assert not differ, {k: (mine[k], hf[k]) for k in differ}
    assert mine["model/num_parameters"] == hf["model/num_parameters"] > 0
    assert mine["sweeper"]["gc"] is False and mine["sweeper"]["model"]["name"] == "tiny"

    steps = [h["_step"] for h in ours["history"]]
    hf_steps = [h for h in theirs["history"] if "train/loss" in h]
    assert len(hf_steps) == len(steps) == 5
    for name in TRAINER_HISTORY:
        assert all(name in h for h in hf_steps) and all(name in h for h in ours["history"]), name
    # the same steps trained the same way: train/loss, train/learning_rate, train/global_step mean what HF's mean
    for mine_h, hf_h in zip(ours["history"], hf_steps, strict=True):
        assert mine_h["train/global_step"] == hf_h["train/global_step"]
        assert mine_h["train/loss"] == pytest.approx(hf_h["train/loss"], rel=1e-5)
        assert mine_h["train/learning_rate"] == pytest.approx(hf_h["train/learning_rate"], rel=1e-9)
    # the point's own clock: each step at the time rank 0 ended it, in order, before the run was written
    stamps = [h["_timestamp"] for h in ours["history"]]
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] > 0
    summary = ours["summary"]
    for key in FINAL_METRICS:
        assert (key in summary) == (key in theirs["summary"]), key
    assert summary["total_flos"] == theirs["summary"]["total_flos"] and summary["train_runtime"] > 0
