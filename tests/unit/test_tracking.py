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
from sweeper.tracking.manifest import read_manifest, summary_lines, sync_command
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


def test_offline_runs_are_written_once_per_point_then_skipped_then_replaced_not_added(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    d = make_sweep(tmp_path)
    lines = log_runs(d, WandbSettings("offline"))
    assert lines[0] == "W&B (offline): 4 runs written, 0 unchanged", lines
    assert lines[-1] == f"W&B: sync the offline runs once online: {sync_command(d)}"
    runs = offline_runs(d)
    assert set(runs) == {f"{SWEEP_ID}-aaaa0000000{i}" for i in range(1, 5)}
    got = inspect(runs[f"{SWEEP_ID}-aaaa00000003"])
    assert got["project"] == "sweeper" and got["tags"] == ["oom"]
    assert got["summary"]["status"] == "oom" and got["summary"]["oom_requested_bytes"] == 340 * MIB
    assert got["summary"]["failure_rank"] == 1
    assert got["state"] == "failed", got  # a failed point's run is in W&B's failed state
    assert got["summary"]["reason"].startswith("CUDA out of memory")
    ok = inspect(runs[f"{SWEEP_ID}-aaaa00000001"])
    assert ok["state"] == "finished"
    # the summary holds the measured statistics, not the history's last (untimed, memory-window) step
    assert "step_time_s" not in ok["summary"] and ok["summary"]["step_time_s_median"] == 512 / 2000.0
    assert ok["config"]["sweeper"]["gc"] is False and ok["summary"]["tokens_per_s_per_device"] == 2000.0
    assert ok["config"]["model/num_parameters"] == 210240 and ok["summary"]["train_runtime"] == 4.5
    assert ok["step"] == 4  # the last history step

    # nothing changed: nothing rewritten
    assert log_runs(d, WandbSettings("offline"))[0] == "W&B (offline): 0 runs written, 4 unchanged"
    # the manifest lost (another machine): every run rewritten, each still one folder with the same id
    (d / "wandb" / "sweeper-runs.json").unlink()
    assert log_runs(d, WandbSettings("offline"))[0] == "W&B (offline): 4 runs written, 0 unchanged"
    assert set(offline_runs(d)) == set(runs)
    assert len(list((d / "wandb").glob("offline-run-*"))) == 4
    assert len(read_manifest(d)["runs"]) == 4
    assert summary_lines(d)[0].startswith("4 W&B runs written offline under")


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


def test_online_without_a_server_falls_back_offline_and_keeps_every_run(tmp_path, monkeypatch):
    """Issue 22: wandb=online, a key in the environment, no reachable server (WANDB_BASE_URL at a closed local
    port; the real wandb library and its service). The first point's online init times out; the offline retry of
    the same run id used to fail with "run ID ... is in use" (wandb-core kept the stream), so that point never got a
    run, and every rebuild repeated it. Now every point has its offline run, and a rebuild does the same."""
    from sweeper.tracking import writer

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setattr(writer, "ONLINE_INIT_TIMEOUT_S", 5.0)  # the real timeout is 30 s; the cause is the same
    d = make_sweep(tmp_path)
    for rebuild in (False, True):  # the sweep's write, then a report rebuild (tries online again, first run)
        result = writer.write_runs(d, WandbSettings("online"), "online")
        assert (result.mode, result.failed) == ("offline", 0), result.lines()
        assert (result.written, result.unchanged) == ((1, 3) if rebuild else (4, 0)), result.lines()
        assert "W&B online failed" in result.notes[0]
        runs = offline_runs(d)
        assert set(runs) == {f"{SWEEP_ID}-aaaa0000000{i}" for i in range(1, 5)}
        assert not list((d / "wandb").glob("run-*")), "the failed online attempt's folder is left"
        assert inspect(runs[f"{SWEEP_ID}-aaaa00000001"])["summary"]["tokens_per_s_per_device"] == 2000.0


def test_a_failed_rewrite_leaves_no_partial_folder_and_sync_lists_only_complete_runs(tmp_path, monkeypatch):
    """Issue 22: a run that fails after ``wandb.init`` (here wandb's own TypeError for a history key that is not a
    string, raised by the real ``run.log``) used to leave a config-only folder marked finished beside the good
    one, which ``wandb sync .../offline-run-*`` uploaded last. Runs are now written in a staging folder and moved
    into ``wandb/`` only once finished: the failed rewrite leaves nothing, the good run stays."""
    import glob

    import wandb

    from sweeper.tracking import writer

    monkeypatch.delenv("WANDB_MODE", raising=False)
    d = make_sweep(tmp_path)
    assert writer.write_runs(d, WandbSettings("offline"), "offline").written == 4
    good = offline_runs(d)
    spec = next(s for s in run_specs(d) if s.point_id == "aaaa00000001")
    spec.history = [{"step": 1, 3: 0.5}]  # wandb refuses it inside run.log, after init wrote the config
    folder, error = writer._attempt(wandb, spec, WandbSettings("offline"), "offline", d, True)
    assert folder is None and error is not None and "TypeError" in error
    assert offline_runs(d) == good
    assert not (d / "wandb" / writer.STAGING).exists()
    # the printed command's glob expands to exactly the complete runs, one per point
    pattern = sync_command(d).split(" ", 2)[2].replace("'", "")
    assert sorted(glob.glob(pattern)) == sorted(str(p) for p in good.values())
    # the staging folder is not a W&B run folder: its path is never matched by the command
    assert writer.STAGING.startswith(".") and not writer.STAGING.startswith("offline-run-")


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


def test_a_bad_project_or_entity_is_refused_before_any_point_runs(tmp_path):
    """Issue 22: an invalid wandb.project (or entity) used to be accepted; every run then failed after the sweep
    trained. Now the real ``python -m sweeper -m`` exits 2 with one line and no traceback, and no point starts."""
    from tests.conftest import REPO

    env = {k: v for k, v in __import__("os").environ.items() if k != "WANDB_MODE"}
    env["PYTHONPATH"] = str(REPO)
    for arg, key in (("wandb.project=team/proj", "wandb.project"), ("wandb.entity='a:b'", "wandb.entity")):
        sweep_dir = tmp_path / key
        out = subprocess.run(
            [sys.executable, "-m", "sweeper", "-m", "gc=true,false", arg, f"hydra.sweep.dir={sweep_dir}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        assert f"sweeper: {key}=" in out.stderr and "Traceback" not in out.stderr + out.stdout
        assert not (sweep_dir / "points").exists()


def test_every_grid_axis_is_a_config_key_of_the_written_runs_dotted_axes_included(tmp_path, monkeypatch):
    """Issue 22: a passthrough axis (``+training_args.max_grad_norm=0.5,1.0``) was logged as the flat config key
    ``training_args.max_grad_norm`` while the parallel-coordinates panel reads ``config["training_args"]
    ["max_grad_norm"]``: the column was empty. Every grid axis of the comparison report (dotted ones and ``model``
    beside ``model.config.*``) is looked up, the way wandb_workspaces' panel addresses it, in the config the real
    wandb wrote (read back offline) and has the point's value there."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2.interface import _metric_to_backend_pc

    from sweeper.wandb_report.spec import build_report, plan_report

    monkeypatch.delenv("WANDB_MODE", raising=False)
    d = tmp_path / "sweep"
    write_json_atomic(d / "sweep.json", {"sweep_id": SWEEP_ID})
    for i, (norm, hidden, model) in enumerate([(0.5, 64, "tiny"), (1.0, 128, "tiny"), (1.0, 64, "tiny-llama")]):
        rec = _ok(f"bbbb0000000{i}", False, 1000.0 + i, (10 + i) * MIB)
        rec.spec = rec.spec | {"model": model, "training_args": {"max_grad_norm": norm}}
        rec.spec["model_config"] = {"hidden_size": hidden}
        rec.overrides = [f"+training_args.max_grad_norm={norm}", f"+model.config.hidden_size={hidden}"]
        SweepDir(d).write_record(rec)
    plan = plan_report(d)
    assert {"training_args.max_grad_norm", "model.config.hidden_size", "model"} <= set(plan.axes)
    log_runs(d, WandbSettings("offline"))
    runs = {p: inspect(f)["config"] for p, f in offline_runs(d).items()}
    grid = next(b for b in build_report(plan).blocks if isinstance(b, wr.PanelGrid))
    panel = next(p for p in grid.panels if isinstance(p, wr.ParallelCoordinatesPlot))
    config_columns = [c.metric for c in panel.columns if isinstance(c.metric, wr.Config)]
    assert len(config_columns) == len(plan.axes)
    records = {run_id(SWEEP_ID, r.point_id): r for r in SweepDir(d).records()}
    for axis, metric in zip(plan.axes, config_columns, strict=True):
        backend = _metric_to_backend_pc(metric)  # "config:<key>.value.<rest>", what the W&B panel queries
        top, _, rest = backend.removeprefix("config:").partition(".value")
        for rid, config in runs.items():
            node = config[top]
            node = node.get("value", node) if isinstance(node, dict) and set(node) == {"value"} else node
            for part in [p for p in rest.split(".") if p]:
                node = node[part]
            row = records[rid]
            want = {
                "training_args.max_grad_norm": row.spec["training_args"]["max_grad_norm"],
                "model.config.hidden_size": row.spec["model_config"]["hidden_size"],
                "model": row.spec["model"],
            }.get(axis)
            if want is not None:
                assert node == want, (axis, rid)


def test_the_reports_wandb_section_counts_what_was_written_when_nothing_is_being_written_now(tmp_path, monkeypatch):
    """While runs are being written the report says so, in plain words (no Markdown the HTML would show escaped);
    a rebuild with ``--wandb off`` afterwards, as that sentence tells, gives the count the last write left."""
    from sweeper.report import build_report
    from sweeper.tracking.manifest import planned_lines

    monkeypatch.delenv("WANDB_MODE", raising=False)
    d = make_sweep(tmp_path)
    planned, _ = planned_lines(d, "offline")
    assert "`" not in planned and "python -m sweeper.report --wandb off" in planned
    log_runs(d, WandbSettings("offline"))
    report = build_report(d, wandb_mode="off").read_text()
    section = report.split("## W\\&B", 1)[1]  # the heading as Markdown escapes it
    assert "B runs written offline under" in section and "- 4 W" in section and "was being written" not in section
    assert sync_command(d) in section
