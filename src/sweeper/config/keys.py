"""Every override's key checked against the schema before Hydra composes anything (``gcc=true`` and ``+gcc=true``).

Hydra refuses an unknown key without ``+`` with advice to add ``+`` and no suggestion, and takes one *with* ``+``
silently: ``python -m sweeper -m +gcc=true,false`` ran four jobs, two measured points, ``gcc`` ignored. Here the key
of every override on the command line is looked up in the tree of :class:`sweeper.config.schema.SweeperConfig` (the
one definition of the keys: what Hydra validates values against) and the config groups Hydra can select
(``conf/<group>/``, the registered ``sweeps`` grids, a user's ``hydra.searchpath`` / ``--config-dir`` folders). An
unknown key exits 2, before any directory is made or any rank starts, with the nearest known keys. Only the
passthrough entries take new keys: ``training_args``, ``fsdp_config``, ``deepspeed_config``, ``model.config``,
``cluster.sbatch_extra`` (dict-typed fields), whose entries are checked against the libraries that read them by the
gate and the pre-flight (``docs/gate.md``).

This module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: A key that takes any sub-key: a dict- or list-typed field (its entries are for the library that reads it).
PASSTHROUGH = "passthrough"
#: A key with a value and no sub-keys.
LEAF = "leaf"

KeyTree = Mapping[str, Any]


def key_tree(cls: type) -> dict[str, Any]:
    """The keys of dataclass ``cls`` as a tree: a nested dataclass is a sub-tree, a dict/list/``Any`` field is
    :data:`PASSTHROUGH`, anything else :data:`LEAF`."""
    hints = typing.get_type_hints(cls)
    tree: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        origin = typing.get_origin(kind)
        if dataclasses.is_dataclass(kind) and isinstance(kind, type):
            tree[f.name] = key_tree(kind)
        elif kind is Any or origin in (dict, list) or kind in (dict, list):
            tree[f.name] = PASSTHROUGH
        else:
            tree[f.name] = LEAF
    return tree


def search_dirs(argv: Iterable[str]) -> list[Path]:
    """The extra config folders a command line gives Hydra: ``--config-dir``/``-cd`` and ``file://`` entries of
    ``hydra.searchpath``."""
    args = list(argv)
    dirs: list[Path] = []
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            from hydra.core.override_parser.overrides_parser import OverridesParser

            try:  # Hydra's grammar reads the list (quotes, escapes), as Hydra itself will
                (override,) = OverridesParser.create().parse_overrides([arg])
                value = override.value()
            except Exception:  # noqa: BLE001 - Hydra says what is wrong with it, in its words
                continue
            for entry in value if isinstance(value, list) else [value]:
                if str(entry).startswith("file://"):
                    dirs.append(Path(str(entry)[len("file://") :]))
    return dirs


def config_groups(argv: Iterable[str] = ()) -> set[str]:
    """The config groups an override can select: the folders of ``conf/`` and of the command line's extra config
    folders, and the groups registered in Hydra's ConfigStore (``sweeps``)."""
    from hydra.core.config_store import ConfigStore

    from sweeper.paths import conf_dir

    groups = {p.name for p in conf_dir().iterdir() if p.is_dir()}
    for folder in search_dirs(argv):
        if folder.is_dir():
            groups |= {p.name for p in folder.iterdir() if p.is_dir()}
    store = ConfigStore.instance().repo
    groups |= {name for name, node in store.items() if isinstance(node, dict) and name != "hydra"}
    return groups


def _overrides(argv: Iterable[str]) -> list[tuple[str, str]]:
    """``(key, the argument)`` of each override on the command line (``+``/``++``/``~`` and a ``@package`` dropped);
    flags and their values are not overrides. An argument Hydra's grammar refuses is left to Hydra's own message."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    found = []
    for arg in argv:
        if arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            continue
        try:
            (override,) = parser.parse_overrides([arg])
        except Exception:  # noqa: BLE001 - Hydra says what is wrong with it, in its words
            continue
        found.append((override.key_or_group, arg))
    return found


def unknown_key(key: str, tree: KeyTree, groups: set[str]) -> str | None:
    """Why ``key`` (dotted, or a ``group/option`` path) names no key of ``tree`` and no config group, with the
    nearest known keys; None when it is known. ``hydra.*`` and ``hydra/*`` are Hydra's to check."""
    parts = key.replace("/", ".").split(".")
    if parts[0] == "hydra":
        return None
    if "/" in key:  # a nested group path (model/xyz=...): its first folder must be a group
        return None if parts[0] in groups else _nearest(parts[0], [*tree, *groups], "")
    node: Any = tree
    for depth, part in enumerate(parts):
        if node == PASSTHROUGH:
            return None
        if node == LEAF:
            parent = ".".join(parts[:depth])
            return f"{parent} is a value, not a section: it has no key {part!r}"
        if part in node:
            node = node[part]
            continue
        if depth == 0 and part in groups:
            return None if len(parts) == 1 else f"{part} is a config group: select an option with {part}=<name>"
        prefix = ".".join(parts[:depth])
        names = list(node) + (sorted(groups - set(node)) if depth == 0 else [])
        return _nearest(part, names, prefix)
    return None


def _nearest(part: str, names: list[str], prefix: str) -> str:
    where = f"{prefix} has no key {part!r}" if prefix else f"no key {part!r}"
    close = difflib.get_close_matches(part, names, n=3, cutoff=0.6)
    if not close:  # a prefix typed short (ranks=2) or long (gcc): the known keys that contain it, or it them
        close = [n for n in names if n.startswith(part) or (part.startswith(n) and len(n) > 1)][:3]
    if not close:
        return where
    dotted = [f"{prefix}.{c}" if prefix else c for c in close]
    return f"{where}; did you mean {' or '.join(dotted)}?"


def refuse_unknown_keys(argv: list[str], app: str, schema: type | None = None) -> None:
    """Exit 2 with one line per unknown key of ``argv`` (a command line of ``app``, e.g. ``python -m sweeper``),
    before Hydra composes: the key, the argument it came from, the nearest known keys and where the keys are
    listed. ``schema``: the dataclass whose keys are known (default :class:`sweeper.config.schema.SweeperConfig`)."""
    from sweeper.config.schema import SweeperConfig

    tree = key_tree(schema or SweeperConfig)
    overrides = _overrides(argv)
    if not overrides:
        return
    groups = config_groups(argv)
    problems = [(arg, why) for key, arg in overrides if (why := unknown_key(key, tree, groups)) is not None]
    if not problems:
        return
    for arg, why in problems:
        print(f"sweeper: unknown key in {arg!r}: {why}", file=sys.stderr)
    print(
        f"sweeper: nothing ran. The keys and their values: {app} --help; a new key goes only into a passthrough "
        "dict (+training_args.<field>, +fsdp_config.<k>, +deepspeed_config.<a>.<b>, +model.config.<k>)",
        file=sys.stderr,
    )
    sys.exit(2)
