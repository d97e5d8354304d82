"""``python -m sweeper.plan model=<name> cluster=<name> seq_len=<tokens> [key=value ...] [-m key=a,b ...]``:
capacity planning before anything runs.

A Hydra app on the same config tree and typed schema as ``python -m sweeper`` (primary config ``conf/plan.yaml``):
the same keys, groups and override syntax, so a plan and a sweep name the same model, cluster and point. For every
point of the planning grid (:mod:`sweeper.plan.points`: what ``-m`` sweeps, crossed with the default engines x gc on
the keys not named) it prints and writes the predicted peak memory per rank with its breakdown, whether it fits,
the largest per-device batch that fits, tokens/s per device, MFU, and days and GPU-hours for ``train_tokens``.
Files: ``plan.csv``, ``plan.md``, ``plan.png`` in ``plans/<date>_<time>_<id>/`` (Hydra's run or sweep dir).

Nothing is launched and torch is never imported. Exit status: 0 once the plan is written, whatever it says (a point
that does not fit is an answer); 2 when ``seq_len`` is missing; Hydra's 1 for a value the schema refuses.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from sweeper.config.schema import register_configs
from sweeper.paths import conf_dir
from sweeper.redact import redact_command_line
from sweeper.results.opening import register_resolver

register_configs()
register_resolver()
ConfigStore.instance().store(
    group="hydra/sweeper",
    name="sweeper_plan",
    node={"_target_": "hydra_plugins.sweeper_plan.SweeperPlanSweeper", "max_batch_size": None, "params": None},
)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="plan")
def main(cfg: DictConfig) -> None:
    """Hydra task function of a single run (without ``-m``): plan ``cfg`` crossed with the default grid. A
    multirun never calls it (``hydra_plugins.sweeper_plan`` plans the whole sweep at once)."""
    from sweeper.plan.app import plan_run
    from sweeper.point.context import SweepContext

    ctx = SweepContext.of(cfg)
    plan_run(cfg, list(ctx.overrides), ctx.sweep.path)


def cli() -> None:
    """Entry point of ``python -m sweeper.plan``; secrets on the command line become references first
    (:func:`sweeper.redact.redact_command_line`)."""
    redact_command_line()
    from sweeper.config.model_files import refuse_unknown_models

    sys.argv[1:] = refuse_unknown_models(sys.argv[1:], "sweeper.plan")  # model=<config.json | folder | hub id>
    if not any(a.split("=", 1)[0] in ("-h", "--help", "--hydra-help", "--cfg", "-c", "--info", "-i") for a in sys.argv):
        from sweeper.config.keys import refuse_unknown_keys

        refuse_unknown_keys(sys.argv[1:], "python -m sweeper.plan")
    main()


if __name__ == "__main__":
    cli()
