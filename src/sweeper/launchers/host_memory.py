"""A per-point host-memory limit for local runs: a point never takes the machine down (docs/cases.md#t08).

The ranks of a local point run as one process tree (``torchrun`` and its descendants, in their own session and
process group). While they run, :class:`RssWatch` samples the tree's resident memory every :data:`POLL_S` seconds
in a background thread of the driver and, as soon as the sum reaches the limit, kills the whole process group with
``SIGKILL``: the point ends as ``host_oom`` instead of the kernel's OOM killer picking a victim on the machine.

Where a cgroup v2 with the memory controller is delegated to this process (rare: the calling process's own cgroup
must already have ``memory`` in ``cgroup.subtree_control``), :class:`sweeper.launchers.cgroup.CgroupMemoryLimit`
also puts the ranks in a child cgroup with ``memory.max`` = the limit, so the kernel enforces it even between two
polls. Elsewhere
(cgroup v1, a hybrid hierarchy without controllers, no permission) the RSS watch alone enforces it.

What is measured: the sum of RSS (``/proc/<pid>/statm``, through psutil) over the tree. RSS counts the pages of
shared libraries once per process, so the sum over-counts what the tree really holds by a few hundred MiB (libtorch
is mapped by every rank): an over-estimate, i.e. the limit acts early, never late. PSS would split shared pages
fairly, but reading it (``smaps_rollup``) walks every page table and costs milliseconds per GiB of each process,
too slow for a 50 ms poll of processes that grow by GiB per second.

Byte counts are ints of bytes; GiB = 2**30 bytes (:data:`sweeper.units.GIB`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from sweeper.results.rankfile import rank_of_process_name
from sweeper.units import GIB, format_bytes

#: Seconds between two samples of the ranks' RSS. A rank filling pages at ~2 GiB/s (a memset loop; T08's ranks grew
#: at ~0.35 GB/s) overshoots the limit by at most ~100 MiB before it is killed.
POLL_S = 0.05
#: The default limit is at most this fraction of the machine's total memory.
DEFAULT_FRACTION = 0.8
#: ... and leaves at least this much of the memory available at the point's start to everything else (bytes).
DEFAULT_RESERVE_BYTES = 1 * GIB
LAUNCHER = "launcher"  # the key of processes without a RANK (torchrun itself) in per-rank breakdowns


@dataclass(frozen=True)
class Limit:
    """The effective host-memory limit of one point.

    Attributes:
        bytes: the limit on the sum of the ranks' RSS, in bytes.
        source: how it was chosen, for the record and the reason (``host_mem_limit_gib=2`` or the default's inputs).
    """

    bytes: int
    source: str


def default_limit_bytes(
    total_bytes: int,
    available_bytes: int,
    fraction: float = DEFAULT_FRACTION,
    reserve_bytes: int = DEFAULT_RESERVE_BYTES,
) -> int:
    """The default limit, in bytes: ``min(fraction x MemTotal, MemAvailable - reserve)``, never below 0.

    Why both terms: ``MemAvailable`` (the kernel's estimate of what can be allocated without swapping, which
    counts reclaimable page cache) at the point's start is what the point can take without pushing anything else
    out; the reserve (1 GiB) keeps the driver, the shell and the kernel's own allocations alive while the ranks are
    at the limit. ``fraction`` x ``MemTotal`` (80 %) bounds the point on an idle machine where ``MemAvailable`` is
    close to the total, where the kernel's OOM killer and the page-cache thrashing before it would otherwise start
    only a few hundred MiB before the limit. A result of 0 means the machine has no room for a point: it is stopped
    at its first sample.

    Args:
        total_bytes: ``MemTotal`` in bytes. available_bytes: ``MemAvailable`` in bytes.
    """
    return max(0, min(int(fraction * total_bytes), available_bytes - reserve_bytes))


def resolve_limit(limit_gib: float | None) -> Limit:
    """The limit of a point whose ``host_mem_limit_gib`` is ``limit_gib`` (GiB = 2**30 bytes; None: the default of
    :func:`default_limit_bytes` from this machine's memory now, read through ``psutil.virtual_memory()``).

    An explicit value is taken as given, even above the machine's memory (the gate refuses values <= 0).
    """
    if limit_gib is not None:
        return Limit(int(limit_gib * GIB), f"host_mem_limit_gib={limit_gib:g}")
    vm = psutil.virtual_memory()
    limit = default_limit_bytes(vm.total, vm.available)
    source = (
        f"default: min({DEFAULT_FRACTION:.0%} of MemTotal {format_bytes(vm.total)}, MemAvailable "
        f"{format_bytes(vm.available)} - {format_bytes(DEFAULT_RESERVE_BYTES)} reserve)"
    )
    return Limit(limit, source)


def _rank_of(proc: psutil.Process) -> str:
    """The rank a process belongs to, from the ``RANK`` (else ``LOCAL_RANK``) its environment was started with, else
    (a rank forked from the pre-flight worker, whose start environment is the worker's) from its process name
    (:data:`sweeper.results.rankfile.RANK_PROCESS_NAME`)."""
    env = proc.environ()
    value = env.get("RANK", env.get("LOCAL_RANK"))
    if value is None:
        value = rank_of_process_name(proc.name())
    return value if value is not None and value.isdigit() else LAUNCHER


def sample_tree(root: psutil.Process) -> dict[str, int]:
    """The RSS in bytes of ``root`` and all its descendants, summed per rank (``"0"``, ``"1"``, ...; processes
    started without ``RANK``/``LOCAL_RANK`` in their environment, e.g. torchrun, under ``"launcher"``): one full
    walk of the process table (:class:`TreeSampler` is the cheap repeated form, and this is its first sample).

    Processes that end while being read are skipped. Raises ``psutil.NoSuchProcess`` if ``root`` itself is gone.
    """
    return TreeSampler(root, refresh_s=0.0).sample()


#: Seconds between two walks of the process table for the tree's members (:class:`TreeSampler`); the members' RSS is
#: read at every sample. A process that appears between two walks (a data-loader worker) is counted from the next.
TREE_REFRESH_S = 0.5
#: A process first seen without a rank is taken for the launcher once it is this old (seconds): a rank between
#: torchrun's fork and its exec still carries torchrun's environment for a few milliseconds.
LAUNCHER_SETTLED_S = 1.0


class TreeSampler:
    """The RSS of a process tree per rank (see :func:`sample_tree`), at a fraction of the cost of a full walk when
    called every few milliseconds: the tree's members are found by a walk of the process table (``psutil``'s
    ``children(recursive=True)`` reads every process's ``/proc/<pid>/stat``) at most every ``refresh_s`` seconds, or
    at once when a member has ended; in between only the members' ``/proc/<pid>/statm`` is read. Each member's rank
    is read from its environment once (a process without one is re-read until it is
    :data:`LAUNCHER_SETTLED_S` old).

    Measured with ``python -m sweeper`` (default point, 2 ranks, py-spy): the driver's watch thread took 0.8 s of
    CPU over an 8 s point with a full scan every 50 ms, competing with the ranks for the same 2 cores.
    """

    def __init__(self, root: psutil.Process, refresh_s: float = TREE_REFRESH_S) -> None:
        self.root = root
        self.refresh_s = refresh_s
        self._members: list[psutil.Process] = []
        self._ranks: dict[tuple[int, float], str] = {}
        self._walked_at = float("-inf")

    def _walk(self, now: float) -> None:
        self._members = [self.root, *self.root.children(recursive=True)]
        self._walked_at = now

    def _rank(self, proc: psutil.Process, now_wall: float) -> str:
        key = (proc.pid, proc.create_time())
        rank = self._ranks.get(key)
        if rank is None:
            rank = _rank_of(proc)
            if rank != LAUNCHER or now_wall - key[1] >= LAUNCHER_SETTLED_S:
                self._ranks[key] = rank
        return rank

    def sample(self) -> dict[str, int]:
        """RSS in bytes per rank now (see :func:`sample_tree`). Raises ``psutil.NoSuchProcess`` when the root is
        gone."""
        now = time.monotonic()
        if now - self._walked_at >= self.refresh_s:
            self._walk(now)
        now_wall = time.time()
        out: dict[str, int] = {}
        ended = False
        for proc in self._members:
            try:
                rss = proc.memory_info().rss
                rank = self._rank(proc, now_wall)
            except psutil.NoSuchProcess:
                if proc is self.root:
                    raise
                ended = True
                continue
            except psutil.AccessDenied:  # not ours to read (another user's process): not counted
                continue
            out[rank] = out.get(rank, 0) + rss
        if ended:  # a member ended: walk again at the next sample (its children may have been re-parented)
            self._walked_at = float("-inf")
        return out


@dataclass
class WatchResult:
    """What :class:`RssWatch` saw.

    Attributes:
        limit_bytes: the limit it enforced.
        tripped: the tree reached the limit and its process group was killed.
        peak_bytes: the largest sampled sum of RSS over the tree (bytes).
        peak_by_rank_bytes: that sample, per rank (see :func:`sample_tree`).
        samples: how many samples were taken. poll_s: seconds between samples.
    """

    limit_bytes: int
    poll_s: float
    tripped: bool = False
    peak_bytes: int = 0
    peak_by_rank_bytes: dict[str, int] = field(default_factory=dict)
    samples: int = 0

    @property
    def top_rank(self) -> int | None:
        """The rank with the largest RSS in the peak sample (None if only the launcher was seen)."""
        by_rank = {int(r): b for r, b in self.peak_by_rank_bytes.items() if r != LAUNCHER}
        return max(by_rank, key=by_rank.__getitem__) if by_rank else None


class RssWatch:
    """A background thread that samples a process tree's RSS every ``poll_s`` seconds (:class:`TreeSampler`) and,
    when the sum reaches ``limit_bytes``, sends ``SIGKILL`` to the process group ``pgid`` (the tree's root must lead
    it: started with ``start_new_session=True``). Use as a context manager around the wait for the root::

        with RssWatch(proc.pid, limit.bytes) as watch:
            proc.wait()
        watch.result.tripped

    The thread ends when the root ends, when the limit is reached, or when the block is left.
    """

    def __init__(self, pid: int, limit_bytes: int, *, poll_s: float = POLL_S, pgid: int | None = None) -> None:
        self.pid = pid
        self.pgid = pid if pgid is None else pgid
        self.result = WatchResult(limit_bytes=limit_bytes, poll_s=poll_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-watch-{pid}", daemon=True)

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        res = self.result
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        sampler = TreeSampler(root)
        while True:
            try:
                by_rank = sampler.sample()
            except psutil.NoSuchProcess:
                return
            total = sum(by_rank.values())
            res.samples += 1
            if total > res.peak_bytes:
                res.peak_bytes, res.peak_by_rank_bytes = total, by_rank
            if total >= res.limit_bytes:
                res.tripped = True
                try:
                    os.killpg(self.pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return
            if self._stop.wait(res.poll_s):
                return


def host_oom_outcome(
    base: dict[str, Any],
    limit: Limit,
    watch: WatchResult,
    steps: dict[int, int],
    cgroup_peak_bytes: int | None = None,
) -> dict[str, Any]:
    """The ``host_oom`` outcome of a point stopped at its host-memory limit (by :class:`RssWatch` or by the
    kernel in a :class:`sweeper.launchers.cgroup.CgroupMemoryLimit`), from what
    :func:`sweeper.point.lifecycle.finish` made of the rank files (:func:`sweeper.launchers.torchrun.record_launch`).

    Args:
        base: what :func:`sweeper.results.outcome.summarize_ranks` made of the rank files (setup, metrics,
            artifacts are kept; status, reason, error kind and failure are replaced).
        limit: the limit enforced. watch: what the RSS watch saw.
        steps: the optimizer steps each rank had finished (``rank -> step``, from its ``rank<r>.step`` file).
        cgroup_peak_bytes: ``memory.peak`` of the cgroup when the kernel enforced the limit, else None.

    The failure holds bytes: ``host_mem_limit_bytes``, ``host_rss_bytes`` (the peak: the cgroup's when given,
    else the largest sampled sum of RSS), ``rss_by_rank_bytes`` (that sample per rank), and ``rank`` (the rank
    with the largest RSS), ``step`` (the steps it had finished, as for an OOM: the index of the step it was in),
    ``phase`` (``train`` once the rank has a step file, else unknown), ``rank_steps`` (every rank's), ``enforced_by``
    (``rss_watch`` or ``cgroup_v2_memory_max``), ``poll_interval_s``.
    """
    rank = watch.top_rank
    step = steps.get(rank) if rank is not None else None
    peak = cgroup_peak_bytes if cgroup_peak_bytes is not None else watch.peak_bytes
    by = "rss_watch" if watch.tripped else "cgroup_v2_memory_max"
    where = "" if rank is None else f" (rank {rank}" + (f" at step {step}" if step is not None else "") + ")"
    who = "the ranks' RSS" if by == "rss_watch" else "the ranks' cgroup (RSS and page cache)"
    reason = (
        f"host memory limit {format_bytes(limit.bytes)} reached ({limit.source}): {who} peaked at "
        f"{format_bytes(peak)}{where} and the point was stopped; lower per_device_batch_size/seq_len, "
        "or raise host_mem_limit_gib"
    )
    failure = {
        "host_mem_limit_bytes": limit.bytes,
        "host_mem_limit_source": limit.source,
        "host_rss_bytes": peak,
        "rss_by_rank_bytes": dict(watch.peak_by_rank_bytes),
        "rank": rank,
        "step": step,
        "phase": "train" if step is not None else None,
        "enforced_by": by,
        "poll_interval_s": watch.poll_s,
        "rank_steps": {str(k): v for k, v in sorted(steps.items())},
    }
    return {**base, "status": "host_oom", "error_kind": None, "reason": reason, "failure": failure}
