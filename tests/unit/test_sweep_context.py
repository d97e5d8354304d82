"""One sweep context (:class:`sweeper.point.context.SweepContext`): the sweep's directory, its typed sections and its
opening checks, built once from Hydra's composed config, for every entry point (no process: Hydra's compose API)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from sweeper.config.schema import LauncherConfig, WandbConfig, register_configs
from sweeper.config.sections import ClusterConfig
from sweeper.paths import conf_dir
from sweeper.point.context import SweepContext
from sweeper.results.opening import register_resolver

SRC = Path(__file__).resolve().parents[2] / "src"
#: The modules allowed to read ``hydra.sweep.dir`` / ``hydra.run.dir`` themselves: the context, and the SLURM jobs of
#: another Hydra app's task function (not a sweeper sweep).
READERS = {SRC / "sweeper" / "point" / "context.py", SRC / "sweeper" / "launchers" / "slurm" / "hydra_task.py"}


def _composed(overrides: list[str]):
    register_configs()
    register_resolver()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


def test_the_context_types_each_section_once(tmp_path):
    cfg = _composed(["cluster=dev", "launcher=slurm", "wandb=off", f"hydra.run.dir={tmp_path / 'one'}", "gc=true"])
    ctx = SweepContext.of(cfg)
    assert isinstance(ctx.cluster, ClusterConfig) and ctx.cluster.name == "dev"
    assert isinstance(ctx.launcher, LauncherConfig) and ctx.launcher.name == "slurm" and ctx.launcher.wait
    assert isinstance(ctx.wandb, WandbConfig) and ctx.wandb_node() == {
        "mode": "off",
        "project": "sweeper",
        "entity": None,
    }
    assert not ctx.multirun and ctx.dir_key == "hydra.run.dir" and ctx.sweep.path == tmp_path / "one"
    assert "gc=true" in ctx.overrides


def test_a_secret_override_stays_a_reference(tmp_path, monkeypatch):
    ref = "${oc.env:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN}"
    monkeypatch.setenv("SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN", "hf_secret")
    cfg = _composed([f"+training_args.hub_token={ref}", f"hydra.run.dir={tmp_path}"])
    assert f"+training_args.hub_token={ref}" in SweepContext.of(cfg).overrides
    assert all("hf_secret" not in o for o in SweepContext.of(cfg).overrides)


def test_an_unusable_folder_is_refused_with_its_key(tmp_path, capsys):
    (tmp_path / "file").write_text("in the way")
    cfg = _composed([f"hydra.run.dir={tmp_path / 'file' / 'sweep'}"])
    with pytest.raises(SystemExit) as e:
        SweepContext.of(cfg).refuse_unusable_folder()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "hydra.run.dir=" in err and "cannot be used" in err


def test_the_context_opens_sweep_json_with_its_overrides_and_wandb(tmp_path):
    cfg = _composed([f"hydra.run.dir={tmp_path / 's'}", "seq_len=64", "wandb=off"])
    info = SweepContext.of(cfg).open(1)
    assert info["overrides"] == ["seq_len=64", "wandb=off"]
    assert info["wandb"]["mode"] == "off"


def _reads_hydra_dirs(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "dir" and isinstance(node.value, ast.Attribute):
            if node.value.attr in ("sweep", "run"):
                return True
    return False


def test_only_the_context_works_out_the_sweep_directory():
    """Every entry point (the task function, the callbacks, the SLURM launcher, the frontier search, the planner) asks
    the context for the sweep's folder: none reads ``hydra.sweep.dir`` or ``hydra.run.dir`` itself."""
    readers = {p for p in SRC.rglob("*.py") if _reads_hydra_dirs(p)}
    assert readers <= READERS, sorted(str(p.relative_to(SRC)) for p in readers - READERS)
    assert SRC / "sweeper" / "point" / "context.py" in readers  # the scan finds a reader (not vacuous)
