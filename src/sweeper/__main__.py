"""``python -m sweeper [-m] key=value ...``: run one grid point, or a grid with ``-m`` (Hydra multirun).

Each point goes through :mod:`sweeper.point.lifecycle` (identity, gate, ranks, record); its record lands in the
sweep directory. While a point runs, :func:`sweeper.launchers.progress.announce` shows its window and step (a live
line on a terminal, plain lines in a log) and the sweep's ETA; its position and the total are Hydra's ``job.num``
and ``n_points`` of ``sweep.json``. When the run ends the report is built and its path printed as the last line.

Exit status (``docs/failures.md``):

- a single point: 0 when it is ``ok``; 1 for any other final status (oom, error, timeout, host_oom, ...);
  2 when it is refused before launch (invalid or unsupported: no directory is made, no rank starts);
- a grid (``-m``): 0 when every point has a record and the report is written, whatever the points' statuses;
  non-zero only when the grid itself cannot run (a misspelt value refused by Hydra for the whole grid).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from sweeper.grid.schema import register_configs
from sweeper.paths import conf_dir
from sweeper.results.sweepdir import read_sweep, register_resolver

register_configs()
register_resolver()

#: The status of the last single point this process ran (its exit code is derived from it).
_single_status: list[str] = []


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra task function: one grid point. Returns the point's status."""
    from hydra.types import RunMode

    from sweeper.grid.spec import from_config
    from sweeper.launchers.local import run_point
    from sweeper.launchers.progress import announce, finished
    from sweeper.point.lifecycle import internal_error

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    sweep_dir = Path(hc.sweep.dir if multirun else hc.run.dir)
    overrides = list(hc.overrides.task)
    spec = from_config(cfg)  # a single refused point was already stopped by ReportCallback.on_run_start
    info = read_sweep(sweep_dir)
    index = hc.job.num if multirun else 0
    sweep_id = info.get("sweep_id", sweep_dir.name)
    cluster = None
    try:
        with announce(index, info.get("n_points"), overrides):
            rerun = frozenset(cfg.launcher.rerun_statuses)
            cluster = OmegaConf.to_container(cfg.cluster, resolve=True)
            record = run_point(spec, overrides, sweep_dir, sweep_id, rerun, cluster=cluster)
    except Exception as e:  # noqa: BLE001 - a point never ends the grid, not even through a bug of sweeper's own
        record = internal_error(spec, overrides, sweep_dir, sweep_id, e, cluster=cluster)
    finished(index, info.get("n_points"), overrides, record)
    if not multirun:
        _single_status.append(record.status)
    return record.status


def cli() -> None:
    """Entry point of ``python -m sweeper`` and the ``sweeper`` script: runs :func:`main`, then exits with the
    status described in the module doc."""
    main()
    if _single_status and _single_status[-1] != "ok":
        sys.exit(1)


if __name__ == "__main__":
    cli()
