"""Hydra discovers launcher plugins only inside the ``hydra_plugins`` namespace package; this registers
:class:`sweeper.slurm_launcher.SlurmLauncher` there (``hydra/launcher=sweeper_slurm``)."""

from sweeper.slurm_launcher import SlurmLauncher


class SweeperSlurmLauncher(SlurmLauncher):
    """``launcher=slurm``: see :mod:`sweeper.slurm_launcher`."""
