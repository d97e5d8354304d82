"""The rank side: what runs inside every rank (:mod:`.harness`, the entry point; :mod:`.rank`, the life every rank
shares): the Trainer's set-up, the label checks, the step and memory windows, the batch search's trials, the
per-host probes (matmul peak, gloo, ZeRO) and the pre-flight's worker. The only package that imports torch,
transformers, accelerate or deepspeed.

Floor (``docs/architecture.md``, the layers): ``job``, below ``launchers | tracking | search`` (the local
launcher starts it as ``python -m sweeper.job.harness``; :mod:`sweeper.launchers.slurm.in_job` calls it inside its
SLURM job) and above ``point``.
"""
