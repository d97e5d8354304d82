"""The config nodes the Hydra callbacks and ``python -m sweeper`` hand on as plain data (``cluster``, ``wandb``,
``hydra.sweeper.params``): :func:`sweeper.config.compose.plain_node`."""

from __future__ import annotations

from enum import Enum

import pytest
from omegaconf import OmegaConf

from sweeper.config.compose import plain_node


class Mode(Enum):
    offline = "offline"


def test_a_mapping_node_becomes_a_plain_dict_resolved_unless_told_not_to():
    cfg = OmegaConf.create({"a": 2, "cluster": {"gpu_mem_gib": "${a}", "nested": {"x": [1, 2]}}})
    assert plain_node(cfg.cluster) == {"gpu_mem_gib": 2, "nested": {"x": [1, 2]}}
    assert type(plain_node(cfg.cluster)) is dict
    assert plain_node(cfg.cluster, resolve=False)["gpu_mem_gib"] == "${a}"


def test_enums_become_their_names_only_when_asked():
    cfg = OmegaConf.create({"wandb": {"mode": Mode.offline}})
    assert plain_node(cfg.wandb, enum_to_str=True) == {"mode": "offline"}
    assert plain_node(cfg.wandb) == {"mode": Mode.offline}


def test_a_list_node_is_refused():
    cfg = OmegaConf.create({"params": [1, 2]})
    with pytest.raises(TypeError, match="not a mapping node: list"):
        plain_node(cfg.params)
