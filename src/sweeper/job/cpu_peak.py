"""The CPU matmul peak that MFU divides by on CPU ranks, measured once per host and reused.

A CPU has no datasheet peak here, so rank 0 of a CPU point measures one (:func:`measure_cpu_peak`:
best ``n x n`` matmul rate over 0.3 s). Measuring it after every point cost 0.3 to 0.4 s of each point's wall time
(``benchmarks/harness_overhead.py``), and gave every point of a sweep a slightly different denominator, so two
points' MFU differed by the noise of two peak measurements as well as by their own. Now the first point on a host
measures it and the result is kept in a small JSON file for :data:`MAX_AGE_S`; the points after it reuse it.

The entry's key is everything that changes the number: host name, CPU model (``/proc/cpuinfo``), CPUs this process
may run on, torch version, torch's intra-op thread count and the dtype. The file is
``$SWEEPER_CACHE_DIR/cpu_peak.json``, else ``$XDG_CACHE_HOME/sweeper/cpu_peak.json``, else
``~/.cache/sweeper/cpu_peak.json``; written atomically (two points writing at once: the last one wins, both entries
are valid). An unreadable or corrupt file is measured over; an unwritable one only means the next point measures
again. The record's ``mfu_peak_source`` says when the peak was measured and that it is reused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from sweeper.capacity.hostcomm import cpu_model
from sweeper.paths import CACHE_ENV, cache_dir
from sweeper.results.atomic import write_json_atomic
from sweeper.results.mfu import Peak

#: A cached peak is measured again after this many seconds (7 days).
MAX_AGE_S = 7 * 86400
__all__ = ["CACHE_ENV", "FILE", "MAX_AGE_S", "cache_file", "cpu_peak", "host_key", "measure_cpu_peak"]
FILE = "cpu_peak.json"


def cache_file() -> Path:
    """The cache file: ``$SWEEPER_CACHE_DIR/cpu_peak.json``, else under ``$XDG_CACHE_HOME/sweeper``, else under
    ``~/.cache/sweeper`` (:func:`sweeper.paths.cache_dir`, shared with the gloo measurement)."""
    return cache_dir() / FILE


def host_key(dtype: str, threads: int) -> str:
    """The cache key of a peak measured in ``dtype`` with ``threads`` intra-op threads on this host and torch."""
    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return "|".join(
        (os.uname().nodename, cpu_model(), f"{cpus} cpus", f"torch {torch.__version__}", f"{threads} threads", dtype)
    )


def cpu_peak(
    dtype: str,
    measure: Callable[[str], Peak] | None = None,
    path: Path | None = None,
    now: float | None = None,
) -> Peak:
    """This host's matmul peak in ``dtype`` (``fp32`` or ``bf16``; FLOP/s): the cached entry when it is younger than
    :data:`MAX_AGE_S`, else measured with ``measure`` (default :func:`measure_cpu_peak`) and
    stored. ``path``: the cache file (default :func:`cache_file`); ``now``: the time (seconds since the epoch).

    Returns:
        A :class:`~sweeper.results.mfu.Peak` whose source reads "measured: <how> on <UTC date>, reused on this
        host for 7 days", the same text for the point that measured it and the points that reuse it.

    Never raises for the cache: a missing, corrupt or unwritable file means measuring (and not storing).
    """
    import torch

    measure = measure or measure_cpu_peak
    path = cache_file() if path is None else path
    now = time.time() if now is None else now
    key = host_key(dtype, torch.get_num_threads())
    try:
        entries = json.loads(path.read_text())
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entry = entries.get(key)
    if isinstance(entry, dict):
        try:
            flops, source, at = float(entry["flops"]), str(entry["source"]), float(entry["measured_at"])
            if 0 < flops and 0 <= now - at < MAX_AGE_S:
                return Peak(flops, source)
        except (KeyError, TypeError, ValueError):
            pass
    fresh = measure(dtype)
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    peak = Peak(fresh.flops, f"{fresh.source} on {day}, reused on this host for {MAX_AGE_S // 86400} days")
    if peak.flops:
        entries[key] = {"flops": peak.flops, "source": peak.source, "measured_at": now}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, entries)
        except OSError:
            pass  # the next point measures again
    return peak


def measure_cpu_peak(dtype: str = "fp32", n: int = 512, seconds: float = 0.3) -> Peak:
    """Measure this process's matmul FLOP/s on the CPU (same thread count as the training ranks).

    Runs an ``n x n`` matmul (2·n³ FLOPs each) repeatedly for about ``seconds`` and takes the best rate.

    Returns:
        A :class:`Peak` labelled "measured: ...". Imports torch.
    """
    import torch

    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, dtype=tdtype)
    b = torch.randn(n, n, dtype=tdtype)
    a @ b  # warm-up
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        a @ b
        dt = time.perf_counter() - t0
        best = max(best, 2 * n**3 / dt)
    threads = torch.get_num_threads()
    return Peak(best, f"measured: {dtype} matmul {n}x{n}, {threads} thread(s), best of {seconds:.1f} s")
