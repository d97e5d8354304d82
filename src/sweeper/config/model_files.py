"""``model=`` from where users keep their models: a name of ``conf/model/``, a path to a ``config.json`` (or a folder
holding one), or a Hugging Face hub id found in the local cache (docs/models.md).

Hydra's ``model`` config group selects files by name only (``model=<dir>/config.json`` was a "Could not find"
error listing four models). Before Hydra composes, :func:`resolve_model_arguments` turns each ``model=`` value that
names no model file into one: the user's ``config.json`` is read by transformers in a helper process
(:mod:`sweeper.job.model_info`: its ``model_type``, its decoder block, its architecture numbers) and written as a
model file (``conf/model/*.yaml``'s shape) into the per-host cache (``<cache>/models/model/<name>.yaml``, made again
when the file's content or transformers change); the command line then selects that file by name, with the cache's
folder on Hydra's search path. Every later reader (the sweep, the pre-flight, the planner, the report, W&B, the
replay lines, which carry the search path) names the model the same way: the folder's name (``Mistral-7B-v0.1``)
or the hub id's (``mistralai--Mistral-7B-v0.1``). Nothing is downloaded: a hub id that is not in the local cache is
refused, naming the cache and the command that fetches the file.

This module imports neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sweeper.paths import cache_dir, conf_dir

#: The helper that reads a ``config.json`` with transformers (rank side: the driver never imports it).
HELPER = "sweeper.job.model_info"


class ModelNotFound(ValueError):
    """A ``model=`` value that names no model file, no ``config.json`` and no cached hub id (the message lists every
    way out)."""


def models_dir() -> Path:
    """The config folder of generated model files (``<cache>/models``; its ``model/`` holds them)."""
    return cache_dir() / "models"


def _known_names(search_dirs: list[Path]) -> set[str]:
    names = {p.stem for p in (conf_dir() / "model").glob("*.yaml")}
    for folder in search_dirs:
        names |= {p.stem for p in (folder / "model").glob("*.yaml")}
    return names


def find_config_json(value: str) -> tuple[Path, str] | None:
    """``(config.json path, model name)`` for a ``model=`` value that is a file, a folder holding ``config.json``,
    or a hub id in the local Hugging Face cache; None when it is none of them.

    Raises:
        ModelNotFound: a hub id (``org/name``) that is not in the local cache.
    """
    path = Path(value).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json", _slug(path.resolve().name)
    if path.is_file():
        return path, _slug(path.resolve().parent.name if path.name == "config.json" else path.stem)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", value) and not path.parent.exists():
        from huggingface_hub import constants, try_to_load_from_cache

        found = try_to_load_from_cache(value, "config.json")
        if isinstance(found, str):
            return Path(found), _slug(value.replace("/", "--"))
        raise ModelNotFound(
            f"model={value}: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}); sweeper never downloads "
            f"a model you did not ask for: fetch its config once with `hf download {value} config.json` (or "
            "`huggingface-cli download ...`; a gated model needs your token), or give the path of a config.json"
        )
    return None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def model_file(config_json: Path, name: str) -> Path:
    """The model file for ``config_json`` under ``name`` in :func:`models_dir`, made by the helper when it is missing
    or was made from another content or transformers version (the first line records both).

    Raises:
        ModelNotFound: transformers cannot read the file, or has no causal LM for its ``model_type`` (its words).
    """
    from importlib.metadata import version

    digest = hashlib.sha256(config_json.read_bytes()).hexdigest()[:16]
    stamp = f"# sweeper model file of {config_json.resolve()} (sha256 {digest}, transformers {version('transformers')})"
    out = models_dir() / "model" / f"{name}.yaml"
    if out.is_file() and out.read_text().splitlines()[:1] == [stamp]:
        return out
    proc = subprocess.run(
        [sys.executable, "-m", HELPER, str(config_json)], capture_output=True, text=True, timeout=300, check=False
    )
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ModelNotFound(f"model={config_json}: the helper {HELPER} failed: {proc.stderr.strip()[-500:]}") from None
    if "error" in answer:
        raise ModelNotFound(f"model={config_json}: {answer['error']}")
    lines = [
        stamp,
        f"name: {json.dumps(name)}",
        f"model_type: {json.dumps(answer['model_type'])}",
        f"decoder_layer: {json.dumps(answer['decoder_layer'])}",
        # JSON is YAML; a string holding "${" is the user's text, never an OmegaConf interpolation (escaped)
        f"config: {json.dumps(_literal(answer['config']), sort_keys=True)}",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out.parent)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, out)
    return out


def _literal(value: Any) -> Any:
    """``value`` (a config's JSON data) with every ``${`` of its strings escaped (``\\${``), so OmegaConf reads them as
    the text they are, not as interpolations or resolver calls (``${oc.env:...}`` in a user's config.json)."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def resolve_model_arguments(argv: list[str]) -> list[str]:
    """``argv`` with each ``model=`` value (a sweep's ``model=a,b`` too) that names no model file replaced by the name
    of one made from its ``config.json`` (module doc), and the generated files' folder added to
    ``hydra.searchpath`` (merged with the user's own); ``argv`` unchanged when every value is a model file's name.

    Raises:
        ModelNotFound: a value that is no model file, no ``config.json`` and no cached hub id.
    """
    from sweeper.config.keys import search_dirs

    known = _known_names(search_dirs(argv))
    out, generated = [], False
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key.lstrip("+") != "model" or value.startswith(("[", "choice(", "range(")):
            out.append(arg)
            continue
        names = []
        for item in value.split(","):
            if item in known:
                names.append(item)
                continue
            found = find_config_json(item)
            if found is None:
                shown = ", ".join(sorted(known))
                raise ModelNotFound(
                    f"model={item}: no model file of that name (conf/model/: {shown}), and no config.json at that "
                    "path; give a model's name, the path of a Hugging Face config.json or of its folder, or a hub id "
                    "in the local cache (docs/models.md)"
                )
            names.append(model_file(*found).stem)
            generated = True
        out.append(f"{key}={','.join(names)}")
    if not generated:
        return argv
    entry = f"file://{models_dir()}"
    for i, arg in enumerate(out):
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "hydra.searchpath":
            inner = value.strip()[1:-1].strip() if value.strip().startswith("[") else value.strip()
            out[i] = f"{key}=[{inner + ',' if inner else ''}{entry}]"
            return out
    return [*out, f"hydra.searchpath=[{entry}]"]


def refuse_unknown_models(argv: list[str], app: str) -> list[str]:
    """:func:`resolve_model_arguments`, exiting 2 with its one-line message (``app`` names the command) when a value
    names no model."""
    try:
        return resolve_model_arguments(argv)
    except ModelNotFound as e:
        print(f"{app}: {e}", file=sys.stderr)
        sys.exit(2)
