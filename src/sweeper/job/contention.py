"""The CPU contention readings of a rank's timed window (:class:`sweeper.job.timing.StepTimer`; docs/measurement.md,
"Contention"): Linux schedstat of every thread of this process (time on a CPU, time waiting on a run queue) and the
host's ``/proc/stat`` steal (time the hypervisor took from its virtual CPUs). No torch; every reader returns None
where its source cannot be read, never raises.
"""

from __future__ import annotations

import os

#: Where Linux lists the threads of this process; each has a ``schedstat`` file (:func:`read_schedstat`).
TASK_DIR = "/proc/self/task"


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """(time on a CPU, time waiting on a run queue), both nanoseconds, from one line of a Linux ``schedstat`` file
    (``/proc/<pid>/task/<tid>/schedstat``), or None when the text is not three non-negative integers.

    The three fields are: time spent on the CPU (ns), time spent waiting on a run queue (ns), and the number of
    timeslices run on this CPU (the kernel's ``Documentation/scheduler/sched-stats.rst``, "/proc/<pid>/schedstat").
    The wait is time the thread was runnable but another task held the CPU; time asleep (I/O, a lock, a collective
    waiting for another rank) is not in either field.
    """
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):  # isdigit: no sign, no decimal point
        return None
    return int(fields[0]), int(fields[1])


def read_schedstat(task_dir: str = TASK_DIR) -> dict[int, tuple[int, int]] | None:
    """Thread id -> (on-CPU ns, run-queue wait ns) for every thread of this process now (:func:`parse_schedstat`).

    A thread that exits between the directory listing and its read is left out. None when the counters cannot be
    read: not Linux, no ``schedstat`` files (a kernel without ``CONFIG_SCHED_INFO``), a line that does not parse,
    or every counter 0 (the kernel writes ``0 0 0`` when scheduler statistics are off, and this thread has run).
    Never raises. Cost: one small file read per thread, about 25 us each (median on the loaded 2-core development
    machine: 0.06 ms with 2 threads, 1 ms with 38), so it is called only outside a timed step's clock.
    """
    try:
        tids = [int(t) for t in os.listdir(task_dir) if t.isdigit()]
    except OSError:
        return None
    out: dict[int, tuple[int, int]] = {}
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/schedstat", encoding="ascii") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited meanwhile
        except (OSError, UnicodeDecodeError):
            return None
        parsed = parse_schedstat(text)
        if parsed is None:
            return None
        out[tid] = parsed
    if not out or not any(cpu or wait for cpu, wait in out.values()):
        return None
    return out


def read_steal() -> tuple[float, int] | None:
    """(stolen CPU seconds summed over every CPU since boot, number of CPUs) now, through psutil
    (``psutil.cpu_times().steal``: the ``steal`` value of ``/proc/stat``'s ``cpu`` line, ``proc(5)``; Linux only).
    Steal is the time a virtual CPU was ready but the hypervisor ran something else: neither schedstat's on-CPU
    time nor its run-queue wait contains it. None where psutil reports no steal (not Linux) or cannot read it."""
    import psutil

    try:
        steal = getattr(psutil.cpu_times(), "steal", None)
        cpus = psutil.cpu_count()
    except (OSError, RuntimeError):
        return None
    return (float(steal), int(cpus)) if steal is not None and cpus else None


def schedstat_delta(start: dict[int, tuple[int, int]], end: dict[int, tuple[int, int]]) -> tuple[float, float]:
    """(on-CPU seconds, run-queue wait seconds) the threads of this process spent between two
    :func:`read_schedstat` readings, summed over threads.

    Per thread id: ``end - start`` for a thread present at both readings; a thread that started in between counts
    its whole ``end`` reading (all of its life lies in between); a thread that exited in between is not counted
    (its last counters cannot be read after it exits), so the sums can fall short when threads exit, never
    exceed. A counter lower at the end than at the start (a thread id reused by a new thread) counts as a new
    thread.
    """
    cpu_ns = wait_ns = 0
    for tid, (cpu1, wait1) in end.items():
        cpu0, wait0 = start.get(tid, (0, 0))
        if cpu1 < cpu0 or wait1 < wait0:
            cpu0 = wait0 = 0
        cpu_ns += cpu1 - cpu0
        wait_ns += wait1 - wait0
    return cpu_ns / 1e9, wait_ns / 1e9
