"""Hydra discovers plugins only inside the ``hydra_plugins`` namespace package; this registers sweeper's two:

- :class:`SweeperSlurmLauncher` (``hydra/launcher=sweeper_slurm``, selected by ``launcher=slurm``),
- :class:`SweeperBasicSweeper` (``hydra/sweeper=sweeper_basic``, the default): Hydra's basic sweeper, with the
  batch validated by :func:`sweeper.config.compose.compose_containers` (one composition per group choice, not
  per point); with ``search=frontier`` it hands the same grid to the frontier search (:mod:`sweeper.search.driver`),
  which runs it through the same launcher: on SLURM job by job as each ends
  (:mod:`sweeper.launchers.slurm.search_jobs`), with Hydra's basic launcher point by point, with any other
  launcher batch by batch (docs/search.md).

Their config nodes are stored when Hydra imports this module (plugin discovery, before it composes any config), so
any Hydra app can select them; Hydra's launcher and sweeper test suites run against both
(tests/integration/test_hydra_suites.py).
"""

from collections.abc import Sequence
from typing import Any

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

    def sweep(self, arguments: list[str]) -> Any:
        """``search=grid``: Hydra's basic sweep. ``search=frontier``: the same grid expanded (``hydra.sweeper.params``
        included), then :func:`sweeper.search.driver.run_search` runs it through this sweeper's launcher: on SLURM
        asynchronously (:class:`sweeper.launchers.slurm.search_jobs.SlurmJobs`), else round by round.

        Raises:
            ValueError: a ``search=frontier`` setting the search cannot run (:func:`sweeper.search.driver.grid_points`).
        """
        if self.config is None or self.hydra_context is None or self.launcher is None:
            raise RuntimeError("SweeperBasicSweeper.sweep called before setup()")
        if str(self.config.get("search", {}).get("name", "grid")) != "frontier":
            return super().sweep(arguments)
        from hydra._internal.core_plugins.basic_launcher import BasicLauncher
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import OmegaConf

        from sweeper.launchers.slurm.search_jobs import SlurmJobs
        from sweeper.point.context import SweepContext
        from sweeper.search.driver import grid_points, run_search
        from sweeper.search.jobs import Launched

        params = [*self._parse_config(), *arguments]
        parsed = OverridesParser.create(config_loader=self.hydra_context.config_loader).parse_overrides(params)
        jobs = [list(p) for batch in self.split_arguments(parsed, None) for p in batch]
        points = grid_points(self.hydra_context.config_loader, self.config, jobs)
        sweep_dir = SweepContext.of(self.config).sweep.path
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        # SLURM: jobs submitted without waiting, the next decided as soon as any ends; Hydra's basic launcher (local)
        # runs one job after the other, so the search decides after each; any other launcher: rounds
        launcher = self.launcher
        if isinstance(launcher, SlurmLauncher):
            runner: Any = SlurmJobs(launcher)
        else:
            runner = Launched(launcher.launch, concurrent=1 if isinstance(launcher, BasicLauncher) else None)
        return run_search(points, sweep_dir, runner)
