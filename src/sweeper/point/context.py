"""One sweep as Hydra composed it (:class:`SweepContext`): built once per entry point from the composed config and
Hydra's own node, so that every entry point (the sweep app's task function and callbacks, the SLURM launcher, the
planner) finds the sweep's directory, its typed sections and its opening checks in one place.

A single point is a sweep of one: its directory is ``hydra.run.dir``; a multirun's is ``hydra.sweep.dir``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.config.compose import plain_node
from sweeper.config.schema import LauncherConfig, WandbConfig
from sweeper.config.sections import ClusterConfig, from_mapping
from sweeper.redact import task_overrides
from sweeper.results.atomic import unusable_folder
from sweeper.results.sweepdir import SweepDir


@dataclass(frozen=True)
class SweepContext:
    """The sweep one Hydra run belongs to.

    Attributes:
        sweep: the sweep directory (not resolved: as Hydra names it; :meth:`SweepDir.resolved` for the absolute one).
        multirun: a grid (``-m``) rather than a single point.
        overrides: the task overrides of this run, secrets as their ``${oc.env:...}`` references.
        cluster: the typed ``cluster`` section (``cluster=<name>``), the one every target is built from.
        launcher: the typed ``launcher`` section.
        wandb: the typed ``wandb`` section, or None for a config without one (another Hydra app).
        search_path: the config folders the command line added (``hydra.searchpath=[file://...]``,
            ``--config-dir``), as absolute ``file://`` entries: what a replay of one of its points needs besides its
            overrides (a model file of the user's own config folder).
    """

    sweep: SweepDir
    multirun: bool
    overrides: tuple[str, ...]
    cluster: ClusterConfig
    launcher: LauncherConfig
    wandb: WandbConfig | None
    search_path: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: Any, hydra: Any | None = None) -> SweepContext:
        """The context of ``config`` (a composed config), with Hydra's node ``hydra`` (default: ``config.hydra``
        when the config holds it, as in a callback, else the running job's ``HydraConfig``, as in a task function).

        Raises:
            TypeError: a ``cluster`` or ``launcher`` key the schema does not have.
        """
        if hydra is None:
            if "hydra" in config:
                hydra = config.hydra
            else:
                from hydra.core.hydra_config import HydraConfig

                hydra = HydraConfig.get()
        from hydra.types import RunMode

        multirun = hydra.mode == RunMode.MULTIRUN
        folder = Path(str(hydra.sweep.dir if multirun else hydra.run.dir))
        wandb = None
        if "wandb" in config:
            wandb = from_mapping(WandbConfig, plain_node(config.wandb, enum_to_str=True))
        return cls(
            sweep=SweepDir(folder),
            multirun=multirun,
            overrides=tuple(task_overrides(hydra)),
            cluster=from_mapping(ClusterConfig, plain_node(config.cluster) if "cluster" in config else None),
            launcher=from_mapping(LauncherConfig, plain_node(config.launcher) if "launcher" in config else None),
            wandb=wandb,
            search_path=user_search_path(hydra),
        )

    @property
    def dir_key(self) -> str:
        """The Hydra key that names :attr:`sweep`: ``hydra.sweep.dir`` (a grid) or ``hydra.run.dir``."""
        return "hydra.sweep.dir" if self.multirun else "hydra.run.dir"

    def wandb_node(self) -> dict[str, Any] | None:
        """The ``wandb`` section as plain data (``mode`` its string), for ``sweep.json``; None without one."""
        if self.wandb is None:
            return None
        return {"mode": str(self.wandb.mode), "project": self.wandb.project, "entity": self.wandb.entity}

    def refuse_unusable_folder(self) -> None:
        """Exit 2 with one line naming :attr:`dir_key`, the folder, what is in the way and the fix, when the folder
        cannot be the sweep's (:func:`sweeper.results.atomic.unusable_folder`): before Hydra makes it, so there is
        no traceback and no rank starts (docs/cases.md#u12)."""
        refuse_unusable_folder(self.sweep.path, self.dir_key)

    def open(self, n_points: int | None) -> dict[str, Any]:
        """Create or resume the sweep's ``sweep.json`` (:func:`sweeper.results.opening.open_sweep`) with this run's
        overrides and W&B settings; ``n_points``: the grid's size when known.

        Raises:
            OSError: the folder or ``sweep.json`` cannot be written (a full disk).
        """
        from sweeper.results.opening import open_sweep

        return open_sweep(
            self.sweep.path,
            "multirun" if self.multirun else "run",
            n_points,
            list(self.overrides),
            self.wandb_node(),
            list(self.search_path),
        )


#: ``hydra.runtime.config_sources`` providers of the folders a command line adds (Hydra 1.3's wording).
_COMMAND_LINE_SOURCES = ("command-line", "hydra.searchpath in command-line")


def user_search_path(hydra: Any) -> tuple[str, ...]:
    """The config folders the command line added to Hydra's search path (``--config-dir``, ``hydra.searchpath``), as
    absolute ``file://`` entries, in Hydra's order; ``()`` when there are none or Hydra's node does not say."""
    try:
        sources = hydra.runtime.config_sources or []
    except Exception:  # noqa: BLE001 - a node without runtime (a hand-made config)
        return ()
    found = []
    for source in sources:
        if source.get("provider") in _COMMAND_LINE_SOURCES and source.get("schema") == "file":
            found.append(f"file://{Path(str(source.get('path'))).resolve()}")
    return tuple(found)


def refuse_unusable_folder(path: Path, key: str) -> None:
    """Exit 2 with one line naming ``key``, ``path``, what is in the way and the fix, when ``path`` cannot be an output
    folder (:func:`sweeper.results.atomic.unusable_folder`): before Hydra makes it (the sweep's folder, a plan's)."""
    why = unusable_folder(path)
    if why:
        print(
            f"sweeper: {key}={path} cannot be used: {why}; give a folder that can be created and written "
            f"({key}=<folder>), or leave {key} out for the default",
            file=sys.stderr,
        )
        sys.exit(2)
