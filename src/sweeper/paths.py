"""Where the Hydra config tree (``conf/``) and the named grids (``sweeps/``) live.

In a source checkout (``pip install -e .``) they are the repository's ``conf/`` and ``sweeps/``; in a wheel they are
bundled as ``sweeper/_data/conf`` and ``sweeper/_data/sweeps``.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_root() -> Path:
    """The folder holding ``conf/`` and ``sweeps/``.

    Raises:
        FileNotFoundError: when neither the checkout nor the wheel layout is present (a broken install).
    """
    for root in (_PKG.parents[1], _PKG / "_data"):
        if (root / "conf" / "config.yaml").is_file() and (root / "sweeps").is_dir():
            return root
    raise FileNotFoundError(f"sweeper's conf/ and sweeps/ were not found next to {_PKG}; reinstall sweeper")


def conf_dir() -> Path:
    """The primary config folder (``conf/``, holding ``config.yaml`` and the ``model`` group)."""
    return data_root() / "conf"


def sweeps_dir() -> Path:
    """The named grids (``sweeps/*.yaml``), registered as the ``sweeps`` config group."""
    return data_root() / "sweeps"
