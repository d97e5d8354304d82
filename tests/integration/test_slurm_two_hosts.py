"""One point across two hosts: the two-host development cluster (``bash slurm/dev-cluster.sh start dev2``).

Two slurmd (``dev2n1``, ``dev2n2``), each in its own network namespace with its own IP on a bridge and its own
hostname (UTS namespace); slurmctld, slurmdbd, MariaDB and munged in the root namespace, on their own ports and
state dir, so this cluster runs beside the single-node one the other SLURM tests use. The module starts it and
stops it afterwards (unless it was already running: a developer's cluster is left as it was). Needs root (network
namespaces) and the single-node cluster (``SLURM_CONF``) for the one-host comparison.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from sweeper.results.sweepdir import SweepDir
from tests.conftest import NEEDS_DEV_SLURM, REPO, SLURM_FEW_STEPS, SweepRun

pytestmark = [
    pytest.mark.slow,
    pytest.mark.slurm,
    NEEDS_DEV_SLURM,
    pytest.mark.skipif(os.geteuid() != 0, reason="the two-host cluster needs root (network namespaces)"),
]

SCRIPT = REPO / "slurm" / "dev-cluster.sh"
NODES = ("dev2n1", "dev2n2")
#: the cheapest point that still has every window: tiny model, no profiler, no trace
FEW_STEPS = SLURM_FEW_STEPS
#: what the two-host point and its one-host twin share: the computation (model, data, strategy, seed) and the steps
SAME = (
    "model",
    "per_device_batch_size",
    "seq_len",
    "precision",
    "fsdp",
    "gc",
    "zero",
    "seed",
    *("warmup_steps", "timed_steps", "memory_steps", "profile_steps", "profile_trace"),
)
TWO_HOSTS = ["launcher=slurm", "cluster=dev2", "nodes=2", "ranks_per_node=1", "launcher.poll_interval_s=1"]


def _script(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dev2() -> str:
    """The two-host cluster's SLURM_CONF (started here; stopped afterwards when this fixture started it)."""
    was_running = _script("status", "dev2").returncode == 0
    started = _script("start", "dev2")
    assert started.returncode == 0, started.stdout + started.stderr
    (conf,) = re.findall(r"^export SLURM_CONF=(\S+)$", started.stdout, re.M)
    yield conf
    if not was_running:
        stopped = _script("stop", "dev2")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _env(slurm_conf: str) -> dict[str, str]:
    env = dict(os.environ, SLURM_CONF=slurm_conf, WANDB_MODE="disabled")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("SWEEPER_SWEEP_ID", None)
    return env


def _sweep(args: list[str], cwd: Path, slurm_conf: str, timeout: float = 300) -> SweepRun:
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", *args],
        cwd=cwd,
        env=_env(slurm_conf),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return SweepRun(proc, cwd)


def _node_addrs(slurm_conf: str) -> dict[str, str]:
    """NodeName -> NodeAddr of the generated slurm.conf."""
    text = Path(slurm_conf).read_text()
    return dict(re.findall(r"^NodeName=(\S+) NodeAddr=(\S+)", text, re.M))


def test_a_two_node_point_is_one_job_whose_ranks_meet_over_the_namespace_network(dev2, slurm_2x2, tmp_path):
    t0 = time.monotonic()
    (tmp_path / "two").mkdir()
    two = _sweep(["-m", *FEW_STEPS, *TWO_HOSTS], tmp_path / "two", dev2)
    assert two.proc.returncode == 0, two.output[-4000:]
    (r,) = two.records()
    assert r.status == "ok", r.reason
    assert r.ran["world_size"] == 2
    (entry,) = json.loads((two.sweep_dir / "submitted.json").read_text()).values()
    assert entry["attempts"] == [r.env["slurm_job_id"]]  # one SLURM job for both ranks
    # each rank on its own host, in rank order; the first host is the rendezvous, at its namespace IP
    assert r.env["hosts"] == list(NODES)
    addrs = _node_addrs(dev2)
    assert r.env["slurm_master_addr"] == addrs["dev2n1"]
    ip = ipaddress.ip_address(r.env["slurm_master_addr"])
    assert ip.is_private and not ip.is_loopback and addrs["dev2n1"] != addrs["dev2n2"]
    row = pd.read_csv(two.sweep_dir / "results.csv").iloc[0]
    assert row["hosts"] == "dev2n1 dev2n2"
    t_two = time.monotonic() - t0

    # the same point on one host of the single-node cluster (nodes=1 ranks_per_node=2, the same steps): the 2x2
    # SLURM sweep's fsdp=none gc=false point (tests/conftest.py); the same losses, a similar throughput
    o = slurm_2x2.by(fsdp="none", gc=False)
    assert o.status == "ok", o.reason
    assert (o.spec["nodes"], o.spec["ranks_per_node"]) == (1, 2)
    assert {k: o.spec[k] for k in SAME} == {k: r.spec[k] for k in SAME}
    assert len(set(o.env["hosts"])) == 1 and len(o.env["hosts"]) == 2
    for key in ("loss_first", "loss_last"):  # fixed seed: DDP on 2 ranks is the same computation wherever they are
        assert r.metrics[key] == pytest.approx(o.metrics[key], rel=1e-5, abs=1e-6), key
    # throughput is only reported, not asserted: on an idle machine the two agree within ~10 %, but both share 2 cores
    # with whatever else runs, and under load the gloo traffic between the namespaces (veth + bridge) has measured
    # 0.036-0.25 of the one-host tokens/s (CI, load average 5-6); timing belongs in benchmarks/, see docs/slurm.md
    assert math.isfinite(r.metrics["tokens_per_s"]) and r.metrics["tokens_per_s"] > 0
    ratio = r.metrics["tokens_per_s"] / o.metrics["tokens_per_s"]
    print(f"two hosts: {t_two:.0f} s, tokens/s two hosts / one host = {ratio:.2f}")


def _first_task_log(sweep_dir: Path, timeout_s: float = 120) -> Path:
    """Wait until rank 1 of the first job (on dev2n2) has started; return its submitit log."""
    deadline = time.monotonic() + timeout_s
    while True:
        for log in sorted(sweep_dir.glob("slurm/*/*_1_log.out")):
            if "Starting with" in log.read_text(errors="replace"):
                return log
        assert time.monotonic() < deadline, "rank 1 of the first job never started"
        time.sleep(0.2)


def _wait_for_record(sweep_dir: Path, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while not list(sweep_dir.glob("points/*/result.json")):
        assert time.monotonic() < deadline, "no record after the node was killed"
        time.sleep(0.5)
    (record,) = SweepDir(sweep_dir).records()
    return record


def test_a_lost_host_ends_only_its_point_naming_the_node_and_a_resume_reruns_only_it(dev2, tmp_path):
    args = ["-m", "gc=true,false", *FEW_STEPS, *TWO_HOSTS]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeper", *args],
        cwd=tmp_path,
        env=_env(dev2),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "multirun").glob("*/submitted.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep submitted nothing"
            time.sleep(0.2)
        (sweep_dir,) = (tmp_path / "multirun").iterdir()
        _first_task_log(sweep_dir)
        t_kill = time.monotonic()
        killed = _script("kill-node", "dev2", "dev2n2")  # every process of dev2n2's namespaces: the host is gone
        assert killed.returncode == 0, killed.stderr
        lost = _wait_for_record(sweep_dir)  # the scheduler notices within SlurmdTimeout (10 s) and ends the job
        t_record = time.monotonic() - t_kill
    finally:
        restarted = _script("start", "dev2")  # the host comes back (ReturnToService=2); the other point then runs
    assert restarted.returncode == 0, restarted.stderr
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]

    assert lost.status == "error" and lost.error_kind == "scheduler", lost.reason
    assert lost.spec["gc"] is True  # the first point of the grid was running when the host died
    assert "dev2n2" in lost.reason and "NODE_FAIL" in lost.reason, lost.reason
    assert lost.failure["slurm_state"] == "NODE_FAIL" and lost.failure["failed_nodes"] == ["dev2n2"]
    by_gc = {r.spec["gc"]: r for r in SweepDir(sweep_dir).records()}
    assert by_gc[False].status == "ok", by_gc[False].reason  # the sweep went on
    assert by_gc[False].env["hosts"] == list(NODES)
    df = pd.read_csv(sweep_dir / "results.csv").set_index("gc")
    assert "dev2n2" in df.loc[True, "reason"]

    resumed = _sweep([*args, f"hydra.sweep.dir={sweep_dir}", "launcher.rerun_statuses=[error]"], tmp_path, dev2)
    assert resumed.proc.returncode == 0, resumed.output[-4000:]
    assert [ln.rsplit(None, 1)[-1] for ln in resumed.output.splitlines() if re.match(r"\[\d/2\]", ln)] == [
        "submit",  # "to submit": the job id exists only after sbatch
        "ok",
    ]
    assert [r.status for r in SweepDir(sweep_dir).records()] == ["ok", "ok"]
    submitted = json.loads((sweep_dir / "submitted.json").read_text())
    assert sorted(len(e["attempts"]) for e in submitted.values()) == [1, 2]  # only the lost point ran again
    assert len(list(sweep_dir.glob("points/*/result.0.json"))) == 1  # its error record is kept
    print(f"NODE_FAIL recorded {t_record:.0f} s after the kill")
