"""Compose many grid points fast: Hydra composes once per combination of config-group choices, then each point's
plain ``key=value`` overrides are applied to a copy.

Hydra's own per-point composition (``load_sweep_config``) walks the defaults list and reads every config file again:
about 0.3 s a point on these machines, done twice per point (once to validate the batch, once to launch), so a
200-point grid spent about 90 s before its single ``sbatch``. Group choices (``model=gpt2``, ``+sweeps=zero``) still
go through Hydra; the other overrides are applied with Hydra's own override code against the typed schema, so a
wrong value (``precision=fp8``) still fails for every point before any job starts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict


def compose_points(
    config_loader: Any, master_config: DictConfig, job_overrides: Sequence[Sequence[str]]
) -> list[DictConfig]:
    """The composed config of each point, in order, without Hydra's own ``hydra`` node.

    Args:
        config_loader: Hydra's ``ConfigLoaderImpl`` (``hydra_context.config_loader``).
        master_config: the multirun's config.
        job_overrides: one list of override strings per point (as the sweeper hands them to the launcher).

    Raises:
        hydra.errors.ConfigCompositionException / omegaconf ValidationError: an override that does not compose, or a
            ``per_device_batch_size`` or ``timed_steps`` that is neither an int nor ``auto``
            (:func:`sweeper.config.schema.batch_size_error`, :func:`sweeper.config.schema.timed_steps_error`).
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException

    from sweeper.config.schema import batch_size_error, is_sweeper_config, timed_steps_error

    key = (id(master_config), tuple(tuple(o) for o in job_overrides))
    cached = _LAST.get(key)
    # the sweeper validated this batch; the launcher asks for the same configs again. The config is kept with its
    # entry: an id is unique only while its object lives (a later multirun in the same process, Hydra's test suites)
    if cached is not None and cached[0] is master_config:
        return cached[1]
    parser = OverridesParser.create()
    repo = config_loader.repository
    base: dict[tuple[str, ...], DictConfig] = {}
    out = []
    for overrides in job_overrides:
        parsed = parser.parse_overrides(list(overrides))
        groups = tuple(str(o.input_line) for o in parsed if o.package is not None or repo.group_exists(o.key_or_group))
        keys = [o for o in parsed if o.input_line not in groups]
        if groups not in base:
            full = config_loader.load_sweep_config(master_config, list(groups))
            # the job's own keys only: Hydra's node is most of the config and no task override targets it. Deleted
            # from the typed config (not masked_copy, which drops the schema: then precision=fp8 would compose)
            with open_dict(full):
                del full["hydra"]
            base[groups] = full
        cfg = copy.deepcopy(base[groups])
        ConfigLoaderImpl._apply_overrides_to_config(keys, cfg)
        bad = is_sweeper_config(cfg) and (
            batch_size_error(cfg.get("per_device_batch_size")) or timed_steps_error(cfg.get("timed_steps"))
        )
        if bad:  # the schema types these keys int | str (for "auto"); any other string is refused here
            raise ConfigCompositionException(f"{bad} (overrides: {' '.join(overrides)})")
        out.append(cfg)
    _LAST.clear()
    _LAST[key] = (master_config, out)
    return out


_LAST: dict[tuple, tuple[DictConfig, list[DictConfig]]] = {}


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
