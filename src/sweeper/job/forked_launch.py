"""A point's ranks forked from the pre-flight worker, which has torch and transformers imported already.

A fresh rank spends most of a lone point's start-up importing torch, transformers and accelerate (about 3 s of a
10 s point on 2 cores, ``benchmarks/harness_overhead.py``), after the driver's pre-flight worker has just paid
the same imports to check the point. Here the worker pays them once for the whole sweep: on the driver's request
(:func:`sweeper.point.preflight.fork_launch`) it forks a *launch process* that plays torchrun's part for one node
(:func:`_agent`: ``torch.distributed.run``'s arguments, the rendezvous store torchrun's agent hosts, torchrun's
rank environment, its failure policy and its failure summary in torch's own format), and forks the ranks, which
run the same entry point as a fresh rank (:func:`rank_entry`: ``sweeper.job.harness.main``). torch's elastic agent
itself is not used: with forked ranks (``start_method=fork``) it reports only the first rank it finds failed, and a
rank killed by a signal would go unnamed when its peer's collective failed at the same moment. Each point still
gets processes of its own: a rank's crash, OOM or hang ends only its own launch process tree, and the driver
bounds, watches and kills that tree exactly as it does torchrun's (:mod:`sweeper.launchers.torchrun`). The ranks
stay in the launch process's process group (the driver's kill of the group reaches them at once).

What the launch process does before it forks the ranks, so that a forked rank meets what a fresh one meets:

* its own session (the driver kills the process group), ``PR_SET_PDEATHSIG=SIGKILL`` (it dies with the worker;
  the ranks arm the same against it, :mod:`sweeper.job.orphan`; a worker whose driver is gone, its stdin closed,
  kills the launches it forked, :func:`stop_all`, and exits), and the child cgroup
  the driver made for the point's host-memory limit, joined before any rank exists;
* stdin from ``/dev/null``, stdout and stderr to the point's ``ranks.log``; the worker's pipes closed;
* the working directory and the *whole* environment the driver gives (the worker's own, and whatever the libraries
  exported in it while checking points, is dropped);
* library state the pre-flight's checks leave in the worker reset: accelerate's ``PartialState`` /
  ``AcceleratorState`` / ``GradientState`` singletons (built by ``TrainingArguments`` in a single, non-distributed
  process), transformers' global DeepSpeed config, torch's default dtype.

Process names: the launch process is ``sweeper-launch`` and each rank ``sweeper-rank<r>`` (``ps``, and the driver's
host-memory watch, which cannot read a forked rank's ``RANK`` from its start environment). In each rank,
:func:`rank_entry` sets torch's intra-op threads from ``OMP_NUM_THREADS`` as the agent exported it
(torchrun's default of 1 per rank: OpenMP read the variable when the worker loaded it, so a forked rank must be
told), then runs the harness. Only CPU points are forked: CUDA cannot be used in a process forked from one that
initialised it, so a point on CUDA keeps fresh ranks (the driver decides, :mod:`sweeper.launchers.torchrun`).

Exit status: the launch process writes its exit code (torchrun's: 0, or 1 when a rank failed) to the status file
the driver names, then ends with ``os._exit``; killed by a signal, it writes nothing.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import signal
import sys
import traceback
import uuid
from typing import Any, NoReturn

from sweeper.results.rankfile import LAUNCH_PROCESS_NAME, RANK_PROCESS_NAME

#: Keys of a launch request (from :func:`sweeper.point.preflight.fork_launch`).
REQUEST_KEYS = ("argv", "env", "cwd", "log", "status_file", "cgroup_procs")
_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15  # <linux/prctl.h>


def start(request: dict[str, Any], worker_pipes: tuple[int, ...]) -> int:
    """In the worker: fork the launch process of ``request`` and return its pid at once (the worker goes on
    serving; it reaps the process later, :func:`reap`). ``worker_pipes``: the worker's own request/answer file
    descriptors, closed in the child.

    Raises:
        KeyError: a request without one of :data:`REQUEST_KEYS`.
        OSError: the fork failed.
    """
    missing = [k for k in REQUEST_KEYS if k not in request]
    if missing:
        raise KeyError(f"launch request without {missing}")
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _launch_process(request, parent, worker_pipes)
    _children.add(pid)
    return pid


_children: set[int] = set()


def reap() -> None:
    """Collect the exit status of every launch process that has ended (no zombie outlives the next request)."""
    for pid in list(_children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _children.discard(pid)


def stop_all() -> None:
    """SIGKILL the process group of every launch process still running (the worker's driver is gone)."""
    for pid in _children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def set_process_name(name: str) -> None:
    """This process's name (``/proc/self/comm``: ``ps``, ``top``, psutil's ``name()``; at most 15 bytes), Linux."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _launch_process(request: dict[str, Any], worker: int, worker_pipes: tuple[int, ...]) -> NoReturn:
    code = 1
    try:
        os.setsid()
        set_process_name(LAUNCH_PROCESS_NAME)
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != worker:  # the worker died between the fork and the prctl
                os._exit(1)
        if request["cgroup_procs"]:
            with open(request["cgroup_procs"], "w") as f:
                f.write(str(os.getpid()))
        for fd in worker_pipes:
            try:
                os.close(fd)
            except OSError:
                pass
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["log"], os.O_WRONLY | os.O_APPEND)):
            opened = os.open(path, flags | os.O_CREAT, 0o644) if fd else os.open(path, flags)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
        os.dup2(1, 2)
        sys.stdout = sys.stderr  # the worker's stderr object: fd 2, the log now
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        reset_library_state()
        code = _agent(list(request["argv"]))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - said in the log, the exit code says it failed
        traceback.print_exc()
        code = 1
    try:
        sys.stderr.flush()
        tmp = f"{request['status_file']}.tmp"
        with open(tmp, "w") as f:
            f.write(str(code))
        os.replace(tmp, request["status_file"])
    finally:
        os._exit(code)


def reset_library_state() -> None:
    """Put back what the pre-flight's checks leave behind in the worker's libraries (see the module doc)."""
    import torch

    torch.set_default_dtype(torch.float32)
    try:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    except ImportError:
        pass
    try:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    except ImportError:
        pass


#: Seconds the launch process waits, after a rank's failure, for the other ranks' own exits before it stops them
#: (torchrun's agent looks every ``--monitor-interval``, 0.1 s): a rank killed by a signal and the rank whose next
#: collective fails because of it are both reported, as torchrun reports them.
FAILURE_GRACE_S = 0.5
#: Seconds between SIGTERM and SIGKILL of the ranks left when one failed (torchrun's ``--shutdown-timeout``).
SHUTDOWN_S = 30.0


def _agent(argv: list[str]) -> int:
    """torchrun's part for one node, in this process: ``argv`` is torchrun's (``--standalone --nproc-per-node=N
    --max-restarts=0 -m <module> <args>``, parsed by ``torch.distributed.run`` itself). Hosts the rendezvous store
    (a ``TCPStore`` on a free local port, ``TORCHELASTIC_USE_AGENT_STORE``, as torchrun's agent does), forks the N
    ranks with torchrun's environment (:func:`_rank_env`), and waits for them: when one fails, the others get
    :data:`FAILURE_GRACE_S` to end on their own, then SIGTERM and, after :data:`SHUTDOWN_S`, SIGKILL. The failures
    are printed in torch's own format (``ChildFailedError``: each failed rank's exit code, a negative one the
    signal), the summary the driver reads (:mod:`sweeper.failures.attribution`).

    Returns:
        0 when every rank exited 0, else 1 (as torchrun).

    Raises:
        ValueError: ``argv`` is not that form (no ``-m``, restarts, several nodes).
    """
    import time

    from torch.distributed import TCPStore
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    from torch.distributed.run import parse_args

    args = parse_args(argv)
    if not args.module or args.max_restarts or args.nnodes not in ("1", "1:1"):
        raise ValueError(f"a forked launch runs one node of a module without restarts, not {argv}")
    n = int(args.nproc_per_node)
    if "OMP_NUM_THREADS" not in os.environ and n > 1:
        os.environ["OMP_NUM_THREADS"] = "1"  # torchrun's default for several ranks on a node
    store = TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    run_id = str(uuid.uuid4())
    # the worker's objects (its imports, the points it checked) move to the permanent generation: the ranks' cyclic
    # GC never walks them (a fresh rank has far fewer), and their pages stay shared instead of being copied
    gc.collect()
    gc.freeze()
    ranks: dict[int, int] = {}  # pid -> local rank
    for local in range(n):
        env = _rank_env(local, n, store.port, run_id)
        pid = os.fork()
        if pid == 0:
            _rank_process(env, args.training_script, list(args.training_script_args))
        ranks[pid] = local
    failed: dict[int, ProcessFailure] = {}
    stop_at: float | None = None
    while ranks:
        if stop_at is not None and time.monotonic() >= stop_at:
            break
        pid, status = os.waitpid(-1, os.WNOHANG if stop_at is not None else 0)
        if pid == 0:
            time.sleep(0.02)
            continue
        local = ranks.pop(pid, None)
        code = os.waitstatus_to_exitcode(status)
        if local is not None and code != 0:
            failed[local] = ProcessFailure(local_rank=local, pid=pid, exitcode=code, error_file="")
            stop_at = stop_at or time.monotonic() + FAILURE_GRACE_S
    _stop(ranks)
    del store
    if not failed:
        return 0
    error = ChildFailedError(name=args.training_script, failures=failed)
    print(f"{type(error).__module__}.{type(error).__name__}: \n{error}", file=sys.stderr, flush=True)
    return 1


def _rank_env(local: int, n: int, port: int, run_id: str) -> dict[str, str]:
    """The environment torchrun's agent gives local rank ``local`` of ``n`` on one node (torch's
    ``LocalElasticAgent._start_workers``), the rendezvous store at ``127.0.0.1:port``."""
    return {
        "RANK": str(local),
        "LOCAL_RANK": str(local),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(local),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(n),
        "WORLD_SIZE": str(n),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def _rank_process(env: dict[str, str], module: str, argv: list[str]) -> NoReturn:
    """A forked rank: its environment, :func:`rank_entry`, its exit code (an exception: printed, exit 1)."""
    code = 1
    try:
        os.environ.update(env)
        rank_entry(module, *argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a fresh rank: printed, exit 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _stop(ranks: dict[int, int]) -> None:
    """SIGTERM the ranks still running, SIGKILL those left after :data:`SHUTDOWN_S`, and reap them."""
    import time

    for sig, wait_s in ((signal.SIGTERM, SHUTDOWN_S), (signal.SIGKILL, 5.0)):
        for pid in list(ranks):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait_s
        while ranks and time.monotonic() < end:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                ranks.pop(pid, None)
            else:
                time.sleep(0.02)
        if not ranks:
            return


def rank_entry(module: str, *argv: str) -> None:
    """One forked rank: its process name, torch's intra-op threads from ``OMP_NUM_THREADS``, then
    ``<module>.main(argv)`` (the harness). A non-zero exit code ends the process with it at once (a failed rank, as
    from a fresh one); 0 returns (the caller ends the process without interpreter teardown)."""
    import torch

    set_process_name(RANK_PROCESS_NAME.format(rank=os.environ.get("RANK", "")))  # the driver's RSS watch reads it
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    sys.argv = [module, *argv]
    code = importlib.import_module(module).main(list(argv))
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
