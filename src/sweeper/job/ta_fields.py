"""``python -m sweeper.job.ta_fields``: print the installed ``TrainingArguments`` fields as JSON.

The driver never imports transformers (it would pull torch in); the gate learns the field names, types and defaults
of the *installed* ``TrainingArguments`` by running this module once per transformers version as a helper
subprocess and caching its output (:mod:`sweeper.point.rules.ta_schema`).

Output (one JSON object on stdout)::

    {"format": 1, "transformers": "5.24.0",
     "fields": {"learning_rate": {"type": {"t": "float"}, "text": "float", "default": 5e-05, "has_default": true,
                                  "help": "The initial learning rate for AdamW."},
                ...}}

Type descriptions (``"type"``), recursive: ``{"t": "bool" | "int" | "float" | "str" | "none" | "any" | "dict"}``,
``{"t": "list", "of": T}``, ``{"t": "dict", "value": T}``, ``{"t": "union", "of": [T, ...]}``,
``{"t": "choice", "name": "SchedulerType", "values": [...]}`` (an enum, also when spelled ``Enum | str``: transformers
converts the string to the enum and refuses any other value) and ``{"t": "class", "name": "ParallelismConfig"}``
(a Python object no command-line value can be).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
import types
import typing
from typing import Any

#: Version of this output's shape; part of the cache key, so a change of shape rebuilds every cache.
FORMAT = 2

_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", type(None): "none"}


def describe(tp: Any) -> dict[str, Any]:
    """A JSON description of the type annotation ``tp`` (see the module doc)."""
    if tp is Any:
        return {"t": "any"}
    if tp in _SCALARS:
        return {"t": _SCALARS[tp]}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        rest = [a for a in args if a not in enums and a is not str]
        if enums and str in args:  # ``SchedulerType | str``: the string must be one of the enum's values
            options = [_choice(e) for e in enums] + [describe(a) for a in rest]
            return options[0] if len(options) == 1 else {"t": "union", "of": options}
        return {"t": "union", "of": [describe(a) for a in args]}
    if origin is typing.Literal:
        return {"t": "choice", "name": "Literal", "values": [_jsonable(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        return {"t": "list", "of": describe(args[0]) if args else {"t": "any"}}
    if origin is dict or tp is dict:
        return {"t": "dict", "value": describe(args[1]) if len(args) == 2 else {"t": "any"}}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _choice(tp)
    return {"t": "class", "name": getattr(tp, "__name__", str(tp))}


def _choice(e: type[enum.Enum]) -> dict[str, Any]:
    return {"t": "choice", "name": e.__name__, "values": [_jsonable(m.value) for m in e]}


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data; enums by their value; anything else that JSON cannot hold by its ``repr``."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def fields() -> dict[str, Any]:
    """The installed ``TrainingArguments``' init fields: type description, annotation text, default and help (the
    field's ``metadata["help"]``, which says for example which fields the Trainer never reads).

    Raises:
        ImportError: transformers is not installed.
    """
    import transformers
    from transformers import TrainingArguments

    hints = typing.get_type_hints(TrainingArguments)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(TrainingArguments):
        if not f.init:
            continue
        tp = hints.get(f.name, Any)
        entry: dict[str, Any] = {"type": describe(tp), "text": _text(tp), "has_default": True}
        entry["help"] = str((f.metadata or {}).get("help", ""))
        if f.default is not dataclasses.MISSING:
            entry["default"] = _jsonable(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            entry["default"] = _jsonable(f.default_factory())
        else:
            entry["has_default"] = False
        out[f.name] = entry
    return {"format": FORMAT, "transformers": transformers.__version__, "fields": out}


def _text(tp: Any) -> str:
    """The annotation as a person reads it: ``float``, ``str | None``, ``SchedulerType | str``."""
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    text = str(tp).replace("NoneType", "None")
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)  # drop module paths


def main() -> None:
    """Print :func:`fields` as JSON on stdout."""
    json.dump(fields(), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
