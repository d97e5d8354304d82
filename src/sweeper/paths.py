"""Where sweeper's files live: the Hydra config tree (``conf/``), the named grids (``sweeps/``) and the per-host cache.

In a source checkout (``pip install -e .``) ``conf/`` and ``sweeps/`` are the repository's; in a wheel they are
bundled as ``sweeper/_data/conf`` and ``sweeper/_data/sweeps``. The per-host cache (:func:`cache_dir`) holds what is
measured or read once per host and reused: the CPU matmul peak, the gloo link, the installed ``TrainingArguments``
fields.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable that moves the whole per-host cache (:func:`cache_dir`).
CACHE_ENV = "SWEEPER_CACHE_DIR"

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


def cache_dir() -> Path:
    """The per-host cache, every file of it: ``$SWEEPER_CACHE_DIR``, else ``$XDG_CACHE_HOME/sweeper``, else
    ``~/.cache/sweeper`` (the XDG base-directory default). The matmul peak (:mod:`sweeper.job.cpu_peak`), the gloo
    link (:mod:`sweeper.capacity.hostcomm`) and the ``TrainingArguments`` fields
    (:mod:`sweeper.point.rules.ta_schema`) all live here, so one variable moves all three."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sweeper"
