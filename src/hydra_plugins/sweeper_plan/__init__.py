"""``python -m sweeper.plan -m key=a,b ...``: a multirun of the plan app is one table, not one job per point.

:class:`SweeperPlanSweeper` (``hydra/sweeper=sweeper_plan``, selected by ``conf/plan.yaml``) expands the sweep as
Hydra's basic sweeper does (every combination of the swept values, ``hydra.sweeper.params`` included), composes
every point fast (:func:`sweeper.config.compose.compose_points`, against the typed schema, so ``precision=fp8`` is
still refused), then hands all of them to :func:`sweeper.plan.app.plan_multirun`, which predicts and writes the plan
into ``hydra.sweep.dir``. Nothing is launched: the task function never runs.

Hydra discovers plugins only inside the ``hydra_plugins`` namespace package and imports every module in it at
start-up, so this module imports nothing heavy at import time.
"""

from __future__ import annotations

from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class SweeperPlanSweeper(BasicSweeper):
    """Hydra's basic sweeper's expansion, with the plan computed in-process instead of jobs launched."""

    def sweep(self, arguments: list[str]) -> Any:
        """Plan every point of the sweep ``arguments`` (the command line's task overrides).

        Returns:
            The plan's rows (:class:`pandas.DataFrame`), for callers that run Hydra in-process.

        Raises:
            hydra.errors.ConfigCompositionException: an override that does not compose (a misspelt value).
        """
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from sweeper.plan.app import plan_multirun

        assert self.config is not None and self.hydra_context is not None
        params = [*self._parse_config(), *arguments]
        overrides = OverridesParser.create(config_loader=self.hydra_context.config_loader).parse_overrides(params)
        points = [p for batch in self.split_arguments(overrides, None) for p in batch]
        named = {o.get_key_element().lstrip("+~") for o in overrides}
        return plan_multirun(self.hydra_context.config_loader, self.config, points, named)
