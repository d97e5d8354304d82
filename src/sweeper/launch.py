"""Run one grid point: refuse it, or start its ranks, wait (bounded), and turn what they wrote into a record.

The driver side of a job. It never imports torch: the ranks run in their own processes (``torchrun`` locally),
so a rank that crashes, hangs or runs out of memory cannot take the sweep with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweeper import failures
from sweeper.envinfo import environment, library_versions
from sweeper.hardware import local_device_type, unsupported_reason
from sweeper.measure_summary import summarize_ranks
from sweeper.record import (
    RESULT_FILE,
    Record,
    existing_final_status,
    point_dir,
    read_record,
    write_json_atomic,
    write_record,
)
from sweeper.spec import InvalidPoint, PointSpec, point_id, replay_command, validate

LOG_FILE = "ranks.log"
KILL_GRACE_S = 10.0


def run_point(
    spec: PointSpec, overrides: list[str], sweep_dir: Path, sweep_id: str, rerun: frozenset[str] = frozenset()
) -> Record:
    """Run (or refuse) one point and write its record to ``<sweep_dir>/points/<point_id>/result.json``.

    A point that already has a final record is not run again; its record is returned (resume), unless its status
    is in ``rerun`` (``launcher.rerun_statuses``): then the old record is kept as ``result.<n>.json`` and it runs.

    Returns:
        The record written (or found). Never raises for a failing point: every outcome is a record.
    """
    pid = point_id(spec)
    pdir = point_dir(sweep_dir, pid)
    if existing_final_status(sweep_dir, pid, rerun):
        return read_record(pdir / RESULT_FILE)
    base = dict(
        sweep_id=sweep_id,
        point_id=pid,
        overrides=list(overrides),
        spec=spec.to_dict(),
        replay=replay_command(overrides),
        env=environment(),
    )
    try:
        validate(spec)
        if spec.nodes > 1:
            raise InvalidPoint(
                f"nodes={spec.nodes} needs a cluster launcher; the local launcher runs one node (nodes=1)",
                ("nodes",),
            )
    except InvalidPoint as e:
        return _write(sweep_dir, Record(status="invalid", reason=str(e), failure={"keys": list(e.keys)}, **base))
    device = local_device_type(spec.device)
    why = unsupported_reason(spec, device)
    if why:
        return _write(sweep_dir, Record(status="unsupported", reason=why, **base))
    incompatible = failures.known_incompatible(spec.to_dict(), library_versions())
    if incompatible:
        return _write(sweep_dir, Record(status="invalid", error_kind="incompatible", reason=incompatible, **base))

    pdir.mkdir(parents=True, exist_ok=True)
    for stale in pdir.glob("rank*.json"):
        stale.unlink()  # left by an interrupted earlier attempt of this same point
    write_json_atomic(pdir / "spec.json", spec.to_dict())
    t0 = time.perf_counter()
    returncode, timed_out = _run_ranks(spec, pdir)
    wall = time.perf_counter() - t0
    ranks = [json.loads(p.read_text()) for p in sorted(pdir.glob("rank*.json"))]
    log_tail = _tail(pdir / LOG_FILE)
    outcome = summarize_ranks(spec, ranks, returncode=returncode, timed_out=timed_out, log_tail=log_tail)
    if ranks and ranks[0].get("device_name"):
        base["env"]["device_name"] = ranks[0]["device_name"]
    base["env"]["device_type"] = device
    record = Record(**base, **outcome, wall_time_s=wall)
    record.artifacts["log"] = LOG_FILE
    return _write(sweep_dir, record)


def _write(sweep_dir: Path, record: Record) -> Record:
    write_record(sweep_dir, record)
    return record


def _run_ranks(spec: PointSpec, pdir: Path) -> tuple[int, bool]:
    """Start ``ranks_per_node`` ranks with torchrun (c10d rendezvous on a free port), wait at most
    ``spec.timeout_s`` seconds, then stop the whole process group (SIGTERM, then SIGKILL after 10 s).

    Returns:
        (torchrun's exit code, whether the point ran past its timeout).
    """
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={spec.ranks_per_node}",
        "--max-restarts=0",
        "-m",
        "sweeper.harness",
        str(pdir),
    ]
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    with open(pdir / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return proc.wait(timeout=spec.timeout_s), False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return proc.returncode if proc.returncode is not None else -signal.SIGKILL, True
        except BaseException:
            _kill_group(proc)  # Ctrl-C or the driver being stopped: leave no orphan ranks
            raise


def _kill_group(proc: subprocess.Popen) -> None:
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
