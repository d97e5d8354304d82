"""Rule L02 (U11) through the real command: a SLURM point with more ranks per node than the cluster's GPUs exits 2
before anything is submitted, naming ``ranks_per_node`` and ``cluster.gpus_per_node`` (no SLURM needed: the gate
refuses it first)."""

from __future__ import annotations


def test_the_sweep_refuses_sixteen_ranks_on_an_eight_gpu_node_before_sbatch(sweeper_cli):
    run = sweeper_cli("launcher=slurm", "cluster=h100-80gb", "ranks_per_node=16", timeout=120)
    assert run.proc.returncode == 2, run.output[-2000:]
    assert "invalid point (ranks_per_node, cluster.gpus_per_node)" in run.proc.stderr
    assert "ranks_per_node=16 > cluster.gpus_per_node=8" in run.proc.stderr
    assert not any(run.cwd.iterdir())  # no directory made, nothing submitted
