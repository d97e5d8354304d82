"""This host's gloo collective cost between local ranks, measured once and cached like the matmul peak.

The time model (:mod:`sweeper.capacity.timing`) costs a ring collective on N ranks as::

    all-reduce:                  t = 2(N−1) · latency + 2(N−1)/N · S / bandwidth
    all-gather / reduce-scatter: t =  (N−1) · latency +  (N−1)/N · S / bandwidth

(S = the full buffer in bytes; Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms"; NCCL's
``PERFORMANCE.md`` defines the same busbw factors). A CPU cluster has no datasheet for gloo over loopback, so
:func:`measure_gloo` starts ``world`` fresh processes (``python -m sweeper.job.gloo_probe``, one intra-op thread
each, as torchrun gives the ranks), times ``all_reduce`` and ``all_gather_into_tensor`` of fp32 buffers of a few
sizes (4 KiB to 4 MiB), each call issued after a slice of compute (:func:`_compute_slice`) as in training, so that
the ranks arrive out of step and the time includes waiting for the later one (on a CPU host shared with other work,
that wait, not the wire, dominates: 0.3 ms for a 4 KiB all-reduce issued right after a barrier, 2 to 4 ms on average
after compute at a load average of 9 on 2 cores); the mean of the repeats (the expected cost, waits included), and
fits ``latency`` (seconds per ring step) and
``bandwidth`` (GB/s = 10**9 bytes/s of ring traffic, busbw) by least squares on ``t = steps·latency + wire/bw``.

The same processes time two engine costs the collectives do not explain (:func:`sweeper.capacity.timing.engine_host_s`):
the optimizer step on FSDP2's DTensor parameters against plain ones (per parameter tensor), and a forward and
backward of 8 ``fully_shard`` Linear units against plain ones, minus the units' modelled gathers and reduce-scatters
(per unit and micro-batch).

Cache: ``gloo.json`` beside ``cpu_peak.json`` (:func:`sweeper.job.cpu_peak.cache_file`'s directory, so
``SWEEPER_CACHE_DIR`` moves both), one entry per :func:`sweeper.capacity.hostcomm.comm_key` (host, CPU model, CPUs,
torch version, world size), measured again after 7 days. The reader is torch-free
(:func:`sweeper.capacity.hostcomm.cached_comm`): the driver reads it when it predicts a finished CPU point.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sweeper.capacity.hostcomm import HostComm, cached_comm, comm_cache_file, comm_key, fit_ring, ring_time
from sweeper.results.atomic import write_json_atomic

#: The environment torchrun gives a rank (torch/distributed/run.py, elastic agent), kept from the probe processes.
TORCHRUN_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
)
TORCHRUN_PREFIXES = ("TORCHELASTIC_", "TORCH_ELASTIC_")
#: After a failed probe, points on this host do not try again for this many seconds (1 hour).
RETRY_AFTER_S = 3600
#: Buffer sizes timed, bytes (fp32 elements × 4).
SIZES = (4096, 65536, 1 << 20, 4 << 20)


def _time_collectives(rank: int, world: int, port: int, out: Path | None, reps: int) -> None:
    """One probe rank: join a gloo group on ``127.0.0.1:port`` and time each collective and size; rank 0 writes
    ``{"all_reduce": [[bytes, seconds], ...], "all_gather": [...]}`` (median seconds per call) to ``out``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        result: dict[str, list[list[float]]] = {"all_reduce": [], "all_gather": []}
        w = torch.randn(64, 64)
        for size in SIZES:
            numel = size // 4
            buf = torch.ones(numel)
            shard = torch.ones(numel // world)
            gathered = torch.empty(numel // world * world)
            for op in ("all_reduce", "all_gather"):
                times = []
                for i in range(reps + 3):
                    _compute_slice(w)  # as in training: the collective follows compute, the ranks not in step
                    t0 = time.perf_counter()
                    if op == "all_reduce":
                        dist.all_reduce(buf)
                    else:
                        dist.all_gather_into_tensor(gathered, shard)
                    if i >= 3:  # warm-up calls dropped
                        times.append(time.perf_counter() - t0)
                t = torch.tensor([statistics.fmean(times)])
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
                result[op].append([float(size), float(t.item())])
        result["dtensor_step_s"] = [[_dtensor_step_cost(world), 0.0]]
        result["fsdp_units"] = [list(_fsdp_unit_times(world))]
        if rank == 0 and out is not None:
            out.write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _dtensor_step_cost(world: int, tensors: int = 16, reps: int = 12) -> float:
    """Seconds per parameter tensor that ``clip_grad_norm_`` + ``AdamW.step`` (HF Trainer's defaults) cost more
    on FSDP2's DTensor parameters (sharded on dim 0 over ``world`` ranks) than on plain tensors of the same shape:
    DTensor's Python dispatch of every elementwise op, and the norm's all-reduce (median of ``reps`` steps)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    costs = []
    for wrap in (lambda t: t, lambda t: distribute_tensor(t, mesh, [Shard(0)])):
        params = [torch.nn.Parameter(wrap(torch.randn(64 * world, 64))) for _ in range(tensors)]
        for q in params:
            q.grad = wrap(torch.randn(64 * world, 64))
        opt = torch.optim.AdamW(params)
        times = []
        for i in range(reps + 2):
            t0 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        costs.append(statistics.median(times))
    return max(0.0, costs[1] - costs[0]) / tensors


#: The probe's engine model: ``PROBE_BLOCKS`` blocks of one ``PROBE_WIDTH``-square Linear (no bias) + tanh.
PROBE_BLOCKS, PROBE_WIDTH, PROBE_BATCH = 8, 64, 16


def _blocks() -> Any:
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(PROBE_BLOCKS):
        layers += [torch.nn.Linear(PROBE_WIDTH, PROBE_WIDTH, bias=False), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def _median_s(fn: Any, reps: int) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls after two warm-up calls, the slowest rank's (a MAX
    all-reduce: a step ends when its slowest rank does)."""
    import torch
    import torch.distributed as dist

    times = []
    for i in range(reps + 2):
        t0 = time.perf_counter()
        fn()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _fsdp_unit_times(world: int, reps: int = 12) -> tuple[float, float, float, float]:
    """``(plain s, FSDP2 s, units, bytes per unit)``: a forward and backward of :func:`_blocks` as plain modules and
    with ``fully_shard`` on every Linear and on the root (reshard after forward, as ``full_shard``), the medians
    (:func:`_median_s`). The driver subtracts the collectives it models (:func:`measure_gloo`)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    x = torch.randn(PROBE_BATCH, PROBE_WIDTH)
    plain = _blocks()
    t_plain = _median_s(lambda: plain(x).sum().backward(), reps)
    sharded = _blocks()
    mesh = init_device_mesh("cpu", (world,))
    for m in sharded:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    t_fsdp = _median_s(lambda: sharded(x).sum().backward(), reps)
    return t_plain, t_fsdp, float(PROBE_BLOCKS), float(PROBE_WIDTH * PROBE_WIDTH * 4)


def _compute_slice(w: Any) -> None:
    """About a millisecond of matmuls (256×64 by 64×64, 20 times): the work a rank does between two collectives."""
    import torch

    x = torch.ones(256, 64)
    for _ in range(20):
        x = torch.tanh(x @ w)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fsdp_unit_cost(plain_s: float, fsdp_s: float, units: int, unit_bytes: float, world: int, link: HostComm) -> float:
    """FSDP2's host cost per unit and micro-batch (seconds) from one timed forward+backward of ``units``
    ``fully_shard`` units (``fsdp_s``) and of the same plain modules (``plain_s``): the excess minus the units'
    modelled collectives (per unit an all-gather in forward and again in backward, resharded, and a reduce-scatter of
    ``unit_bytes``: :func:`sweeper.capacity.timing.ring_time` on ``link``), per unit; 0 when the collectives explain
    the whole excess (a loaded host measures a higher latency, which can absorb it)."""
    comm = units * (
        2 * ring_time("all_gather", unit_bytes, world, link) + ring_time("reduce_scatter", unit_bytes, world, link)
    )
    return max(0.0, fsdp_s - plain_s - comm) / units


#: A failed probe is tried once more on a fresh port before it is recorded as failed (:data:`RETRY_AFTER_S`): a
#: port :func:`_free_port` found free can be taken before rank 0 listens on it, and one rank's crash on a loaded host
#: should not leave the host without a link model for an hour.
ATTEMPTS = 2


def measure_gloo(world: int = 2, reps: int = 20, timeout_s: float = 90.0) -> HostComm:
    """Measure gloo's all-reduce and all-gather cost between ``world`` fresh local processes (see the module doc),
    in up to :data:`ATTEMPTS` tries, each on a port of its own.

    Returns:
        The fitted :class:`~sweeper.capacity.hostcomm.HostComm`, its source saying what was measured.

    Raises:
        RuntimeError: every try failed (a probe process exited non-zero, timed out after ``timeout_s`` seconds, or
            wrote no result); the message gives each try's failing ranks and the end of their stderr.
    """
    failures = []
    for _ in range(ATTEMPTS):
        try:
            times = _probe_times(world, reps, timeout_s)
            break
        except RuntimeError as e:
            failures.append(str(e))
    else:
        raise RuntimeError(f"gloo probe failed in {ATTEMPTS} tries: " + "; ".join(failures))
    lat, bw = fit_ring(world, times["all_reduce"], times["all_gather"])
    dtensor = float(times["dtensor_step_s"][0][0])
    link = HostComm(lat, bw, "")
    plain, fsdp, units, unit_bytes = times["fsdp_units"][0]
    fsdp_unit = fsdp_unit_cost(plain, fsdp, int(units), unit_bytes, world, link)
    sizes = f"{SIZES[0] // 1024} KiB-{SIZES[-1] >> 20} MiB"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return HostComm(
        lat,
        bw,
        dtensor_step_s=dtensor,
        fsdp_unit_s=fsdp_unit,
        source=f"measured: gloo all_reduce/all_gather after compute, {world} local ranks, {sizes}, mean of {reps}, "
        f"load average {load:.1f}",
    )


#: Lines of a failed probe rank's stderr kept in the error (the Python exception sits above the C++ runtime's last
#: words, such as "terminate called without an active exception" from a gloo thread at exit).
STDERR_LINES = 4


def _stderr_tail(err: bytes) -> str:
    lines = [ln.strip() for ln in err.decode(errors="replace").splitlines() if ln.strip()]
    return " | ".join(lines[-STDERR_LINES:])


def _probe_times(world: int, reps: int, timeout_s: float, module: str = "sweeper.job.gloo_probe") -> dict[str, Any]:
    """One try of :func:`measure_gloo` (or of another probe ``module`` with the same command line,
    :mod:`sweeper.job.zero_probe`): start the ``world`` probe ranks on a fresh port and return rank 0's timings.
    When a rank fails, the others are stopped at once (they would wait for it until ``timeout_s``).

    Raises:
        RuntimeError: a rank exited non-zero or the try ran past ``timeout_s`` seconds (each failing rank with the
            end of its stderr), or rank 0 wrote no result.
    """
    port = _free_port()
    # not torchrun's variables: under a rank they would point the probe's init_process_group at the job's store
    env = {k: v for k, v in os.environ.items() if not k.startswith(TORCHRUN_PREFIXES) and k not in TORCHRUN_VARS}
    env["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory(prefix="sweeper_gloo_") as tmp:
        out = Path(tmp) / "times.json"
        cmd = [sys.executable, "-m", module, "--world", str(world), "--port", str(port)]
        errs = [Path(tmp) / f"rank{r}.err" for r in range(world)]
        procs = []
        for r in range(world):
            with errs[r].open("wb") as err_file:
                procs.append(
                    subprocess.Popen(
                        [*cmd, "--rank", str(r), "--reps", str(reps), *(["--out", str(out)] if r == 0 else [])],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err_file,
                    )
                )
        deadline = time.monotonic() + timeout_s
        timed_out, killed = False, set()
        while any(p.poll() is None for p in procs):
            timed_out = time.monotonic() > deadline
            if timed_out or any(p.returncode for p in procs):
                killed = {r for r, p in enumerate(procs) if p.poll() is None}
                for r in killed:
                    procs[r].kill()
                for p in procs:
                    p.wait()
                break
            time.sleep(0.05)
        errors = []
        for r, p in enumerate(procs):
            if r in killed:
                why = f"timed out after {timeout_s:.0f} s" if timed_out else "stopped: another rank failed"
            elif p.returncode:
                why = f"exit {p.returncode}"
            else:
                continue
            errors.append(f"rank {r} {why} (port {port}): {_stderr_tail(errs[r].read_bytes()) or 'no stderr'}")
        if errors or not out.exists():
            raise RuntimeError("; ".join(errors) or f"rank 0 wrote no result (port {port})")
        times: dict[str, Any] = json.loads(out.read_text())
    return times


def host_comm(world: int, path: Path | None = None, now: float | None = None) -> HostComm | None:
    """This host's gloo cost for ``world`` local ranks: the cached entry when younger than 7 days, else measured
    (:func:`measure_gloo`) and stored. None for one rank (no collective), or when the probe fails (the prediction
    then says communication is not modelled). Never raises."""
    if world <= 1:
        return None
    path = comm_cache_file() if path is None else path
    now = time.time() if now is None else now
    hit = cached_comm(world, path, now)
    if hit is not None:
        return hit
    entries = _entries(path)
    failed = entries.get(f"{comm_key(world)}|failed")
    if isinstance(failed, dict) and 0 <= now - float(failed.get("at", 0)) < RETRY_AFTER_S:
        return None  # a probe failed here recently: not again for every point
    try:
        fresh = measure_gloo(world)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        entries[f"{comm_key(world)}|failed"] = {"at": now, "error": str(e)[:2000]}
        _store(path, entries)
        return None
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    comm = dataclasses.replace(fresh, source=f"{fresh.source} on {day}, reused for 7 days")
    entries.pop(f"{comm_key(world)}|failed", None)
    entries[comm_key(world)] = {**comm.to_dict(), "measured_at": now}
    _store(path, entries)
    return comm


def _entries(path: Path) -> dict:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _store(path: Path, entries: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, entries)
    except OSError:
        pass  # measured again next time


def run_rank(argv: list[str] | None, rank_fn: Any) -> int:
    """One probe rank from the command line :func:`_probe_times` gives every probe module (``--rank R --world N
    --port P [--reps K] [--out FILE]``): ``rank_fn(rank, world, port, out, reps)``. Returns the exit status, 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rank_fn(a.rank, a.world, a.port, a.out, a.reps)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m sweeper.job.gloo_probe --rank R --world N --port P [--out FILE]``: one probe rank (internal)."""
    return run_rank(argv, _time_collectives)


if __name__ == "__main__":
    sys.exit(main())
