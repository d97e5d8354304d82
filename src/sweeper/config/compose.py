"""Compose many grid points fast: Hydra composes once per combination of config-group choices, then each point's
plain ``key=value`` overrides are applied to a copy.

Hydra's own per-point composition (``load_sweep_config``) walks the defaults list and reads every config file again:
about 0.3 s a point on these machines, done twice per point (once to validate the batch, once to launch), so a
200-point grid spent about 90 s before its single ``sbatch``. Group choices (``model=gpt2``, ``+sweeps=zero``) still
go through Hydra; the other overrides are applied with Hydra's own override code against the typed schema, so a
wrong value (``precision=fp8``) still fails for every point before any job starts.

:func:`compose_containers` (the SLURM launcher's and the sweeper's validation) goes one step further: a typed copy
of the config per point cost ~7 ms (1,000 points: 7 s), so where a point only changes existing leaves of a group
config without interpolations (``seed=3 launcher.wait=false``), each distinct override is applied once, through
Hydra's own code, to one typed scratch copy per group choice (and undone there), and the point is the group's plain
container with the validated values set. Anything else (``+key=``, ``~key``, a dict or list value, an
interpolation) is composed the typed way, as :func:`compose_points` does. Overrides that every point of the batch
has (``+cluster.sbatch_extra.hold=true``, a passthrough dict given once on the command line) are applied once, to
the group composition, not per point, unless a point's own override touches the same key (then that point is composed
from the group composition with all its overrides in order).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from enum import Enum
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from sweeper.config.schema import is_sweeper_config

#: A leaf value the fast path cannot set (the point is composed the typed way).
_TYPED = object()
#: A base composition: the group choices (override strings, as typed) and the batch's shared overrides applied to it.
_Base = tuple[tuple[str, ...], tuple[str, ...]]


def _overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    """Some key of ``a`` is a key of ``b``, or a parent or child of one (``x`` and ``x.y``)."""
    return any(k == j or k.startswith(j + ".") or j.startswith(k + ".") for k in a for j in b)


def _common(job_overrides: Sequence[Sequence[str]]) -> frozenset[str]:
    """The override strings every point of a batch of more than one point has."""
    if len(job_overrides) < 2:
        return frozenset()
    return frozenset(set(job_overrides[0]).intersection(*map(set, job_overrides[1:])))


class _Grid:
    """One batch's compositions: the parsed overrides (once per distinct string), one Hydra composition per
    combination of group choices, and (for :func:`compose_containers`) its plain container and a typed scratch."""

    def __init__(self, config_loader: Any, master_config: DictConfig) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader, self.master = config_loader, master_config
        self.parser = OverridesParser.create()
        self.parsed: dict[str, Any] = {}
        self.bases: dict[_Base, DictConfig] = {}
        self.plains: dict[_Base, dict[str, Any] | None] = {}
        self.scratches: dict[_Base, DictConfig] = {}
        self.leaves: dict[tuple[_Base, str], Any] = {}

    def split(self, overrides: Sequence[str], common: frozenset[str] = frozenset()) -> tuple[_Base, list[Any]]:
        """The point's base (its group choices as typed, and those of ``common``, the overrides every point of the
        batch has, that apply to it once) and its other overrides (parsed: Hydra's ``Override``)."""
        for o in overrides:
            if o not in self.parsed:
                (self.parsed[o],) = self.parser.parse_overrides([o])
        parsed = [self.parsed[o] for o in overrides]
        repo = self.loader.repository
        groups = tuple(str(o.input_line) for o in parsed if o.package is not None or repo.group_exists(o.key_or_group))
        rest = [o for o in parsed if o.input_line not in groups]
        shared = [o for o in rest if o.input_line in common]
        own = [o for o in rest if o.input_line not in common]
        if shared and not _overlap([str(o.key_or_group) for o in shared], [str(o.key_or_group) for o in own]):
            return (groups, tuple(str(o.input_line) for o in shared)), own
        return (groups, ()), rest

    def base(self, key: _Base) -> DictConfig:
        """The typed composition of ``key``'s group choices, its shared overrides applied (Hydra's code)."""
        if key not in self.bases:
            groups, shared = key
            if shared:
                from hydra._internal.config_loader_impl import ConfigLoaderImpl

                full = copy.deepcopy(self.base((groups, ())))
                ConfigLoaderImpl._apply_overrides_to_config([self.parsed[o] for o in shared], full)
            else:
                full = self.loader.load_sweep_config(self.master, list(groups))
                # the job's own keys only: Hydra's node is most of the config and no task override targets it.
                # Deleted from the typed config (not masked_copy, which drops the schema: then precision=fp8 would
                # compose)
                with open_dict(full):
                    del full["hydra"]
            self.bases[key] = full
        return self.bases[key]

    def typed(self, key: _Base, keys: list[Any], overrides: Sequence[str]) -> DictConfig:
        """The point's typed config: a copy of its base composition, its other overrides applied by Hydra."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        cfg = copy.deepcopy(self.base(key))
        ConfigLoaderImpl._apply_overrides_to_config(keys, cfg)
        _refuse_bad_strings(cfg, overrides, is_sweeper_config(cfg))
        return cfg

    def container(self, key: _Base, keys: list[Any], overrides: Sequence[str]) -> dict[str, Any]:
        """The point's config as ``OmegaConf.to_container(typed, resolve=True, enum_to_str=True)`` gives it."""
        plain = self._plain(key)
        values = [self._leaf(key, o) for o in keys] if plain is not None else [_TYPED]
        if plain is None or any(v is _TYPED for v in values):
            typed = OmegaConf.to_container(self.typed(key, keys, overrides), resolve=True, enum_to_str=True)
            assert isinstance(typed, dict)
            return {str(k): v for k, v in typed.items()}
        out = copy.deepcopy(plain)
        for o, value in zip(keys, values, strict=True):
            *parents, last = str(o.key_or_group).split(".")
            node = out
            for part in parents:
                node = node[part]
            node[last] = value
        _refuse_bad_strings(out, overrides, is_sweeper_config(self.base(key)))
        return out

    def _plain(self, key: _Base) -> dict[str, Any] | None:
        """The base composition as a plain resolved container, or None when it holds an interpolation (its value
        could depend on a point's override) or a missing value."""
        if key not in self.plains:
            base = self.base(key)
            raw = OmegaConf.to_container(base, resolve=False)
            plain = None if _has_special(raw) else OmegaConf.to_container(base, resolve=True, enum_to_str=True)
            self.plains[key] = {str(k): v for k, v in plain.items()} if isinstance(plain, dict) else None
        return self.plains[key]

    def _leaf(self, key: _Base, o: Any) -> Any:
        """The validated plain value ``o`` (a plain ``key=value`` on an existing leaf) sets, once per group choice
        and override: applied by Hydra to the group's typed scratch copy, read, and undone there. :data:`_TYPED`
        for any other override, or one that fails (the typed composition then raises Hydra's own error)."""
        memo = (key, str(o.input_line))
        if memo not in self.leaves:
            self.leaves[memo] = self._validated(key, o)
        return self.leaves[memo]

    def _validated(self, key: _Base, o: Any) -> Any:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        if o.package is not None or o.is_add() or o.is_delete() or o.is_force_add():
            return _TYPED
        value = o.value()
        if not isinstance(value, (bool, int, float, str, type(None))) or _has_special(value):
            return _TYPED
        name = str(o.key_or_group)
        plain = self._plain(key)
        *parents, last = name.split(".")
        for part in parents:
            plain = plain.get(part) if isinstance(plain, dict) else None
        if not isinstance(plain, dict) or last not in plain or isinstance(plain[last], (dict, list)):
            return _TYPED  # not an existing leaf of a mapping
        scratch = self.scratches.pop(key, None)  # given back below only if it is left as it was
        if scratch is None:
            scratch = copy.deepcopy(self.base(key))
        old = OmegaConf.select(scratch, name)
        try:
            ConfigLoaderImpl._apply_overrides_to_config([o], scratch)
            new = OmegaConf.select(scratch, name)
            OmegaConf.update(scratch, name, old, merge=True)
        except Exception:  # noqa: BLE001 - the typed composition of the point raises Hydra's own error
            return _TYPED
        if OmegaConf.is_config(new) or OmegaConf.select(scratch, name) != old:
            return _TYPED
        self.scratches[key] = scratch
        return new.name if isinstance(new, Enum) else new


def _has_special(data: Any) -> bool:
    """``data`` (plain) holds an interpolation or an escaped one (``${...}``) or a missing value (``???``)."""
    if isinstance(data, dict):
        return any(_has_special(v) for v in data.values())
    if isinstance(data, list):
        return any(_has_special(v) for v in data)
    return isinstance(data, str) and ("${" in data or data == "???")


def _refuse_bad_strings(cfg: Any, overrides: Sequence[str], sweepers: bool) -> None:
    """Refuse a ``per_device_batch_size`` / ``timed_steps`` string other than ``auto`` in a config of sweeper's
    schema (``sweepers``; another Hydra app's config, as in Hydra's plugin test suites, has no such keys)."""
    from hydra.errors import ConfigCompositionException

    from sweeper.config.schema import batch_size_error, timed_steps_error

    if not sweepers:
        return
    bad = batch_size_error(cfg.get("per_device_batch_size")) or timed_steps_error(cfg.get("timed_steps"))
    if bad:  # the schema types these keys int | str (for "auto"); any other string is refused here
        raise ConfigCompositionException(f"{bad} (overrides: {' '.join(overrides)})")


def compose_points(
    config_loader: Any, master_config: DictConfig, job_overrides: Sequence[Sequence[str]]
) -> list[DictConfig]:
    """The composed config of each point, in order, without Hydra's own ``hydra`` node (typed: the planner sets
    further values through the schema).

    Args:
        config_loader: Hydra's ``ConfigLoaderImpl`` (``hydra_context.config_loader``).
        master_config: the multirun's config.
        job_overrides: one list of override strings per point (as the sweeper hands them to the launcher).

    Raises:
        hydra.errors.ConfigCompositionException / omegaconf ValidationError: an override that does not compose, or a
            ``per_device_batch_size`` or ``timed_steps`` that is neither an int nor ``auto``
            (:func:`sweeper.config.schema.batch_size_error`, :func:`sweeper.config.schema.timed_steps_error`).
    """
    grid = _Grid(config_loader, master_config)
    return [grid.typed(*grid.split(overrides), overrides) for overrides in job_overrides]


def compose_containers(
    config_loader: Any, master_config: DictConfig, job_overrides: Sequence[Sequence[str]]
) -> list[dict[str, Any]]:
    """Each point's composed config as the plain container :func:`sweeper.config.spec.from_config` reads
    (``OmegaConf.to_container(..., resolve=True, enum_to_str=True)`` of :func:`compose_points`' config, without the
    typed copy where it is not needed: see the module doc). The last batch is kept: the sweeper validates a batch,
    then the launcher asks for the same configs again.

    Raises:
        the same errors as :func:`compose_points`, for the same overrides.
    """
    key = (id(master_config), tuple(tuple(o) for o in job_overrides))
    cached = _LAST.get(key)
    # the config is kept with its entry: an id is unique only while its object lives (a later multirun in the same
    # process, Hydra's test suites)
    if cached is not None and cached[0] is master_config:
        return cached[1]
    grid = _Grid(config_loader, master_config)
    common = _common(job_overrides)
    out = [grid.container(*grid.split(overrides, common), overrides) for overrides in job_overrides]
    _LAST.clear()
    _LAST[key] = (master_config, out)
    return out


_LAST: dict[tuple, tuple[DictConfig, list[dict[str, Any]]]] = {}


def plain_node(node: Any, *, resolve: bool = True, enum_to_str: bool = False) -> dict[str, Any]:
    """A mapping node of a composed config (``cluster``, ``launcher``, ``wandb``, ``hydra.sweeper.params``) as a
    plain dict: the one way the sweep app, the SLURM launcher and the planner read a section.

    Raises:
        TypeError: the node is not a mapping (a list, a string, ``cluster=null``).
    """
    data = OmegaConf.to_container(node, resolve=resolve, enum_to_str=enum_to_str) if OmegaConf.is_config(node) else node
    if not isinstance(data, dict):
        raise TypeError(f"not a mapping node: {type(data).__name__} ({node!r})")
    return {str(k): v for k, v in data.items()}
