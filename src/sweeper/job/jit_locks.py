"""DeepSpeed's JIT-build locks: a stale one is removed before a DeepSpeed point's ranks build their ops, never waited
on for ever.

DeepSpeed JIT-builds its C++ ops on first use through ``torch.utils.cpp_extension.load`` (on a CPU host every ZeRO
point loads ``deepspeed_shm_comm``, :class:`deepspeed.ops.op_builder.cpu.comm.ShareMemCommBuilder`, from
``deepspeed.init_distributed``; offload optimizers load ``cpu_adam``, GPUs others). torch serialises a build with
``torch.utils.file_baton.FileBaton``: the builder creates ``<root>/<op>/lock`` (``O_CREAT | O_EXCL``), **keeps that
file open for the whole build**, and removes it at the end; every other process polls until the file is gone
(``FileBaton.wait``, no time limit). A builder killed mid-build (a point stopped at its ``timeout_s``, SIGKILL, the
OOM killer) leaves the file behind, and every later DeepSpeed run on the host waits in ``FileBaton.wait`` for ever.

The rule (:func:`judge`): a lock is **live** while some process of this host has the file open (the builder's
baton). With no holder the builder is gone and nobody will ever remove the file; ninja and the compilers a killed
builder started may still run in the op's directory (they are not killed with it and do not hold the file), so
the rule waits for them to end first (:data:`ORPHAN_WAIT_S`), then the lock is **stale** and removed: ninja
reruns any command a killed build left unfinished (it is not in its log), so the next build is sound. The rule can
only see this host's processes it may read: a lock on a network filesystem (another host may be building), or a
process of the lock's owner that it may not read and that could be a builder (a Python interpreter, ninja or a
compiler; not the host's init or an agent), make it **unknown**, left in place; the point's timeout then
ends the wait and the record names the lock and the fix. Each check runs under an ``flock`` of our own
(:data:`CHECK_FILE`, released by the kernel when its holder dies), so two ranks never remove each other's lock.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

#: torch's baton file in each op's build directory (``torch.utils.cpp_extension._jit_compile``).
LOCK_NAME = "lock"
#: sweeper's own lock (``flock``) in the extensions root, held while one process checks and removes.
CHECK_FILE = ".sweeper-jit-check.lock"
#: Seconds to wait for build processes a killed builder left running in an op's directory (ninja, c++), at most.
ORPHAN_WAIT_S = 600.0
#: Share of the point's ``timeout_s`` the wait may take (:func:`orphan_wait_s`): the rest is left for the point.
ORPHAN_WAIT_SHARE = 0.5
#: Filesystem types on which another host may hold a lock (its builder invisible in this host's /proc).
NETWORK_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p", "afs", "ncpfs"}
)
#: Programs of a build torch runs (ninja and the compilers it starts), besides the Python builder itself.
BUILD_TOOLS = frozenset({"ninja", "c++", "g++", "gcc", "cc", "cc1plus", "clang", "clang++", "nvcc", "hipcc", "ld"})

Verdict = Literal["live", "stale", "unknown"]


@dataclass(frozen=True)
class Judgement:
    """What :func:`judge` found about one lock file.

    Attributes:
        verdict: ``live`` (a process holds it open: a build under way), ``stale`` (no holder and no build process
            left: safe to remove), ``unknown`` (this host cannot tell).
        holders: pids of this host's processes that have the lock file open.
        builders: pids of processes whose working directory is the op's build directory (ninja, compilers).
        why: one sentence, for the record.
    """

    verdict: Verdict
    holders: tuple[int, ...] = ()
    builders: tuple[int, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Finding:
    """One lock found before a DeepSpeed point's build, and what was done with it (plain data for the record).

    Attributes:
        path: the lock file.
        action: ``removed`` (stale), ``left`` (live or unknown: the build waits for it).
        verdict: :attr:`Judgement.verdict`.
        age_s: seconds since the lock file was created (its mtime), when first seen.
        message: what happened and, when left, the fix.
    """

    path: str
    action: Literal["removed", "left"]
    verdict: Verdict
    age_s: float
    message: str

    def to_dict(self) -> dict[str, object]:
        """The finding as JSON-serialisable data."""
        return asdict(self)


def extensions_root() -> Path:
    """The folder torch JIT-builds extensions in, one sub-folder per op: ``$TORCH_EXTENSIONS_DIR``, else
    ``torch.utils.cpp_extension.get_default_build_root()/py<XY>_<cpu|cuXYZ|rocmXY>``, as
    ``torch.utils.cpp_extension._get_build_directory`` makes it (without creating anything)."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is not None:
        return Path(root)
    if torch.version.hip is not None:
        accel = f"rocm{torch.version.hip.replace('.', '')}"
    elif torch.version.cuda is not None:
        accel = f"cu{torch.version.cuda.replace('.', '')}"
    else:
        accel = "cpu"
    tag = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_{accel}"
    return Path(get_default_build_root()) / tag


def filesystem_type(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> str | None:
    """The type of the filesystem ``path`` is on (``ext4``, ``nfs4``, ...): the longest mount point of
    ``mountinfo`` above its real path; None when unreadable."""
    real = os.path.realpath(path)
    best, fstype = "", None
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4].encode().decode("unicode_escape")  # \040 for a space, as the kernel writes it
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, right.split()[0]
    return fstype


def judge(lock: Path, proc: Path = Path("/proc")) -> Judgement:
    """Whether ``lock`` (a ``FileBaton`` file) is live, stale or unknown (the rule: module docstring), from this
    host's processes under ``proc``: their open files (``fd/*``) and working directories (``cwd``).

    Raises:
        FileNotFoundError: ``lock`` is gone (released meanwhile).
    """
    st = lock.stat()
    build_dir = os.path.realpath(lock.parent)
    me = os.getpid()
    holders: list[int] = []
    builders: list[int] = []
    unseen: list[int] = []  # processes that could be the builder but whose files this process may not read
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            cwd = os.readlink(entry / "cwd")
            if cwd == build_dir or cwd.startswith(build_dir + "/"):
                builders.append(pid)
            if any(_same_file(fd, st) for fd in (entry / "fd").iterdir()):
                holders.append(pid)
        except PermissionError:
            if _could_build(entry, st.st_uid):
                unseen.append(pid)
        except OSError:
            continue  # the process ended while it was read
    if holders:
        return Judgement("live", tuple(holders), tuple(builders), f"held open by pid {', '.join(map(str, holders))}")
    fstype = filesystem_type(lock)
    if fstype in NETWORK_FS:
        return Judgement("unknown", (), tuple(builders), f"on a {fstype} filesystem: another host may be building")
    if unseen:
        return Judgement("unknown", (), tuple(builders), f"processes {unseen[:5]} of its owner cannot be read here")
    if builders:
        return Judgement("stale", (), tuple(builders), f"its builder is gone; build processes {builders} still run")
    return Judgement("stale", why="no process holds it open or builds in its directory: its builder was killed")


def _same_file(fd: Path, st: os.stat_result) -> bool:
    """Whether the open file ``fd`` (``/proc/<pid>/fd/<n>``) is the file of ``st``.

    Raises:
        PermissionError: this process may not read it.
    """
    try:
        target = fd.stat()
    except PermissionError:
        raise
    except OSError:
        return False  # closed meanwhile, or a socket's or pipe's name
    return (target.st_dev, target.st_ino) == (st.st_dev, st.st_ino)


def _could_build(entry: Path, uid: int) -> bool:
    """Whether a process this one may not read (``entry``: its ``/proc/<pid>``) could be a lock's builder or its
    build: a process of the lock's owner ``uid`` whose program (``cmdline``, readable by all) is a Python
    interpreter or one of :data:`BUILD_TOOLS`. Other processes (the host's init, agents, shells) cannot be."""
    try:
        argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        owner = entry.stat().st_uid
    except OSError:
        return False
    name = os.path.basename(argv0)
    return owner == uid and (name.startswith("python") or name in BUILD_TOOLS)


@contextmanager
def _checking(root: Path) -> Iterator[None]:
    """Hold sweeper's own ``flock`` on ``root``/:data:`CHECK_FILE` (waits for another checker)."""
    with open(root / CHECK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def settle(
    root: Path | None = None, wait_s: float = ORPHAN_WAIT_S, poll_s: float = 0.5, proc: Path = Path("/proc")
) -> list[Finding]:
    """Check every op's lock under ``root`` (default :func:`extensions_root`) and remove the stale ones; returns one
    :class:`Finding` per lock found (none: ``[]``, also when ``root`` does not exist). A lock whose builder is gone
    but whose build processes still run is removed once they end, waiting at most ``wait_s`` seconds (then left,
    ``unknown``). A removal happens only if the path still names the file judged (same inode).

    Raises:
        OSError: ``root`` exists but sweeper's check lock cannot be created in it, or a stale lock cannot be
            removed (permissions).
    """
    root = extensions_root() if root is None else root
    if not root.is_dir():
        return []
    found: list[Finding] = []
    with _checking(root):
        for lock in sorted(root.glob(f"*/{LOCK_NAME}")):
            finding = _settle_one(lock, wait_s, poll_s, proc)
            if finding is not None:
                found.append(finding)
    return found


def _settle_one(lock: Path, wait_s: float, poll_s: float, proc: Path) -> Finding | None:
    deadline = time.monotonic() + wait_s
    try:
        first = lock.stat()
    except FileNotFoundError:
        return None
    age = max(0.0, time.time() - first.st_mtime)
    while True:
        try:
            j = judge(lock, proc)
            now = lock.stat()
        except FileNotFoundError:
            return None  # released while judged: a build ended
        if (now.st_dev, now.st_ino) != (first.st_dev, first.st_ino):
            return None  # a new build took it: live
        if j.verdict == "stale" and j.builders and time.monotonic() < deadline:
            time.sleep(poll_s)
            continue
        if j.verdict == "stale" and not j.builders:
            lock.unlink(missing_ok=True)
            return Finding(
                str(lock),
                "removed",
                "stale",
                round(age, 1),
                f"removed the stale DeepSpeed JIT-build lock {lock} "
                f"(age {age:.0f} s): {j.why}; torch would have waited on it for ever",
            )
        why = j.why if j.verdict != "stale" else f"{j.why} after {wait_s:g} s"
        fix = "" if j.verdict == "live" else f"; if no build of it runs on any host, remove it: rm {lock}"
        return Finding(
            str(lock),
            "left",
            "live" if j.verdict == "live" else "unknown",
            round(age, 1),
            f"DeepSpeed JIT-build lock {lock} left in place ({why}): the ranks wait until it is removed{fix}",
        )


def orphan_wait_s(timeout_s: float) -> float:
    """Seconds a point with ``timeout_s`` (seconds) may wait for a killed build's leftover processes:
    :data:`ORPHAN_WAIT_S`, but at most :data:`ORPHAN_WAIT_SHARE` of the point's time, so that the check ends and its
    findings are written well before the point's timeout stops the ranks (a lock still left is then named in the
    ``timeout`` record's reason, with the fix)."""
    return max(0.0, min(ORPHAN_WAIT_S, ORPHAN_WAIT_SHARE * timeout_s))


def before_build(zero: int, point_dir: Path, rank: int, timeout_s: float) -> list[Finding]:
    """The check of a DeepSpeed point's rank (``zero`` > 0; else nothing), first thing in its work, before
    DeepSpeed loads an op: :func:`settle`, waiting for leftover build processes at most :func:`orphan_wait_s` of
    the point's ``timeout_s`` (seconds), each finding printed to stderr (the point's log) and written for the
    driver's record (:func:`sweeper.results.jitlocks.write_findings`). Runs as the attributed site ``jit-lock``
    (:mod:`sweeper.job.faults`): a fault of this check is the point's ``internal`` error, never a hang.

    Raises:
        sweeper.job.faults.HarnessFault: the check failed (site ``jit-lock``).
    """
    from sweeper.job.faults import attributed
    from sweeper.results.jitlocks import write_findings

    if zero <= 0:
        return []
    with attributed("jit-lock"):
        found = settle(wait_s=orphan_wait_s(timeout_s))
        for f in found:
            print(f"sweeper: {f.message}", file=sys.stderr, flush=True)
        write_findings(point_dir, rank, [f.to_dict() for f in found])
    return found
