"""The measured collective cost of this host's gloo between local ranks, read torch-free (the probe that measures it is
:mod:`sweeper.job.gloo_probe`).

A ring collective over N ranks (Patarasuk & Yuan 2009; NCCL ``PERFORMANCE.md``'s busbw factors)::

    all-reduce:                  t = 2(N−1) · latency + 2(N−1)/N · S / bandwidth
    all-gather / reduce-scatter: t =  (N−1) · latency +  (N−1)/N · S / bandwidth

with S the full buffer (bytes), ``latency`` seconds per ring step and ``bandwidth`` GB/s (10**9 bytes/s) of ring
traffic per rank (busbw). :func:`fit_ring` fits both on measured (bytes, seconds) pairs of both collectives by least
squares; :func:`cached_comm` reads the probe's cache (``gloo.json`` in the cache directory of the matmul peak:
``$SWEEPER_CACHE_DIR``, else ``$XDG_CACHE_HOME/sweeper``, else ``~/.cache/sweeper``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from sweeper.paths import cache_dir

#: A cached measurement is measured again after this many seconds (7 days, as the matmul peak).
MAX_AGE_S = 7 * 86400
FILE = "gloo.json"


@dataclass(frozen=True)
class HostComm:
    """A collective cost model of one interconnect.

    Attributes:
        latency_s: seconds per ring step (a collective over N ranks takes 2(N−1) steps for an all-reduce,
            N−1 for an all-gather or a reduce-scatter).
        bandwidth_gb_s: ring traffic per rank, GB/s (10**9 bytes/s; NCCL's busbw).
        source: where the numbers come from (measured on which host and when, or the cluster config).
        dtensor_step_s: seconds per parameter tensor that the optimizer step and gradient clipping cost more on
            FSDP2's DTensor parameters than on plain tensors, on this host's CPU ranks (0: not measured, or a GPU,
            where the launches overlap the kernels).
        fsdp_unit_s: seconds per FSDP2 unit and micro-batch that a forward and backward cost more under
            ``fully_shard`` than plain, beyond the unit's modelled collectives (its hooks, copy-in/copy-out and waits
            on CPU ranks; 0 as above).
        zero_tensor_s: seconds per parameter tensor that a DeepSpeed ZeRO-2 step (forward, backward, step) costs
            more than a plain one, beyond its modelled collectives (its gradient hooks, bucket and partition copies
            on CPU ranks: :mod:`sweeper.job.zero_probe`); None where not measured on this host yet (it is measured
            after the host's first ZeRO-1/2 point, whose ranks built DeepSpeed's CPU communication op).
    """

    latency_s: float
    bandwidth_gb_s: float
    source: str
    dtensor_step_s: float = 0.0
    fsdp_unit_s: float = 0.0
    zero_tensor_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the cache entry, a prediction's note)."""
        return {
            "latency_s": self.latency_s,
            "bandwidth_gb_s": self.bandwidth_gb_s,
            "source": self.source,
            "dtensor_step_s": self.dtensor_step_s,
            "fsdp_unit_s": self.fsdp_unit_s,
            "zero_tensor_s": self.zero_tensor_s,
        }


def comm_cache_file() -> Path:
    """The cache of gloo measurements: :func:`cache_dir` / ``gloo.json``."""
    return cache_dir() / FILE


def cpu_model() -> str:
    """The host's CPU model name (``/proc/cpuinfo``'s ``model name``, else :func:`platform.processor`): part of the
    cache keys of the host's measurements (gloo here, the matmul peak in :mod:`sweeper.job.cpu_peak`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def comm_key(world: int) -> str:
    """The cache key of a gloo measurement among ``world`` local ranks: host name, CPU model, CPUs this process may
    run on, torch's installed version (read from the package metadata: no torch import) and the world size."""
    return f"{_host_key()}|{world} ranks"


@functools.cache
def _host_key() -> str:
    """:func:`comm_key` without the world size, read once per process: reading torch's package metadata costs ~2
    ms, and a calibration asks once per record (a frontier search's refits over 1,000 records spent 96 % of their
    time here)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    return "|".join((os.uname().nodename, cpu_model(), f"{cpus} cpus", f"torch {torch_version}"))


def zero_key(world: int) -> str:
    """The cache key of the DeepSpeed ZeRO-2 host cost among ``world`` local ranks (:func:`comm_key` + ``|zero``),
    an entry of its own: it is measured later than gloo's cost, after the host's first ZeRO-1/2 point."""
    return f"{comm_key(world)}|zero"


def cached_comm(world: int, path: Path | None = None, now: float | None = None) -> HostComm | None:
    """The cached gloo cost of ``world`` local ranks on this host, or None (no entry, older than 7 days, corrupt
    file, or written by a probe that did not measure the engines' host costs), with the ZeRO-2 host cost
    (:attr:`HostComm.zero_tensor_s`) when its entry (:func:`zero_key`) is there and younger than 7 days, else
    None in it. Never raises."""
    path = comm_cache_file() if path is None else path
    now = time.time() if now is None else now
    try:
        entries = json.loads(path.read_text())
        entry = entries.get(comm_key(world))
        lat, bw, at = float(entry["latency_s"]), float(entry["bandwidth_gb_s"]), float(entry["measured_at"])
        engines = (float(entry["dtensor_step_s"]), float(entry["fsdp_unit_s"]))
        if lat >= 0 and bw > 0 and 0 <= now - at < MAX_AGE_S:
            link = HostComm(lat, bw, str(entry["source"]), *engines)
            zero = _cached_zero(entries.get(zero_key(world)), now, world, link)
            return dataclasses.replace(link, zero_tensor_s=zero)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    return None


def _cached_zero(entry: Any, now: float, world: int, link: HostComm) -> float | None:
    """:func:`zero_tensor_cost` of a cached ZeRO-2 probe entry under ``link`` (the modelled collectives subtracted
    at the link in force), or None (no entry, malformed, older than 7 days)."""
    try:
        at = float(entry["measured_at"])
        plain, zero2 = float(entry["plain_s"]), float(entry["zero2_s"])
        tensors, tensor_bytes = int(entry["tensors"]), float(entry["tensor_bytes"])
    except (ValueError, TypeError, KeyError):
        return None
    if not (0 <= now - at < MAX_AGE_S) or tensors <= 0:
        return None
    return zero_tensor_cost(plain, zero2, tensors, tensor_bytes, world, link)


def zero_tensor_cost(
    plain_s: float, zero2_s: float, tensors: int, tensor_bytes: float, world: int, link: HostComm
) -> float:
    """DeepSpeed ZeRO-2's host cost per parameter tensor (seconds) from one timed step (forward, backward, optimizer
    step) of ``tensors`` equal Linear weights of ``tensor_bytes`` each under ZeRO-2 (``zero2_s``) and plain
    (``plain_s``, torch's AdamW, no communication): the excess minus the step's collectives as
    :func:`sweeper.capacity.timing.collectives` counts them for ZeRO-2 with one tensor per bucket (an all-reduce
    per tensor, the all-gather of the updated weights, the gradient norm's all-reduce), costed by :func:`ring_time`
    on ``link``; 0 when the collectives explain the whole excess."""
    comm = tensors * ring_time("all_reduce", tensor_bytes, world, link)
    comm += ring_time("all_gather", tensors * tensor_bytes, world, link) + ring_time("all_reduce", 4, world, link)
    return max(0.0, zero2_s - plain_s - comm) / tensors


def fit_ring(world: int, all_reduce: list[list[float]], all_gather: list[list[float]]) -> tuple[float, float]:
    """Fit ``(latency_s, bandwidth_gb_s)`` of the module doc's ring model on measured ``[bytes S, seconds]`` pairs
    of all-reduces and all-gathers among ``world`` ranks: ordinary least squares of ``t = steps·x + wire·y`` (no
    intercept), latency = x, bandwidth = 1 / y / 10**9 B/s. A non-positive fitted term is clamped (latency 0; the
    bandwidth then from the largest buffer alone)."""
    ring = (world - 1) / world
    rows = [(2 * (world - 1), 2 * ring * s, t) for s, t in all_reduce]
    rows += [(world - 1, ring * s, t) for s, t in all_gather]
    saa = sum(a * a for a, _, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    sab = sum(a * b for a, b, _ in rows)
    sat = sum(a * t for a, _, t in rows)
    sbt = sum(b * t for _, b, t in rows)
    det = saa * sbb - sab * sab
    x = (sat * sbb - sbt * sab) / det if det else 0.0
    y = (saa * sbt - sab * sat) / det if det else 0.0
    if x < 0 or y <= 0:
        big = max(rows, key=lambda r: r[1])
        x = max(0.0, x) if y > 0 else 0.0
        y = max((big[2] - x * big[0]) / big[1], 1e-12)
    return x, 1.0 / y / 1e9


def ring_time(kind: str, nbytes: float, world: int, comm: HostComm) -> float:
    """Seconds of one ring collective (``all_reduce``, ``all_gather``, ``reduce_scatter``) of an ``nbytes`` buffer
    among ``world`` ranks under ``comm`` (module doc). 0 for one rank."""
    if world <= 1:
        return 0.0
    ring = (world - 1) / world
    steps, wire = (2 * (world - 1), 2 * ring * nbytes) if kind == "all_reduce" else (world - 1, ring * nbytes)
    return steps * comm.latency_s + wire / (comm.bandwidth_gb_s * 1e9)
