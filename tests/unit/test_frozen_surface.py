"""The user-facing surface is frozen together with ``SCHEMA_VERSION`` (as torchtitan's test_no_new_cli_options.py
freezes its CLI): every ``SweeperConfig`` key (type and default), every result column (dtype and unit) and every
record status (``sweeper.results.record.STATUSES``, with whether it is final).

A renamed, removed or retyped key or column fails until ``SCHEMA_VERSION`` (``sweeper/results/columns.py``) is bumped
*and* the golden file is rewritten; an added one fails until the golden file is rewritten (no bump). Rewrite it with
``SWEEPER_UPDATE_SURFACE=1 pytest tests/unit/test_frozen_surface.py`` and commit it with the change.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from sweeper.config.schema import SweeperConfig
from sweeper.results.columns import COLUMNS, SCHEMA_VERSION
from sweeper.results.record import FINAL_STATUSES, STATUSES

GOLDEN = Path(__file__).parent / "golden" / "surface.json"


def _type_name(tp: Any) -> str:
    return (
        str(tp).replace("typing.", "").replace("sweeper.config.schema.", "").replace("<class '", "").replace("'>", "")
    )


def config_surface(cls: type = SweeperConfig, prefix: str = "") -> dict[str, str]:
    """``{dotted key: "type = default"}`` for every leaf of the schema (nested dataclasses recursed)."""
    out: dict[str, str] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.update(config_surface(tp, f"{prefix}{f.name}."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if isinstance(default, Enum):
            default = default.value
        out[f"{prefix}{f.name}"] = f"{_type_name(tp)} = {json.dumps(default, default=str)}"
    return out


def column_surface() -> dict[str, str]:
    """``{column: "dtype [unit]"}`` for every result column."""
    return {c.name: f"{c.dtype} [{c.unit}]" for c in COLUMNS}


def status_surface() -> dict[str, str]:
    """``{status: "final" | "not final"}`` for every record status."""
    return {s: "final" if s in FINAL_STATUSES else "not final" for s in STATUSES}


def surface() -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "config": config_surface(),
        "columns": column_surface(),
        "statuses": status_surface(),
    }


def _changed(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Keys removed or changed (renames show as a removal): what needs a version bump."""
    return sorted(k for k in old if k not in new or old[k] != new[k])


def test_config_keys_and_result_columns_are_frozen_with_the_schema_version():
    now = surface()
    if os.environ.get("SWEEPER_UPDATE_SURFACE"):
        GOLDEN.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    breaking = [k for part in ("config", "columns", "statuses") for k in _changed(golden.get(part, {}), now[part])]
    if breaking and now["schema_version"] <= golden["schema_version"]:
        raise AssertionError(
            f"renamed, removed or retyped without a SCHEMA_VERSION bump: {breaking} "
            "(bump sweeper.results.columns.SCHEMA_VERSION, then rewrite the golden file: see this module's doc)"
        )
    assert now == golden, (
        "the config keys, result columns or statuses changed: rewrite tests/unit/golden/surface.json with "
        "SWEEPER_UPDATE_SURFACE=1 (see this module's doc) and commit it with the change"
    )


def test_the_check_fails_on_a_rename_without_a_bump():
    """The check itself: a renamed column and a retyped key are breaking, an added one is not."""
    old = {"a": "int = 1", "b": 'str = "x"'}
    assert _changed(old, {"a": "int = 1", "b": 'str = "x"', "c": "bool = false"}) == []
    assert _changed(old, {"a": "int = 1", "b2": 'str = "x"'}) == ["b"]
    assert _changed(old, {"a": "float = 1", "b": 'str = "x"'}) == ["a"]


def test_the_point_spec_holds_every_point_key_of_the_schema_with_its_type():
    """``PointSpec``'s fields are the schema's point keys (it inherits :class:`PointKeys`), so ``from_config``
    (which keeps only the spec's fields) never drops a key the command line accepts. A key with fixed choices keeps
    its schema type (a ``Choice``: its string for every purpose); the model section becomes ``model`` (its name),
    ``model_type``, ``decoder_layer`` and ``model_config``; where the point runs (``launcher``, ``cluster``) and W&B
    are not the point's."""
    from sweeper.config.spec import PointSpec

    not_the_point = {"launcher", "cluster", "wandb"}
    model_fields = {"model": "str", "model_type": "str", "decoder_layer": "str", "model_config": "dict[str, Any]"}
    derived = {"timed_auto": "bool"}  # timed_steps=auto, as a flag (the spec's timed_steps holds the cap)
    schema = typing.get_type_hints(SweeperConfig)
    spec = typing.get_type_hints(PointSpec)

    expected = {k: _type_name(tp) for k, tp in schema.items() if k not in not_the_point | {"model"}}
    expected.update(model_fields)
    expected.update(derived)
    assert {k: _type_name(tp) for k, tp in spec.items()} == expected
