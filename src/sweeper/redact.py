"""Secrets given on the command line never reach a file or the terminal: they travel in the environment only.

A value is **secret** by its key, the way the libraries decide it (transformers' ``TrainingArguments.to_dict``
replaces every ``*_token`` field with a placeholder; W&B, the Hub and most SDKs name theirs ``*api_key``,
``*password*``, ``*secret*``). :func:`is_secret_key` is the one rule, applied to every component of a dotted path
(``training_args.hub_token``, ``callbacks.0.api_key``, ``deepspeed_config.x.password``).

How a secret travels (``docs/architecture.md``, "Secrets"):

1. **At the command line** (:func:`redact_argv`, the first thing ``python -m sweeper`` and ``python -m
   sweeper.plan`` do, before Hydra parses anything): ``+training_args.hub_token=hf_abc`` becomes
   ``+training_args.hub_token=${oc.env:SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN}`` and the value is put in that
   environment variable of this process. Hydra, its output folder (``multirun.yaml``, ``.hydra/*.yaml``), its
   log lines, ``sweep.json``, the records, the report's replay commands and the W&B runs therefore only ever see the
   reference; the replay command says where the value must come from (the variable, set in the shell).
2. **In the composed config** (:func:`redact_tree`, from :func:`sweeper.config.spec.from_config`): a secret that
   came another way (a config file, the user's own ``${oc.env:HF_TOKEN}``) is resolved by Hydra; the spec keeps
   the same reference instead, and the value goes to the variable.
3. **To the ranks**: children inherit the environment (torchrun locally; ``sbatch`` exports the submitting
   environment by default, so the SLURM job's ranks have it too); nothing is written for them. The rank side puts
   the values back only where they are handed to a library (:func:`reveal`, in :mod:`sweeper.job.trainer_setup`).
4. **A last guard** (:func:`scrub`): the atomic JSON/text writers (records, rank files, ``sweep.json``, the
   report) replace every value still known from the environment with :data:`REDACTED`, should a library echo one in
   an error. The ranks' own logs are the libraries' output and are not rewritten; nothing sweeper passes them
   prints a secret (the integration test searches them).

A sweep over a secret (``hub_token=a,b``) is refused (:class:`SecretError`): a token is not a grid axis, and one
variable holds one value. Only strings (and, for a key that is certainly a secret, numbers) are treated as
values; booleans, nulls and interpolations (``${...}``) are left as they are.

No torch import; the Hydra parser is imported only when an argument could hold a secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Prefix of the environment variables that carry secrets to the ranks.
ENV_PREFIX = "SWEEPER_SECRET_"
#: What a secret value is replaced with where no reference can stand (free text: logs, library messages).
REDACTED = "<redacted>"

# Words that make a key certainly secret (any scalar value but a bool or null): transformers' rule (*_token, and
# the bare `token` of huggingface_hub), and the names SDKs give keys and passwords.
_CERTAIN = re.compile(r"(^|_)token$|api_?key|password|passwd|secret|credential|private_key")
# A key that merely mentions a token (hf_token_value, token_file): its string values are treated as secret too
# (over-redaction is harmless: the rank side puts them back). Counts and ids (pad_token_id, tokens_per_second,
# train_tokens) are numbers or booleans and are never touched.
_MENTIONS = re.compile(r"token(?!s)")
_REFERENCE = re.compile(r"^\$\{oc\.env:(" + ENV_PREFIX + r"[A-Z0-9_]+)\}$")
# Override keys whose values are trees of user text (passthrough dicts, the model's config, callbacks).
_TREE_KEYS = ("training_args", "fsdp_config", "deepspeed_config", "model.config", "callbacks", "plan")


class SecretError(ValueError):
    """A secret given in a way sweeper cannot carry safely (a sweep over secret values). The message names the
    key and never the value."""


def is_secret_key(name: str) -> bool:
    """Whether a key (one component, e.g. ``hub_token``) names a secret (case-insensitive): it ends in ``token`` or
    ``_token``, names an API key, a password, a secret, a credential or a private key, or mentions a token.
    ``pad_token_id``, ``include_tokens_per_second`` and ``train_tokens`` are not secret *values* there
    (:func:`is_secret_value` also needs a string, or a number for a certainly secret name)."""
    n = str(name).lower()
    return bool(_CERTAIN.search(n) or _MENTIONS.search(n))


def is_secret_value(path: str, value: Any) -> bool:
    """Whether ``value`` at the dotted ``path`` is a secret to hide: the last component is a secret name
    (:func:`is_secret_key`) and the value is a non-empty string that is not already a reference or an
    interpolation; for a certainly secret name (``*_token``, ``*api_key*``, ``*password*`` ...) a number too."""
    last = path.rsplit(".", 1)[-1].lower()
    if isinstance(value, bool) or value is None or not is_secret_key(last):
        return False
    if isinstance(value, str):
        return bool(value) and not value.startswith("${")
    return isinstance(value, (int, float)) and bool(_CERTAIN.search(last))


def env_name(path: str) -> str:
    """The environment variable that carries the secret at ``path``: ``training_args.hub_token`` ->
    ``SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN`` (``callbacks.0.api_key`` -> ``SWEEPER_SECRET_CALLBACKS_0_API_KEY``)."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]+", "_", path.upper().lstrip("+~")).strip("_")


def reference(path: str) -> str:
    """The text that stands for the secret at ``path`` everywhere sweeper writes it: the OmegaConf interpolation
    ``${oc.env:SWEEPER_SECRET_...}``, which is also a valid override value (a replay reads the variable)."""
    return "${oc.env:" + env_name(path) + "}"


#: Every secret value this process has put in its environment (a later value for the same key replaces the
#: variable, not what :func:`scrub` must still hide).
_SEEN: set[str] = set()


def _keep(path: str, value: Any) -> str:
    """Put ``value`` in this process's environment under :func:`env_name` and return its :func:`reference`."""
    os.environ[env_name(path)] = str(value)
    _SEEN.add(str(value))
    return reference(path)


def redact_tree(tree: Any, path: str) -> Any:
    """``tree`` (dicts, lists, scalars) with every secret value (:func:`is_secret_value`) replaced by its
    :func:`reference`; the values are kept in this process's environment. A new structure; ``tree`` is unchanged."""
    if isinstance(tree, Mapping):
        return {k: redact_tree(v, f"{path}.{k}" if path else str(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [redact_tree(v, f"{path}.{i}") for i, v in enumerate(tree)]
    return _keep(path, tree) if is_secret_value(path, tree) else tree


def reveal(tree: Any) -> Any:
    """The rank side: ``tree`` with every :func:`reference` replaced by its variable's value, where it is handed to
    a library (``TrainingArguments``, the model config, DeepSpeed, a callback's arguments).

    Raises:
        SecretError: a reference whose variable is not in the environment (names the variable: set it where the
            ranks run, e.g. ``export SWEEPER_SECRET_TRAINING_ARGS_HUB_TOKEN=...`` before a replay).
    """
    if isinstance(tree, Mapping):
        return {k: reveal(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [reveal(v) for v in tree]
    m = _REFERENCE.match(tree) if isinstance(tree, str) else None
    if m is None:
        return tree
    if m.group(1) not in os.environ:
        raise SecretError(f"the secret {m.group(1)} is not in the environment of the ranks: set it there")
    return os.environ[m.group(1)]


#: Values shorter than this are never scrubbed from text: replacing ``"0"`` or ``"abc"`` would corrupt a record's
#: numbers and words, and such a value is no credential worth the name (it still never reaches a file as a value:
#: the reference stands for it everywhere sweeper writes configuration).
MIN_SCRUB_CHARS = 8


def known_values() -> list[str]:
    """The secret values this process knows (its ``SWEEPER_SECRET_*`` variables and every value it redacted) of at
    least :data:`MIN_SCRUB_CHARS` characters, longest first."""
    env = {v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    return sorted({v for v in env | _SEEN if len(v) >= MIN_SCRUB_CHARS}, key=len, reverse=True)


def scrub(text: str, values: Iterable[str] | None = None) -> str:
    """``text`` with every known secret value (:func:`known_values`, or ``values``) replaced by :data:`REDACTED`.
    The identity when there is none (the common case costs one environment scan)."""
    for v in known_values() if values is None else values:
        if v in text:
            text = text.replace(v, REDACTED)
    return text


_ESCAPED_REFERENCE = re.compile(r"\$\\\{oc\.env\\:(" + ENV_PREFIX + r"[A-Z0-9_]+)\\\}")


def plain_references(override: str) -> str:
    """An override as Hydra's basic sweeper hands it to a job, with each reference written back as the user would
    type it: the sweeper escapes interpolation characters (``$\\{oc.env\\:SWEEPER_SECRET_X\\}``); both spellings
    reach the rank as the same reference (:func:`reveal`), this one reads as one."""
    return _ESCAPED_REFERENCE.sub(lambda m: "${oc.env:" + m.group(1) + "}", override)


_ANY_REFERENCE = re.compile(r"\$\{oc\.env:(" + ENV_PREFIX + r"[A-Z0-9_]+)\}")


def referenced_variables(text: str) -> list[str]:
    """The ``SWEEPER_SECRET_*`` variables that ``text`` (a command, an override) reads, in order, once each."""
    return list(dict.fromkeys(_ANY_REFERENCE.findall(plain_references(text))))


def missing_variables(argv: list[str]) -> list[str]:
    """The secret variables that ``argv`` reads and this environment does not have (a replay run without them)."""
    return [v for v in referenced_variables(" ".join(argv)) if v not in os.environ]


def task_overrides(hydra_node: Any) -> list[str]:
    """The job's overrides (``hydra.overrides.task`` of a config or of ``HydraConfig.get()``) as typed, unresolved:
    iterating the node would resolve a secret's reference into its value. References are in their plain spelling
    (:func:`plain_references`)."""
    from omegaconf import OmegaConf

    task = hydra_node.overrides.task
    items = OmegaConf.to_container(task, resolve=False) if OmegaConf.is_config(task) else task
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"hydra.overrides.task is not a list: {type(items).__name__}")
    return [plain_references(str(o)) for o in items]


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` without the ``SWEEPER_SECRET_*`` variables: for a child that needs none (the W&B writer)."""
    return {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX)}


def redact_argv(argv: list[str]) -> list[str]:
    """Command-line arguments with every secret value replaced by its :func:`reference` (the values put in this
    process's environment). Flags (``-m``, ``--cfg job``) and arguments Hydra cannot parse are left for Hydra to
    judge; an override holds a secret when its key, or a key inside its dict/list value, is a secret name.

    Raises:
        SecretError: a sweep over a secret value (``+training_args.hub_token=a,b``), naming the key.
    """
    out: list[str] = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg or not _may_hold_secret(arg):
            out.append(arg)
        else:
            out.append(_redact_override(arg))
    return out


def _may_hold_secret(arg: str) -> bool:
    """Cheap pre-check: a secret name appears in the key, or the key is a tree of user text."""
    key = arg.split("=", 1)[0].lstrip("+~")
    return any(is_secret_key(part) for part in re.split(r"[^A-Za-z0-9_]+", arg)) and (
        any(is_secret_key(p) for p in key.split(".")) or key.startswith(_TREE_KEYS)
    )


def _redact_override(arg: str) -> str:
    """One ``key=value`` override with its secret values replaced (see :func:`redact_argv`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Override, Sweep
    from hydra.errors import HydraException

    try:
        (ov,) = OverridesParser.create().parse_overrides([arg])
    except HydraException:
        return arg  # Hydra refuses it for the whole run, with its own message
    key = ov.key_or_group
    value = ov.value()
    if isinstance(value, Sweep) or ov.is_sweep_override():
        if any(_holds_secret(key, v) for v in getattr(value, "list", None) or []):
            raise SecretError(f"{key}: a secret cannot be a grid axis (give one value; it is not part of a point)")
        return arg
    if not _holds_secret(key, value):
        return arg
    redacted = redact_tree(value, key)
    return f"{ov.get_key_element()}={_render(redacted, Override)}"


def _holds_secret(path: str, value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_holds_secret(f"{path}.{k}", v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_secret(f"{path}.{i}", v) for i, v in enumerate(value))
    return is_secret_value(path, value)


def _render(value: Any, override_type: Any) -> str:
    """An override value in Hydra's syntax, references left raw (so they stay interpolations); every other
    element as Hydra itself writes it back (``Override._get_value_element_as_str``: its quoting rules)."""
    if isinstance(value, str) and _REFERENCE.match(value):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"  # as the command line spells it (Hydra reads either)
    if isinstance(value, Mapping):
        items = (f"{override_type._get_value_element_as_str(k)}:{_render(v, override_type)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_render(v, override_type) for v in value) + "]"
    return override_type._get_value_element_as_str(value)


def redact_command_line() -> None:
    """Apply :func:`redact_argv` to ``sys.argv`` in place, before Hydra reads it (the CLIs' first step). A sweep
    over a secret, or a reference (a replay command) whose variable is not set, is one line on stderr and exit 2
    (refused before anything runs)."""
    import sys

    try:
        sys.argv[1:] = redact_argv(sys.argv[1:])
    except SecretError as e:
        print(f"sweeper: invalid override ({e})", file=sys.stderr)
        sys.exit(2)
    missing = missing_variables(sys.argv[1:])
    if missing:
        names = ", ".join(missing)
        print(
            f"sweeper: the command reads the secret {names} from the environment, which lacks it: "
            f"export {missing[0]}=<the value> first (sweeper never writes a secret down)",
            file=sys.stderr,
        )
        sys.exit(2)
