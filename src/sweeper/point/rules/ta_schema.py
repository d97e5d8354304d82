"""The installed ``TrainingArguments``' fields (names, types, defaults), learnt without importing transformers.

The driver must not import transformers (it pulls torch in; a 1,000-point grid must not wait for it). The first
time a transformers version is seen, a helper subprocess (``python -m sweeper.job.ta_fields``, a few seconds)
prints the fields as JSON; the result is cached in the per-host cache (:func:`sweeper.paths.cache_dir`:
``$SWEEPER_CACHE_DIR``, else ``$XDG_CACHE_HOME/sweeper/``, else ``~/.cache/sweeper/``) under the transformers
version read from package metadata (:func:`importlib.metadata.version`, no import), so only the first sweep per
version pays for it. A cache file that cannot be read or has the wrong shape is rebuilt.

:func:`conforms` tells whether a command-line value can be a field's type (the type descriptions are documented in
:mod:`sweeper.job.ta_fields`).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from sweeper.paths import cache_dir
from sweeper.results.atomic import write_json_atomic

#: The helper module run as a subprocess (the rank side: it may import transformers).
HELPER = "sweeper.job.ta_fields"
#: Shape version of the helper's output (``sweeper.job.ta_fields.FORMAT``; not imported: that module is rank-side).
FORMAT = 2
#: Seconds the helper may take (importing transformers and torch on a slow, busy machine).
HELPER_TIMEOUT_S = 300


class SchemaUnavailable(RuntimeError):
    """The installed ``TrainingArguments`` fields could not be read (transformers missing, the helper failed)."""


@dataclass(frozen=True)
class Field:
    """One ``TrainingArguments`` field.

    Attributes:
        name: the field name.
        type: its type description (see :mod:`sweeper.job.ta_fields`).
        text: the annotation as written, e.g. ``"float"``, ``"SchedulerType | str"``.
        default: its default value (JSON data), when :attr:`has_default`.
        help: the field's help text in the installed transformers (``metadata["help"]``).
    """

    name: str
    type: dict[str, Any]
    text: str
    default: Any = None
    has_default: bool = False
    help: str = ""


@dataclass(frozen=True)
class Schema:
    """The fields of the installed ``TrainingArguments``.

    Attributes:
        transformers: the transformers version they were read from.
        fields: field name -> :class:`Field`.
    """

    transformers: str
    fields: dict[str, Field]

    def defaults(self) -> dict[str, Any]:
        """Field name -> default value, for the fields that have one."""
        return {n: f.default for n, f in self.fields.items() if f.has_default}

    @classmethod
    def from_json(cls, data: Any) -> Schema:
        """Parse the helper's output.

        Raises:
            ValueError: not the shape :mod:`sweeper.job.ta_fields` prints (wrong format version, missing parts).
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("fields"), dict):
            raise ValueError("not a TrainingArguments field list of this format")
        fields = {}
        for name, entry in data["fields"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), dict) or "t" not in entry["type"]:
                raise ValueError(f"field {name!r} has no type description")
            fields[name] = Field(
                name,
                entry["type"],
                str(entry.get("text", "")),
                entry.get("default"),
                bool(entry.get("has_default")),
                str(entry.get("help", "")),
            )
        if not fields:
            raise ValueError("no fields")
        return cls(str(data.get("transformers", "")), fields)


def cache_path(version: str, directory: Path | None = None) -> Path:
    """The cache file for transformers ``version``: ``<dir>/training_args-<version>-f<FORMAT>.json``."""
    safe = "".join(c if c.isalnum() or c in ".+-_" else "_" for c in version)
    return (directory or cache_dir()) / f"training_args-{safe}-f{FORMAT}.json"


def installed_transformers() -> str:
    """The installed transformers version, from package metadata (no import).

    Raises:
        SchemaUnavailable: transformers is not installed.
    """
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError as e:
        raise SchemaUnavailable("transformers is not installed") from e


def load_schema(directory: Path | None = None) -> Schema:
    """The installed ``TrainingArguments`` fields: from the cache when it holds a valid entry for the installed
    version, else from the helper subprocess (then written to the cache atomically; an unwritable cache is only
    not written).

    Args:
        directory: the cache directory (default :func:`cache_dir`).

    Raises:
        SchemaUnavailable: transformers is not installed, or the helper failed (its stderr tail in the message).
    """
    path = cache_path(installed_transformers(), directory)
    try:
        return Schema.from_json(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass  # no cache yet, or a corrupt one: rebuild it
    try:
        proc = subprocess.run(
            [sys.executable, "-m", HELPER], capture_output=True, text=True, timeout=HELPER_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SchemaUnavailable(f"python -m {HELPER} did not run: {e}") from e
    if proc.returncode != 0:
        raise SchemaUnavailable(f"python -m {HELPER} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    try:
        data = json.loads(proc.stdout)
        schema = Schema.from_json(data)
    except ValueError as e:
        raise SchemaUnavailable(f"python -m {HELPER} printed no field list: {e}") from e
    try:
        write_json_atomic(path, data)
    except OSError:
        pass  # a read-only home: the next process asks the helper again
    return schema


@functools.cache
def training_args_schema() -> Schema | None:
    """:func:`load_schema` once per process; None (with one warning on stderr) when the fields cannot be read,
    so the gate then cannot check ``training_args`` names and types and says so."""
    try:
        return load_schema()
    except SchemaUnavailable as e:
        print(
            f"sweeper: warning: cannot read the installed TrainingArguments fields ({e}); training_args names and "
            "types are not checked before launch",
            file=sys.stderr,
        )
        return None


def conforms(value: Any, desc: dict[str, Any]) -> bool:
    """True when ``value`` (as Hydra passes it: bool, int, float, str, None, list, dict) can be a field of type
    ``desc``. A bool is not an int, an int is a float, a string is not a number; a ``choice`` takes only its
    values; a ``class`` (a Python object) takes nothing from the command line."""
    t = desc.get("t")
    if t == "any":
        return True
    if t == "bool":
        return isinstance(value, bool)
    if t == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "str":
        return isinstance(value, str)
    if t == "none":
        return value is None
    if t == "list":
        return isinstance(value, (list, tuple)) and all(conforms(v, desc.get("of", {"t": "any"})) for v in value)
    if t == "dict":
        return isinstance(value, dict) and all(conforms(v, desc.get("value", {"t": "any"})) for v in value.values())
    if t == "union":
        return any(conforms(value, d) for d in desc.get("of", []))
    if t == "choice":
        return any(type(value) is type(c) and value == c for c in desc.get("values", []))
    return False


def type_text(desc: dict[str, Any]) -> str:
    """A type description in words, for messages: ``float``, ``one of linear, cosine, ...``, ``list of str``."""
    t = desc.get("t")
    if t == "choice":
        return "one of " + ", ".join(v if isinstance(v, str) else json.dumps(v) for v in desc.get("values", []))
    if t == "list":
        return f"list of {type_text(desc.get('of', {'t': 'any'}))}"
    if t == "dict":
        inner = desc.get("value", {"t": "any"})
        return "dict" if inner.get("t") == "any" else f"dict of {type_text(inner)}"
    if t == "union":
        return " or ".join(type_text(d) for d in desc.get("of", []))
    if t == "class":
        return f"a {desc.get('name')} object (not settable from the command line)"
    return str(t)
