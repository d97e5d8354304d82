"""Every override's key is checked against the schema before Hydra composes (:mod:`sweeper.config.keys`): a typo
with or without ``+`` is refused with the nearest known keys, exit 2; the passthrough dicts and config groups take
what they take (no process: the check runs in this one)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from sweeper.config.keys import LEAF, PASSTHROUGH, key_tree, refuse_unknown_keys, unknown_key
from sweeper.config.schema import SweeperConfig, register_configs
from sweeper.paths import conf_dir
from sweeper.results.opening import register_resolver


@pytest.fixture(scope="module")
def tree():
    register_configs()
    return key_tree(SweeperConfig)


def _refusal(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        refuse_unknown_keys(argv, "python -m sweeper")
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("arg", "suggested"),
    [
        ("gcc=true", "did you mean gc?"),
        ("+gcc=true,false", "did you mean gc?"),  # Hydra took this one silently: four jobs, gcc ignored
        ("++gcc=true", "did you mean gc?"),
        ("~gcc", "did you mean gc?"),
        ("precison=bf16", "did you mean precision?"),
        ("ranks=2", "ranks_per_node"),
        ("mdoel=tiny", "did you mean model?"),
        ("cluster.gpu_mem=80", "cluster.gpu_mem_gib"),
        ("+cluster.gpus=8", "cluster.gpus_per_node"),
        ("timing.ci=0.1", "timing.ci_rel"),
        ("plan.calibrat=x", "plan.calibrate"),
    ],
)
def test_a_typo_is_refused_with_the_nearest_keys(arg, suggested, capsys):
    err = _refusal([arg], capsys)
    assert arg in err and suggested in err, err
    assert "nothing ran" in err and "--help" in err
    assert "Traceback" not in err


def test_every_unknown_key_of_a_command_line_is_named_at_once(capsys):
    err = _refusal(["-m", "gcc=true,false", "fsdp=none,full_shard", "+zer0=2"], capsys)
    assert "'gcc=true,false'" in err and "'+zer0=2'" in err and "zero" in err
    assert "fsdp" not in err.split("nothing ran")[0]  # a known key is not named


def test_a_value_has_no_sub_keys(tree):
    assert "gc is a value" in unknown_key("gc.x", tree, set())


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "fsdp=none,full_shard", "gc=true,false"],
        ["+training_args.max_grad_norm=0.5", "+training_args.anything_goes.deep=1"],  # the gate checks these
        ["+fsdp_config.cpu_offload=true", "+deepspeed_config.zero_optimization.overlap_comm=false"],
        ["model.config.hidden_size=32", "+model.config.rope_theta=1e6", "+cluster.sbatch_extra.qos=high"],
        ["+callbacks=[{_target_:transformers.EarlyStoppingCallback}]", "+callbacks.0.x=1"],
        ["+sweeps=zero", "model=llama-2-7b", "cluster=dev", "launcher=slurm", "wandb=off", "search=frontier"],
        ["hydra.run.dir=/tmp/x", "hydra/launcher=basic", "hydra.sweeper.params.gc=true,false", "--cfg", "job"],
        ["-cn", "plan", "--config-dir=/nonexistent", "plan.calibrate=/tmp/sweep", "timing.ci_rel=0.05"],
        ["tp=2", "sp=1", "pp=1", "per_device_batch_size=auto", "timed_steps=auto", "launcher.wait=false"],
    ],
)
def test_known_keys_passthrough_entries_and_groups_pass(argv):
    refuse_unknown_keys(argv, "python -m sweeper")  # no SystemExit


def test_a_group_of_the_users_own_config_folder_is_known(tmp_path):
    (tmp_path / "experiment").mkdir()
    refuse_unknown_keys([f"hydra.searchpath=[file://{tmp_path}]", "+experiment=big"], "python -m sweeper")
    refuse_unknown_keys(["--config-dir", str(tmp_path), "+experiment=big"], "python -m sweeper")
    quoted = f"hydra.searchpath=['file:///elsewhere','file://{tmp_path}']"  # Hydra's grammar: quoted entries
    refuse_unknown_keys([quoted, "+experiment=big"], "python -m sweeper")


def test_the_tree_is_the_schema_hydra_validates_against(tree):
    """Every key Hydra's composed config holds is in the tree (the check can never refuse a key Hydra knows), and
    the passthrough entries are exactly the dict/list-typed fields."""
    register_resolver()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=["launcher=slurm", "cluster=dev"])

    def walk(node, sub, prefix=""):
        for key in node:
            assert key in sub, f"{prefix}{key} is in the composed config but not in the key tree"
            child = node[key]
            if hasattr(child, "keys") and sub[key] not in (PASSTHROUGH, LEAF):
                walk(child, sub[key], f"{prefix}{key}.")

    walk(cfg, tree)
    passthrough = {k for k, v in tree.items() if v == PASSTHROUGH}
    assert passthrough == {"fsdp_config", "deepspeed_config", "training_args", "callbacks"}
    assert tree["model"]["config"] == PASSTHROUGH and tree["cluster"]["sbatch_extra"] == PASSTHROUGH
