"""``python -m sweeper [-m] key=value ...``: run one grid point, or a grid with ``-m`` (Hydra multirun).

Each point is validated, then run by :func:`sweeper.launch.run_point` in its own ranks; its record lands in the
sweep directory. When the multirun ends the report is built and its path printed as the last line.
A single point (no ``-m``) that is invalid exits with status 2 before any rank starts.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sweeper.config import register_configs
from sweeper.paths import conf_dir
from sweeper.sweepdir import read_sweep, register_resolver

register_configs()
register_resolver()


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra task function: one grid point. Returns the point's status."""
    from hydra.types import RunMode

    from sweeper.launch import run_point
    from sweeper.progress import announce, finished
    from sweeper.spec import from_config

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    sweep_dir = Path(hc.sweep.dir if multirun else hc.run.dir)
    overrides = list(hc.overrides.task)
    spec = from_config(cfg)  # a single invalid point was already refused by ReportCallback.on_run_start
    info = read_sweep(sweep_dir)
    index = hc.job.num if multirun else 0
    with announce(index, info.get("n_points"), overrides):
        rerun = frozenset(cfg.launcher.rerun_statuses)
        record = run_point(spec, overrides, sweep_dir, info.get("sweep_id", sweep_dir.name), rerun)
    finished(index, info.get("n_points"), overrides, record)
    return record.status


if __name__ == "__main__":
    main()
