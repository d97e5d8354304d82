"""Hydra search-path plugin: makes the named grids in ``sweeps/`` selectable as ``+sweeps=<name>``.

Only acts for sweeper's own app (when sweeper's ``conf/`` is the primary config path).
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class SweeperSearchPathPlugin(SearchPathPlugin):
    """Appends the folder that holds ``sweeps/`` to the search path of ``python -m sweeper``."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from sweeper.paths import conf_dir, data_root

        ours = f"file://{conf_dir()}"
        if any(e.path == ours for e in search_path.get_path()):
            search_path.append(provider="sweeper", path=f"file://{data_root()}")
