"""A cgroup v2 memory limit for the ranks of one local point, where the memory controller is delegated to this
process: the kernel enforces the host-memory limit (:mod:`sweeper.launchers.host_memory`) even between two polls of
the RSS watch. Elsewhere (cgroup v1, a hybrid hierarchy without controllers, no permission)
:meth:`CgroupMemoryLimit.create` returns None and the RSS watch alone enforces it. Byte counts are ints of bytes.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from pathlib import Path


def _cgroup2_dir(mountinfo: str, proc_cgroup: str) -> Path | None:
    """The directory of a process's cgroup v2, from its ``/proc/<pid>/mountinfo`` and ``/proc/<pid>/cgroup``
    texts: the ``cgroup2`` mount point joined with the ``0::<path>`` line (relative to the mount's root). None
    without a unified (``0::``) line or a ``cgroup2`` mount covering it."""
    path = next((ln[3:] for ln in proc_cgroup.splitlines() if ln.startswith("0::")), None)
    if path is None:
        return None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] != ["cgroup2"] or len(fields) < 5:
            continue
        root, mount = (f.encode().decode("unicode_escape") for f in fields[3:5])  # octal escapes: \040 = space
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return Path(mount) / path[len(root) :].lstrip("/")
    return None


def own_cgroup2_dir() -> Path | None:
    """This process's cgroup v2 directory (see :func:`_cgroup2_dir`), or None (no cgroup v2, unreadable)."""
    try:
        return _cgroup2_dir(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    except OSError:
        return None


class CgroupMemoryLimit:
    """A child cgroup v2 of this process's own cgroup with ``memory.max`` = the limit, ``memory.swap.max`` = 0 and
    ``memory.oom.group`` = 1 (the kernel kills the whole group, not one rank), for the ranks of one point.

    :meth:`create` returns None unless all of it works: a cgroup v2 directory for this process whose
    ``cgroup.controllers`` and ``cgroup.subtree_control`` both list ``memory`` (it never enables a controller), a
    child it may create, write ``memory.max`` in and move a process into (checked with a probe ``sh``).
    """

    def __init__(self, path: Path, limit_bytes: int) -> None:
        self.path = path
        self.limit_bytes = limit_bytes

    @classmethod
    def create(cls, limit_bytes: int, parent: Path | None = None) -> CgroupMemoryLimit | None:
        """Create the child cgroup under ``parent`` (default: :func:`own_cgroup2_dir`), or None where impossible."""
        parent = parent or own_cgroup2_dir()
        if parent is None:
            return None
        child = parent / f"sweeper-{os.getpid()}-{threading.get_ident()}"
        try:
            for name in ("cgroup.controllers", "cgroup.subtree_control"):
                if "memory" not in (parent / name).read_text().split():
                    return None
            child.mkdir()
        except OSError:
            return None
        cg = cls(child, limit_bytes)
        try:
            if not (child / "memory.max").exists():  # the kernel creates it when memory is enabled for the child
                raise OSError(f"{child} has no memory.max")
            (child / "memory.max").write_text(str(limit_bytes))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if (child / name).exists():
                    (child / name).write_text(value)
            probe = subprocess.run(cg.wrap(["true"]), capture_output=True, timeout=10)
            if probe.returncode != 0:
                raise OSError(probe.stderr.decode(errors="replace"))
        except (OSError, subprocess.SubprocessError):
            cg.close()
            return None
        return cg

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started by a ``sh`` that first moves itself into the cgroup (so every process it starts is
        inside from its first page on), then ``exec``s it: same pid."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *cmd]

    def oom_killed(self) -> bool:
        """The kernel killed a process of this cgroup for reaching ``memory.max`` (``memory.events`` oom_kill)."""
        try:
            events = dict(ln.split() for ln in (self.path / "memory.events").read_text().splitlines())
        except (OSError, ValueError):
            return False
        return int(events.get("oom_kill", 0)) > 0

    def peak_bytes(self) -> int | None:
        """The cgroup's peak memory (``memory.peak``, Linux >= 5.19: RSS, page cache and kernel memory, bytes)."""
        try:
            return int((self.path / "memory.peak").read_text())
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        """Remove the cgroup once its processes are gone (waits up to 5 s for killed ones to exit; left in place
        otherwise: an empty cgroup costs nothing and its name says whose it was)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    return
                threading.Event().wait(0.1)
