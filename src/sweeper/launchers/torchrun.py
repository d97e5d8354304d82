"""Run a point's ranks on this machine under torchrun, bounded, and record what they left.

The driver side of the local launcher (:mod:`sweeper.launchers.local` decides what to launch; a batch search,
:mod:`sweeper.launchers.batch_search`, launches its trials here too). It never imports torch: the ranks run in their
own processes, so a rank that crashes, hangs or runs out of memory cannot take the sweep with it, and a point that
outgrows its host-memory limit is stopped before it can take the machine with it
(:mod:`sweeper.launchers.host_memory`). Every rank runs ``python -m sweeper.job.harness [--mode=search] <pdir>``.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sweeper.config.spec import PointSpec
from sweeper.launchers import progress
from sweeper.launchers.cgroup import CgroupMemoryLimit
from sweeper.launchers.host_memory import (
    Limit,
    RssWatch,
    WatchResult,
    host_oom_outcome,
    resolve_limit,
)
from sweeper.launchers.prefetch import prefetch_imports
from sweeper.point.hardware import local_device_type
from sweeper.point.lifecycle import Prepared, finish
from sweeper.results.rankfile import RankFile, read_rank_files
from sweeper.results.record import Record

LOG_FILE = "ranks.log"
#: The environment variable that tells the ranks the driver's pid (their orphan check, :mod:`sweeper.job.orphan`).
DRIVER_PID_ENV = "SWEEPER_DRIVER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PRCTL: Callable[..., int] | None = None
#: The module every rank runs: ``python -m sweeper.job.harness [--mode=search] <pdir>`` (:mod:`sweeper.job.harness`).
HARNESS = "sweeper.job.harness"
#: The ranks' modes: a measured point, or the trials of a batch search (which write no step files).
MEASURE, SEARCH = "measure", "search"
KILL_GRACE_S = 10.0
#: ``SWEEPER_RANK_START``: ``auto`` (default: plain data-parallel CPU points forked from the pre-flight worker,
#: :mod:`sweeper.job.forked_launch`; see :func:`rank_start`), ``fork`` (every CPU point) or ``exec`` (none).
RANK_START_ENV = "SWEEPER_RANK_START"
FORK, EXEC, AUTO = "fork", "exec", "auto"


@dataclass
class Launch:
    """One launch of a point's ranks and what they left.

    Attributes:
        returncode, timed_out: torchrun's exit code; stopped at the time limit.
        ranks: the rank files. log_tail: the end of the ranks' log. wall_s: seconds the launch took.
        limit: the host-memory limit enforced. watch: what the RSS watch saw (the largest sum of the ranks' RSS).
        host_oom: stopped at the host-memory limit (a timeout that came first stays a timeout).
        cgroup_peak_bytes: ``memory.peak`` of the ranks' cgroup when the kernel enforced the limit, else None.
        rank_start: :data:`FORK` (forked from the pre-flight worker) or :data:`EXEC` (fresh, under torchrun);
            the record's ``ran.rank_start``.
    """

    returncode: int
    timed_out: bool
    ranks: list[RankFile]
    log_tail: str
    wall_s: float
    limit: Limit
    watch: WatchResult
    host_oom: bool = False
    cgroup_peak_bytes: int | None = None
    rank_start: str = "exec"


def launch_ranks(spec: PointSpec, pdir: Path, mode: str = MEASURE, timeout_s: float | None = None) -> Launch:
    """Run the ranks of ``spec`` in ``mode`` (:data:`MEASURE` or :data:`SEARCH`) under torchrun, bounded by
    ``timeout_s`` (default ``spec.timeout_s``) and the host-memory limit (``host_mem_limit_gib`` or the default of
    :func:`sweeper.launchers.host_memory.default_limit_bytes`, resolved now), and read what they left."""
    pdir = Path(pdir)
    limit = resolve_limit(spec.host_mem_limit_gib)
    t0 = time.perf_counter()
    run = _run_ranks(spec, pdir, limit, mode, timeout_s)
    wall = time.perf_counter() - t0
    ranks = read_rank_files(pdir)
    log_tail = _tail(pdir / LOG_FILE)
    return Launch(
        run.returncode,
        run.timed_out,
        ranks,
        log_tail,
        wall,
        limit,
        run.watch,
        run.host_oom,
        run.cgroup_peak_bytes,
        run.rank_start,
    )


def record_launch(prepared: Prepared, launch: Launch, setup: dict[str, Any] | None = None) -> Record:
    """The point's record from one launch (:func:`sweeper.point.lifecycle.finish` summarises the rank files), with
    the launcher's word on it: every record carries the host-memory limit (``metrics["host_mem_limit_bytes"]``) and
    the largest sum of the ranks' RSS seen (``metrics["host_rss_peak_bytes"]``, sampled every
    :data:`~sweeper.launchers.host_memory.POLL_S` s), bytes; a launch stopped at the limit is ``host_oom``
    (:func:`sweeper.launchers.host_memory.host_oom_outcome`); ``setup`` entries are added to the record's ``ran``
    (a searched point's ``batch_search``)."""

    def amend(outcome: dict[str, Any], steps: dict[int, int]) -> dict[str, Any]:
        outcome["metrics"].update(host_mem_limit_bytes=launch.limit.bytes, host_rss_peak_bytes=launch.watch.peak_bytes)
        if launch.host_oom:
            outcome = host_oom_outcome(outcome, launch.limit, launch.watch, steps, launch.cgroup_peak_bytes)
        outcome["ran"] = {**(outcome.get("ran") or {}), **(setup or {}), "rank_start": launch.rank_start}
        return outcome

    return finish(
        prepared,
        launch.ranks,
        returncode=launch.returncode,
        timed_out=launch.timed_out,
        log_tail=launch.log_tail,
        wall_time_s=launch.wall_s,
        amend=amend,
        artifacts={"log": LOG_FILE},
    )


@dataclass
class _Run:
    returncode: int
    timed_out: bool
    watch: WatchResult
    cgroup_oom: bool = False
    cgroup_peak_bytes: int | None = None
    rank_start: str = EXEC

    @property
    def host_oom(self) -> bool:
        """Stopped at the host-memory limit (a timeout that came first stays a timeout)."""
        return not self.timed_out and (self.watch.tripped or self.cgroup_oom)


def _run_ranks(spec: PointSpec, pdir: Path, limit: Limit, mode: str = MEASURE, timeout_s: float | None = None) -> _Run:
    """Start ``ranks_per_node`` ranks of ``python -m sweeper.job.harness [--mode=<mode>] <pdir>`` with torchrun
    (c10d rendezvous on a free port) in their own session, wait at most ``timeout_s`` (default ``spec.timeout_s``)
    seconds, then stop the whole process group (SIGTERM, then SIGKILL after 10 s). While it waits, the point's
    progress line follows the ranks' step files (:func:`_wait`, :mod:`sweeper.launchers.progress`).

    Meanwhile :class:`~sweeper.launchers.host_memory.RssWatch` kills the process group (SIGKILL) as soon as the
    ranks' summed RSS reaches ``limit``; where a delegated cgroup v2 allows it, the ranks also run in a child cgroup
    with ``memory.max`` = ``limit`` (:class:`~sweeper.launchers.cgroup.CgroupMemoryLimit`). Ctrl-C (or any
    exception in the driver) stops the process group too, then propagates. A driver killed outright (SIGKILL)
    takes torchrun with it (:func:`_die_with_parent_fn`), and torchrun its ranks (the harness's own parent-death
    signal): no orphan rank outlives a killed sweep.
    """
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={spec.ranks_per_node}",
        "--max-restarts=0",
        "-m",
        HARNESS,
        *([] if mode == MEASURE else [f"--mode={mode}"]),
        str(pdir),
    ]
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env[DRIVER_PID_ENV] = str(os.getpid())  # the ranks' orphan check (sweeper.job.rank.main)
    cgroup = CgroupMemoryLimit.create(limit.bytes)
    try:
        with open(pdir / LOG_FILE, "ab") as log:
            proc: Ranks | None = None
            if forks(spec):
                proc = ForkedLaunch.start(cmd[3:], env, pdir / LOG_FILE, cgroup)
            if proc is None:
                proc = subprocess.Popen(
                    cgroup.wrap(cmd) if cgroup else cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent_fn(),
                )
            with RssWatch(proc.pid, limit.bytes) as watch:
                try:
                    wait_s = spec.timeout_s if timeout_s is None else timeout_s
                    returncode, timed_out = _wait(proc, wait_s, spec, pdir, search=mode == SEARCH), False
                    _kill_leftovers(proc)
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                    returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
                    timed_out = True
                except BaseException:
                    _kill_group(proc)  # Ctrl-C or the driver being stopped: leave no orphan ranks
                    raise
        cgroup_oom = cgroup is not None and cgroup.oom_killed()
        peak = cgroup.peak_bytes() if cgroup is not None and cgroup_oom else None
        started = FORK if isinstance(proc, ForkedLaunch) else EXEC
        return _Run(returncode, timed_out, watch.result, cgroup_oom, peak, started)
    finally:
        if cgroup is not None:
            cgroup.close()


def asked_rank_start() -> str:
    """``SWEEPER_RANK_START`` as asked: ``auto`` (also when unset or empty), ``fork`` or ``exec``.

    Raises:
        ValueError: any other value (the message names the allowed ones).
    """
    asked = os.environ.get(RANK_START_ENV, AUTO) or AUTO
    if asked not in (AUTO, FORK, EXEC):
        raise ValueError(f"{RANK_START_ENV}={asked!r}: expected {AUTO}, {FORK} or {EXEC}")
    return asked


def rank_start(spec: PointSpec) -> str:
    """How ``spec``'s ranks start on this machine: :data:`FORK` (forked from the pre-flight worker, which has torch
    and transformers imported: no import in the ranks) or :data:`EXEC` (fresh processes under torchrun).

    ``SWEEPER_RANK_START`` unset (or ``auto``): fork a CPU point of plain data parallelism (``fsdp=none``,
    ``zero=0``, ``tp=sp=1``), where forked and fresh ranks measured the same timed steps
    (``benchmarks/harness_overhead.py --exec-too``, ``benchmarks/shared_launch.py``); every other point starts
    fresh: FSDP points' timed steps measured 0.81-0.94x as fast forked as fresh with the default 3 warm-up steps
    (1.01-1.08x with 10: the forked ranks' first steps still pay first-touch costs the warm-up did not absorb), and
    ZeRO, TP and SP are not measured yet. ``fork``: fork every CPU point; ``exec``: no point. A CUDA point always
    starts fresh (CUDA cannot be used in a process forked from one that initialised it).

    Raises:
        ValueError: ``SWEEPER_RANK_START`` is none of ``auto``, ``fork``, ``exec``.
    """
    asked = asked_rank_start()
    if asked == EXEC or local_device_type(spec.device) != "cpu":
        return EXEC
    plain = spec.fsdp == "none" and spec.zero == 0 and spec.tp == 1 and spec.sp == 1
    return FORK if asked == FORK or plain else EXEC


def forks(spec: PointSpec) -> bool:
    """:func:`rank_start` is :data:`FORK` (a worker that cannot fork still falls back to :data:`EXEC`)."""
    return rank_start(spec) == FORK


class Ranks(Protocol):
    """What the launcher needs of a started launch: a ``subprocess.Popen`` of torchrun, or a :class:`ForkedLaunch`."""

    pid: int
    args: Any
    returncode: int | None

    def wait(self, timeout: float | None = None) -> int: ...

    def poll(self) -> int | None: ...


class ForkedLaunch:
    """A launch process forked by the pre-flight worker (:func:`sweeper.point.preflight.fork_launch`), with the part
    of ``subprocess.Popen`` the launcher uses: ``pid`` (its session's process group), ``args``, ``wait(timeout)``,
    ``poll()``, ``returncode``. It is the worker's child, not the driver's: its end is seen through a pidfd and its
    exit code read from the status file it writes (none: ended by a signal, reported as -SIGKILL)."""

    def __init__(self, pid: int, pidfd: int, argv: list[str], status_file: Path) -> None:
        self.pid, self.args = pid, argv
        self.returncode: int | None = None
        self._pidfd, self._status_file = pidfd, status_file

    @classmethod
    def start(
        cls, argv: list[str], env: dict[str, str], log: Path, cgroup: CgroupMemoryLimit | None
    ) -> ForkedLaunch | None:
        """Fork ``torchrun <argv>`` (torchrun's own arguments) from the worker, its output appended to ``log``, in
        ``cgroup`` when given; None when the worker cannot (the caller starts torchrun itself)."""
        from sweeper.point.preflight import fork_launch, worker_pid

        parent = worker_pid()
        if parent is None:
            return None
        status = Path(tempfile.mkdtemp(prefix="sweeper-launch-")) / "exit_code"
        request = {
            "argv": argv,
            "env": {**env, DRIVER_PID_ENV: str(parent)},  # the ranks' orphan check: their launcher's parent
            "cwd": os.getcwd(),
            "log": str(log),
            "status_file": str(status),
            "cgroup_procs": str(cgroup.path / "cgroup.procs") if cgroup else None,
        }
        started = fork_launch(request)
        if started is None:
            status.parent.rmdir()
            return None
        return cls(*started, argv, status)

    def poll(self) -> int | None:
        """The exit code once the launch process has ended, else None."""
        if self.returncode is not None or not self._ended(0):
            return self.returncode
        return self._finish()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the launch process to end; its exit code.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` seconds.
        """
        if self.returncode is not None:
            return self.returncode
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._finish()

    def _ended(self, timeout: float | None) -> bool:
        return bool(select.select([self._pidfd], [], [], timeout)[0])

    def _finish(self) -> int:
        try:
            self.returncode = int(self._status_file.read_text())
        except (OSError, ValueError):
            self.returncode = -signal.SIGKILL  # ended by a signal: the driver's kill, or the kernel's OOM killer
        for done in (lambda: os.close(self._pidfd), self._status_file.unlink, self._status_file.parent.rmdir):
            try:
                done()
            except OSError:
                pass
        return self.returncode


def _die_with_parent_fn() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes torchrun die (SIGKILL) when the driver dies, however it dies (even SIGKILL, which
    no handler sees): Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, kept across ``exec``. The ranks set the same on
    themselves (:func:`sweeper.job.rank.main`), so a killed driver leaves no torchrun and no rank behind. A driver
    that died between the fork and the ``prctl`` is caught by comparing the parent pid. None off Linux.

    Only a preloaded C function runs in the child (no import, no allocation of note): safe with the driver's
    threads (progress display, host-memory watch). The signal follows the driver *thread* that started torchrun;
    that thread waits for torchrun in :func:`_run_ranks`, so it never ends first."""
    global _PRCTL
    if not sys.platform.startswith("linux"):
        return None
    if _PRCTL is None:
        try:
            _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            return None
    prctl, parent, sigkill = _PRCTL, os.getpid(), int(signal.SIGKILL)

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if os.getppid() != parent:  # the driver is already gone: do not start an orphan
            os._exit(1)

    return die_with_parent


def _wait(proc: Ranks, wait_s: float | None, spec: PointSpec, pdir: Path, search: bool) -> int:
    """Wait for torchrun to exit, at most ``wait_s`` seconds (None: no limit), telling
    :mod:`sweeper.launchers.progress` where the ranks are every :data:`~sweeper.launchers.progress.POLL_S` s (the
    driver reads the step files; the ranks do nothing for it) and once when they exit. ``search``: a batch-search
    trial launch. Returns torchrun's exit code.

    Raises:
        subprocess.TimeoutExpired: past ``wait_s``.
    """
    start = time.monotonic()
    shown = float("-inf")
    prefetch = not search  # a measured point's ranks leave rank files; a search trial's are read at once anyway
    while True:
        now = time.monotonic()
        if now - shown >= progress.POLL_S:
            progress.ranks_running(spec, pdir, search=search)
            shown = now
        if prefetch and _rank_files_written(pdir, spec.world_size):
            prefetch_imports()
            prefetch = False
        left: float | None = None
        if wait_s is not None:
            left = start + wait_s - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, wait_s)
        poll = PREFETCH_POLL_S if prefetch else progress.POLL_S
        try:
            returncode = proc.wait(timeout=poll if left is None else min(poll, left))
        except subprocess.TimeoutExpired:
            continue
        progress.ranks_running(spec, pdir, search=search, ranks_done=True)
        return returncode


#: Seconds between two looks for the ranks' result files while a point runs (a directory listing).
PREFETCH_POLL_S = 0.1


def _rank_files_written(pdir: Path, world_size: int) -> bool:
    """Every rank of the point has written its rank file (they write it last, then exit)."""
    return sum(1 for _ in pdir.glob("rank*.json")) >= world_size


def _kill_leftovers(proc: Ranks) -> None:
    """SIGKILL whatever is left of the ranks' process group after torchrun exited (a rank torchrun did not reap
    must not outlive its point)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc: Ranks) -> None:
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, n_bytes: int = 6000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
