"""One config definition: the schema's :class:`PointKeys` holds every point key's type and default once; the spec and
the Hydra schema are built from it, and the YAML files restate none of its values."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from sweeper.config.schema import Choice, Fsdp, PointKeys, Precision, SweeperConfig, schema_node
from sweeper.config.spec import PointSpec
from sweeper.paths import conf_dir
from tests.unit.specs import make_spec

#: The config groups whose option files choose a section's values (``conf/<group>/<option>.yaml``).
SECTION_GROUPS = ("launcher", "search", "wandb")
#: The key of an option file that names the option (``search/frontier.yaml``: ``name: frontier``).
NAMING_KEYS = ("name", "mode")


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


def _schema_default(path: str) -> Any:
    node = OmegaConf.to_container(schema_node(), resolve=False, enum_to_str=True)
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return KeyError(path)
        node = node[part]
    return node


def _restated(data: dict[str, Any], package: str, option: str | None) -> list[str]:
    """The leaves of a YAML file (outside its defaults list and Hydra's settings) equal to the schema's default."""
    body = {k: v for k, v in data.items() if k not in ("defaults", "hydra")}
    out = []
    for path, value in _leaves(body).items():
        full = f"{package}.{path}" if package else path
        if option is not None and path.rsplit(".", 1)[-1] in NAMING_KEYS and value == option:
            continue  # the option names itself
        if _schema_default(full) == value:
            out.append(f"{full}={value!r}")
    return out


def _yaml_files() -> list[tuple[Path, str, str | None]]:
    files: list[tuple[Path, str, str | None]] = [
        (conf_dir() / "config.yaml", "", None),
        (conf_dir() / "plan.yaml", "", None),
    ]
    for group in SECTION_GROUPS:
        for path in sorted((conf_dir() / group).glob("*.yaml")):
            glob = "@package _global_" in path.read_text()
            files.append((path, "" if glob else group, path.stem))
    return files


@pytest.mark.parametrize("path,package,option", _yaml_files(), ids=lambda v: v.name if isinstance(v, Path) else None)
def test_yaml_restates_no_schema_default(path, package, option):
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert _restated(data, package, option) == [], f"{path.name}: the default lives in the schema (PointKeys)"


def test_restatement_check_can_fail():
    """The check above finds a restated value (it is not vacuous)."""
    assert _restated({"seq_len": 128, "gc": True}, "", None) == ["seq_len=128"]
    assert _restated({"screen_timed_steps": 3, "name": "frontier"}, "search", "frontier") == [
        "search.screen_timed_steps=3"
    ]


def test_spec_and_schema_are_the_point_keys_plus_their_own():
    keys = {f.name for f in dataclasses.fields(PointKeys)}
    assert {f.name for f in dataclasses.fields(PointSpec)} - keys == {
        "model",
        "model_type",
        "decoder_layer",
        "model_config",
        "timed_auto",
    }
    assert {f.name for f in dataclasses.fields(SweeperConfig)} - keys == {"model", "launcher", "cluster", "wandb"}
    # every default of the spec is the schema's own (no second definition to drift)
    defaults = make_spec()
    for f in dataclasses.fields(PointKeys):
        value = getattr(defaults, f.name)
        if f.default is not dataclasses.MISSING:
            assert value == f.default, f.name


def test_choice_keys_are_typed_and_refused():
    spec = make_spec(fsdp="full_shard", precision="bf16")
    assert spec.fsdp is Fsdp.full_shard and spec.precision is Precision.bf16
    data = spec.to_dict()
    assert type(data["fsdp"]) is str and data["fsdp"] == "full_shard"
    assert PointSpec.from_dict(data) == spec
    with pytest.raises(ValueError, match="sharded"):
        PointSpec.from_dict({**data, "fsdp": "sharded"})


def test_a_choice_member_is_its_string():
    member = Fsdp.full_shard
    assert isinstance(member, Choice)
    assert (str(member), f"{member}", repr(member)) == ("full_shard", "full_shard", "'full_shard'")
    assert json.dumps({"k": member}) == '{"k": "full_shard"}'
    assert hash(member) == hash("full_shard") and {"full_shard": 1}[member] == 1
    assert pickle.loads(pickle.dumps(member)) is member
