"""A rank never outlives the driver that started it (local launcher).

:mod:`sweeper.launchers.torchrun` starts torchrun with ``PR_SET_PDEATHSIG=SIGKILL`` (it dies with the driver) and tells
the ranks the driver's pid in ``SWEEPER_DRIVER_PID``. torchrun starts each rank in its own session, so a kill of
torchrun's process group does not reach them: each rank therefore asks the kernel for the same signal when its own
parent, torchrun, dies (``prctl(2)``, Linux). A rank whose torchrun died before that call is already orphaned: its
parent is then a reaper whose parent is not the driver, and it stops at once.
"""

from __future__ import annotations

import os
import sys

#: Set by the local launcher for the ranks: the driver's pid (torchrun's parent).
DRIVER_PID_ENV = "SWEEPER_DRIVER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def orphaned_at_start() -> bool:
    """Arm the parent-death signal (SIGKILL when torchrun dies) and say whether this rank is already an orphan.

    Only under sweeper's local launcher on Linux (``SWEEPER_DRIVER_PID`` set); elsewhere (SLURM's srun, a rank
    started by hand) nothing is done and the answer is False. Returns True when torchrun is already gone: the
    caller should exit (code 1) without doing anything.
    """
    driver = os.environ.get(DRIVER_PID_ENV)
    if not driver or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    try:  # did torchrun die before that line? then our parent is a reaper, whose parent is not the driver
        with open(f"/proc/{os.getppid()}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[1] != driver
    except (OSError, IndexError):
        return False  # cannot tell: run
