"""sweeper: which distributed-training configuration is fastest and still fits in memory.

The packages follow the stages of a sweep (``docs/architecture.md``):

- :mod:`sweeper.config`: the config schema, Hydra composition, the point spec;
- :mod:`sweeper.point`: one point's lifecycle, its identity and the gate;
- :mod:`sweeper.launchers`: where ranks run (local torchrun; SLURM submit, in-job, accounting);
- :mod:`sweeper.job`: the rank side (the only package that imports torch);
- :mod:`sweeper.capacity`: the torch-free memory/time model (``python -m sweeper.plan`` is its app);
- :mod:`sweeper.results`: the record, the typed row, collection;
- :mod:`sweeper.report`: the frontier and the report;
- :mod:`sweeper.failures`: failure classification.
"""
