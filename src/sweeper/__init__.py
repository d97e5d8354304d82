"""sweeper: which distributed-training configuration is fastest and still fits in memory.

The packages follow the stages of a sweep (``docs/architecture.md``):

- :mod:`sweeper.config`: the config schema, Hydra composition, the point spec;
- :mod:`sweeper.point`: one point's lifecycle, its identity and the gate;
- :mod:`sweeper.launchers`: where ranks run (local torchrun; SLURM submit, in-job, accounting);
- :mod:`sweeper.job`: the rank side (the only package that imports torch);
- :mod:`sweeper.capacity`: the torch-free memory/time model (``python -m sweeper.plan`` is its app);
- :mod:`sweeper.results`: the record, the typed row, collection;
- :mod:`sweeper.report`: the frontier and the report;
- :mod:`sweeper.failures`: failure classification;
- :mod:`sweeper.search`: ``search=frontier``, the frontier without running the whole grid;
- :mod:`sweeper.tracking`: the W&B runs; :mod:`sweeper.wandb_report`: the W&B comparison report;
- :mod:`sweeper.plan`: the capacity planner, ``python -m sweeper.plan``.

This package is the container of the layers contract (``pyproject.toml``): it has no floor of its own; every package
and top-level module in it has one, top to bottom ``__main__ | plan | wandb_report | status``, ``hydra_callbacks``,
``report``, ``launchers | tracking | search``, ``job``, ``point``, ``capacity``, ``results``, ``config | failures``,
``units | paths | envinfo | redact``.
"""
