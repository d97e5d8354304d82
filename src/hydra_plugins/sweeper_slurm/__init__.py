"""Hydra discovers plugins only inside the ``hydra_plugins`` namespace package; this registers sweeper's two:

- :class:`SweeperSlurmLauncher` (``hydra/launcher=sweeper_slurm``, selected by ``launcher=slurm``),
- :class:`SweeperBasicSweeper` (``hydra/sweeper=sweeper_basic``, the default): Hydra's basic sweeper, with the
  batch validated by :func:`sweeper.config.compose.compose_containers` (one composition per group choice, not
  per point).

Their config nodes are stored when Hydra imports this module (plugin discovery, before it composes any config), so
any Hydra app can select them; Hydra's launcher and sweeper test suites run against both
(tests/integration/test_hydra_suites.py).
"""

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from sweeper.config.schema import register_plugin_configs
from sweeper.launchers.slurm.submit import SlurmLauncher

register_plugin_configs()


class SweeperSlurmLauncher(SlurmLauncher):
    """``launcher=slurm``: see :mod:`sweeper.launchers.slurm.submit`."""


class SweeperBasicSweeper(BasicSweeper):
    """Hydra's basic sweeper; every point of a batch is still composed (and refused on a bad value) before any job
    starts, but fast (see :mod:`sweeper.config.compose`)."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from sweeper.config.compose import compose_containers

        if self.hydra_context is None or self.config is None:  # set by Hydra's setup() before any sweep
            raise RuntimeError("SweeperBasicSweeper.validate_batch_is_legal called before setup()")
        compose_containers(self.hydra_context.config_loader, self.config, batch)
