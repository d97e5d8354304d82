"""A rendezvous port that another process holds is the environment's fault, never the point's: ``error`` /
``internal`` with what to do, not a user-looking ``collective`` error.

Real ports, really taken: the test holds a listening socket on a port and gives that port to the ranks. A local
point cannot be sent to it (sweeper's torchrun uses ``--standalone``, whose store takes a free port itself), so:

* the rank path is the one of a SLURM job (:mod:`sweeper.launchers.slurm.in_job` exports ``MASTER_ADDR`` /
  ``MASTER_PORT`` and calls the measured mode; a site's ``MASTER_PORT`` wins): rank 0 of a real 2-rank point
  (``python -m sweeper.job.harness``, the real Trainer) meets the taken port in its process group's rendezvous;
* the launcher path is torchrun's own static rendezvous on the taken port: it fails before any rank starts, so
  the driver has only the ranks' log.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from omegaconf import OmegaConf

from sweeper.failures.attribution import decide_status
from sweeper.results.outcome import summarize_ranks
from sweeper.results.sweepdir import SPEC_FILE
from tests.conftest import REPO
from tests.unit.specs import make_spec

pytestmark = pytest.mark.slow
#: The shipped tiny model (conf/model/tiny.yaml), as the point of ``model=tiny`` has it.
TINY = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "model" / "tiny.yaml"))


@contextmanager
def taken_port() -> Iterator[int]:
    """A port another process listens on (every local address), for the duration of the block."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        held.listen()
        yield held.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "SWEEPER_DRIVER_PID")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), str(REPO), env.get("PYTHONPATH")) if p)
    return {**env, **extra}


def _is_rendezvous_internal(out: dict, port: int) -> None:
    assert (out["status"], out["error_kind"]) == ("error", "internal"), out["reason"]
    assert f"rendezvous could not listen on port {port}" in out["reason"], out["reason"]
    assert "not your configuration" in out["reason"] and "MASTER_PORT" in out["reason"]


def test_a_taken_port_in_the_ranks_rendezvous_is_internal_with_what_to_do(tmp_path):
    spec = make_spec(model=TINY, warmup_steps=1, timed_steps=1, memory_steps=0, profile_steps=0, profile_trace=False)
    assert spec.world_size == 2
    (tmp_path / SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    rank0 = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    with taken_port() as port:
        env = _env(**rank0, MASTER_PORT=str(port))
        cmd = [sys.executable, "-m", "sweeper.job.harness", str(tmp_path)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert data["failure"]["exception_type"] == "DistNetworkError" and "site" not in data["failure"]
    assert data["failure"]["phase"] == "setup"
    # rank 1 never started here: on SLURM it would wait on the port, and rank 0's file is the point's record
    out = summarize_ranks(spec, [data], returncode=1, timed_out=False, log_tail="")
    _is_rendezvous_internal(out, port)
    assert out["failure"]["rank"] == 0


def test_a_taken_port_in_torchruns_own_rendezvous_is_internal_from_the_ranks_log(tmp_path):
    spec = make_spec(model=TINY)
    with taken_port() as port:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2"]
        cmd += ["--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=0"]
        cmd += ["-m", "sweeper.job.harness", str(tmp_path)]
        proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "EADDRINUSE" in log, log[-3000:]
    assert not list(tmp_path.glob("rank*.json"))  # no rank ever started
    out = decide_status(spec, [], returncode=proc.returncode, timed_out=False, log_tail=log[-6000:])
    _is_rendezvous_internal(out, port)
    assert out["failure"]["ranks_missing"] == [0, 1]
