"""Tests of ``tests/unit/test_tracking.py`` that start a process (a CLI, a helper, the pre-flight worker, a child
that draws or writes): kept out of the fast tier (``tests/spawn_guard.py``); the helpers they share stay in
that module."""

from __future__ import annotations

import subprocess
import sys

from sweeper.results.atomic import write_json_atomic
from sweeper.results.sweepdir import SweepDir
from sweeper.tracking import log_runs
from sweeper.tracking.manifest import read_manifest, summary_lines, sync_command
from sweeper.tracking.runs import run_id, run_specs
from sweeper.tracking.settings import WandbSettings
from tests.unit.test_tracking import MIB, SWEEP_ID, _closed_port, _ok, inspect, make_sweep, offline_runs


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
