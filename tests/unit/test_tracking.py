"""W&B runs from records: the mode a sweep really gets, what each run holds, and the real wandb writer offline
(runs read back with ``wandb leet inspect``, as notes/cpu-backend.md describes for wandb 0.31)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.results.atomic import write_json_atomic
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from sweeper.results.trainer_run import trainer_config, write_trainer_run
from sweeper.tracking import log_runs, sweep_settings
from sweeper.tracking.manifest import sync_command
from sweeper.tracking.runs import run_id, run_specs
from sweeper.tracking.settings import WandbSettings, effective_mode

SWEEP_ID = "c0ffee"
MIB = 2**20


def _spec(gc: bool, batch: int = 4) -> dict:
    return {"model": "tiny", "fsdp": "none", "gc": gc, "precision": "fp32", "zero": 0, "per_device_batch_size": batch}


def _ok(pid: str, gc: bool, tps: float, mem: int) -> Record:
    return Record(
        sweep_id=SWEEP_ID,
        point_id=pid,
        status="ok",
        overrides=[f"gc={str(gc).lower()}"],
        spec=_spec(gc),
        metrics={
            "step_time_s_median": 512 / tps,
            "step_time_s_p10": 0.99 * 512 / tps,
            "step_time_s_p90": 1.01 * 512 / tps,
            "timed_steps": 3,
            "tokens_per_s": tps,
            "tokens_per_s_per_device": tps,
            "peak_mem_bytes": mem,
            "peak_mem_kind": "cpu_tensor_bytes_memtracker",
        },
        env={"host": "h1", "python": "3.11"},
        series={
            "step": [1, 2, 3, 4],
            "window": ["warmup", "timed", "timed", "memory"],
            "step_time_s": [0.9, 0.5, 0.52, 2.0],
            "loss": [7.0, 6.9, 6.8, None],
            "mem_high_water_bytes": [100 * MIB, 110 * MIB, 110 * MIB, 120 * MIB],
            "mem_kind": "rss_peak",
        },
    )


#: rank 0's trainer_run.json of the first point (the Trainer's config as WandbCallback logs it, times, final metrics)
TRAINER_RUN = {
    "config": trainer_config(
        {"learning_rate": 5e-5, "fsdp": [], "max_steps": 4, "hub_token": "<HUB_TOKEN>", "report_to": []},
        {"model_type": "llama", "hidden_size": 64, "learning_rate": "not the Trainer's"},
        210240,
    ),
    "started_at": 1.7e9,
    "step_ended_at": [1.7e9 + 1, 1.7e9 + 2, 1.7e9 + 3, 1.7e9 + 4],
    "final": {"train_runtime": 4.5, "train_loss": 6.9, "total_flos": 1e9, "something_else": 1},
}


def make_sweep(root: Path, wandb: dict | None = None) -> Path:
    """Four points: two ok (one frontier point each: less memory vs faster), one oom, one invalid."""
    d = root / "sweep"
    write_json_atomic(d / "sweep.json", {"sweep_id": SWEEP_ID} | ({"wandb": wandb} if wandb else {}))
    SweepDir(d).write_record(_ok("aaaa00000001", False, 2000.0, 30 * MIB))
    write_trainer_run(SweepDir(d).point("aaaa00000001"), TRAINER_RUN)  # what rank 0 leaves for the W&B run
    SweepDir(d).write_record(_ok("aaaa00000002", True, 1200.0, 10 * MIB))
    SweepDir(d).write_record(
        Record(
            sweep_id=SWEEP_ID,
            point_id="aaaa00000003",
            status="oom",
            overrides=["gc=false", "per_device_batch_size=64"],
            spec=_spec(False, 64),
            reason="CUDA out of memory. Tried to allocate 340.00 MiB [/pair.cc:1] <b>",
            failure={"requested_bytes": 340 * MIB, "rank": 1, "phase": "train", "step": 4},
        ),
    )
    SweepDir(d).write_record(
        Record(
            sweep_id=SWEEP_ID,
            point_id="aaaa00000004",
            status="invalid",
            overrides=["fsdp=full_shard", "zero=1"],
            spec=_spec(False) | {"fsdp": "full_shard", "zero": 1},
            reason="fsdp and zero both shard: choose one",
        ),
    )
    return d


# --- the mode -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "env", "expected"),
    [
        ("off", {}, "off"),
        ("auto", {}, "offline"),
        ("offline", {}, "offline"),
        ("online", {"WANDB_API_KEY": "x" * 40}, "online"),
        ("online", {}, "offline"),  # no key: offline, with a note
        ("auto", {"WANDB_MODE": "disabled"}, "off"),
        ("auto", {"WANDB_MODE": "dryrun"}, "offline"),
        ("offline", {"WANDB_MODE": "disabled"}, "offline"),  # an explicit wandb=<mode> wins
        ("auto", {"WANDB_MODE": "bogus"}, "off"),  # a bad mode: off, with a note, never a failure
    ],
)
def test_effective_mode(monkeypatch, tmp_path, mode, env, expected):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got, note = effective_mode(WandbSettings(mode))
    assert got == expected
    if (mode, expected) == ("online", "offline"):
        assert "no W&B API key" in note
    if env.get("WANDB_MODE") == "bogus":
        assert "WANDB_MODE='bogus'" in note


def test_auto_is_off_for_a_single_point_unless_wandb_mode_says_otherwise(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert effective_mode(WandbSettings("auto"), single_point=True) == ("off", None)
    assert effective_mode(WandbSettings("offline"), single_point=True) == ("offline", None)  # asked: written
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert effective_mode(WandbSettings("auto"), single_point=True) == ("offline", None)


def test_a_netrc_login_counts_as_a_key(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    rc = tmp_path / "netrc"
    rc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    rc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(rc))
    assert effective_mode(WandbSettings("online")) == ("online", None)


def test_a_bad_mode_is_refused_with_the_known_modes():
    with pytest.raises(ValueError, match="auto, off, offline, online"):
        WandbSettings("sometimes")


def test_sweep_settings_come_from_sweep_json_and_the_cli_mode_replaces_only_the_mode(tmp_path):
    d = make_sweep(tmp_path, {"mode": "off", "project": "p1", "entity": "team"})
    assert sweep_settings(d) == WandbSettings("off", "p1", "team")
    assert sweep_settings(d, "offline") == WandbSettings("offline", "p1", "team")


# --- what a run holds -----------------------------------------------------------------------------------------


def test_run_ids_are_stable_and_w_and_b_safe():
    assert run_id("c0ffee", "aaaa00000001") == "c0ffee-aaaa00000001"
    odd = run_id("my sweep/1:x", "aaaa00000001")
    assert odd == "my_sweep_1_x-aaaa00000001"
    long = run_id("s" * 100, "aaaa00000001")
    assert len(long) <= 64 and long.endswith("aaaa00000001") and long == run_id("s" * 100, "aaaa00000001")


def test_one_run_per_point_with_group_name_tags_config_summary_and_history(tmp_path):
    d = make_sweep(tmp_path)
    runs = {r.point_id: r for r in run_specs(d)}
    assert set(runs) == {f"aaaa0000000{i}" for i in range(1, 5)}  # failed and refused points too
    fast, small, oom, bad = (runs[f"aaaa0000000{i}"] for i in range(1, 5))
    assert {r.group for r in runs.values()} == {SWEEP_ID}
    assert fast.name == "gc=false" and bad.name == "fsdp=full_shard zero=1"
    assert fast.tags == ["ok", "frontier"] and small.tags == ["ok", "frontier"]
    assert oom.tags == ["oom"] and bad.tags == ["invalid"]
    # config: the Trainer's (WandbCallback's keys: the model config under TrainingArguments, the parameter count),
    # and sweeper's configuration columns under their CSV names with the environment, under "sweeper"
    assert fast.config["learning_rate"] == 5e-5 and fast.config["fsdp"] == [] and fast.config["model_type"] == "llama"
    assert fast.config["model/num_parameters"] == 210240 and fast.config["hub_token"] == "<HUB_TOKEN>"
    ours = fast.config["sweeper"]
    assert ours["gc"] is False and ours["fsdp"] == "none" and ours["env"]["host"] == "h1"
    assert "tokens_per_s_per_device" not in ours and set(small.config) == {"sweeper"}  # no trainer_run.json
    # summary: the typed row, CSV names; failure reasons kept as text; the Trainer's final metrics
    assert fast.summary["tokens_per_s_per_device"] == 2000.0
    assert fast.summary["train_runtime"] == 4.5 and fast.summary["total_flos"] == 1e9
    assert "something_else" not in fast.summary and "train_runtime" not in small.summary
    assert fast.summary["peak_mem_bytes"] == 30 * MIB and fast.summary["on_frontier"] is True
    assert oom.summary["status"] == "oom" and oom.summary["reason"].startswith("CUDA out of memory")
    assert bad.summary["reason"] == "fsdp and zero both shard: choose one"
    assert all(v is not None for r in runs.values() for v in r.summary.values())
    # history: one entry per optimizer step under the Trainer's names (sweeper's own under sweeper/), missing
    # values left out, each at the wall-clock time rank 0's step ended
    assert [h["step"] for h in fast.history] == [1, 2, 3, 4]
    assert [h["sweeper/timed"] for h in fast.history] == [False, True, True, False]
    assert fast.history[1] == {
        "step": 2,
        "train/global_step": 2,
        "sweeper/step_time_s": 0.5,
        "train/loss": 6.9,
        "sweeper/mem_high_water_bytes": 110 * MIB,
        "sweeper/timed": True,
        "sweeper/window": "timed",
        "_timestamp": 1.7e9 + 2,
    }
    assert [h["sweeper/window"] for h in fast.history] == ["warmup", "timed", "timed", "memory"]
    assert "train/loss" not in fast.history[3]
    assert all("_timestamp" not in h for h in small.history)  # no step times: W&B's own clock
    assert oom.history == []


# --- the real writer, offline ---------------------------------------------------------------------------------

pytest.importorskip("wandb")
WANDB = shutil.which("wandb", path=str(Path(sys.executable).parent)) or "wandb"


def inspect(run_dir: Path) -> dict:
    """An offline run read back with ``wandb leet inspect --summary --json`` (wandb 0.31)."""
    out = subprocess.run(
        [WANDB, "leet", "inspect", "--summary", "--json", str(run_dir)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def offline_runs(sweep_dir: Path) -> dict[str, Path]:
    found = sorted((sweep_dir / "wandb").glob("offline-run-*"))
    return {p.name.split("-", 3)[3]: p for p in found}


def test_off_costs_nothing_and_writes_nothing(tmp_path):
    d = make_sweep(tmp_path)
    assert log_runs(d, WandbSettings("off")) == []
    assert not (d / "wandb").exists()


def test_the_printed_commands_survive_a_sweep_dir_with_spaces_and_quotes():
    from sweeper.wandb_report.spec import publish_commands

    d = Path("/tmp/my sweeps/it's")
    sync = sync_command(d)
    assert sync == "wandb sync '/tmp/my sweeps/it'\"'\"'s/wandb'/offline-run-*"
    assert publish_commands(d) == [sync, "python -m sweeper.wandb_report '/tmp/my sweeps/it'\"'\"'s' --publish"]


def test_pending_points_get_no_run_and_a_sweep_of_pending_points_starts_no_writer(tmp_path, monkeypatch):
    """Issue 22: a submission of pending points (launcher.wait=false) writes no W&B run and waits for nothing;
    each point gets its run when its record is final (the next sweeper.report)."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    d = make_sweep(tmp_path)
    (d / "points" / "aaaa00000009").mkdir()  # launched, no result yet: pending
    assert "aaaa00000009" not in {r.point_id for r in run_specs(d)}
    assert len(run_specs(d)) == 4
    only_pending = tmp_path / "pending-only"
    (only_pending / "points" / "bbbb00000001").mkdir(parents=True)
    (only_pending / "sweep.json").write_text(json.dumps({"sweep_id": "pend01", "mode": "multirun"}))
    lines = log_runs(only_pending, WandbSettings("offline"))
    assert lines == [f"W&B: no run yet (no point has finished); `python -m sweeper.report {only_pending}` writes them"]
    assert not (only_pending / "wandb").exists()  # no writer was started


# --- issue 22 item 3: runs that mean what they say ------------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


@pytest.mark.parametrize(
    "name", ["sweeper", "my-project_2", "a" * 128, "a" * 129, "team/proj", "a#b", "what?", "50%", "c:d", "back\\slash"]
)
def test_the_project_rule_is_wandbs_own(name):
    """sweeper's launch-time rule (no wandb import) refuses exactly the project names wandb's own validator
    (``wandb.Settings(project=...)``) refuses."""
    import wandb

    try:
        wandb.Settings(project=name)
        wandb_ok = True
    except Exception:  # noqa: BLE001 - wandb's UsageError (a pydantic ValidationError wraps it)
        wandb_ok = False
    from sweeper.tracking.settings import target_problem

    assert (target_problem(name, None) is None) == wandb_ok
