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

from sweeper.grid.spec import PointSpec
from sweeper.point.lifecycle import Prepared, begin, finish, target_for
from sweeper.results.record import Record

LOG_FILE = "ranks.log"
KILL_GRACE_S = 10.0


def run_point(
    spec: PointSpec, overrides: list[str], sweep_dir: Path, sweep_id: str, rerun: frozenset[str] = frozenset()
) -> Record:
    """Run (or refuse) one point on this machine: :func:`sweeper.point.lifecycle.begin`, its ranks under
    torchrun (bounded by ``timeout_s``), then :func:`sweeper.point.lifecycle.finish`.

    Returns:
        The record written (or found). Never raises for a failing point: every outcome is a record.
    """
    prepared = begin(spec, overrides, sweep_dir, sweep_id, target_for(spec, "local"), rerun)
    if isinstance(prepared, Record):
        return prepared
    return run_prepared(prepared)


def run_prepared(prepared: Prepared) -> Record:
    """Start a prepared point's ranks, wait (bounded), and record what they left."""
    pdir = prepared.pdir
    t0 = time.perf_counter()
    returncode, timed_out = _run_ranks(prepared.spec, pdir)
    wall = time.perf_counter() - t0
    ranks = [json.loads(p.read_text()) for p in sorted(pdir.glob("rank*.json"))]
    record = finish(
        prepared,
        ranks,
        returncode=returncode,
        timed_out=timed_out,
        log_tail=_tail(pdir / LOG_FILE),
        wall_time_s=wall,
        artifacts={"log": LOG_FILE},
    )
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
        "sweeper.job.harness",
        str(pdir),
    ]
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[2])
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
