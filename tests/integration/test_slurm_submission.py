"""Submission that tells the truth, on the real development SLURM cluster (issue 20, docs/slurm.md#submission):
arrays split at the site's ``MaxArraySize``, an ``sbatch`` refusal recorded per point without a traceback, a point
the partition can never run refused before ``sbatch``, a job SLURM keeps pending for a reason that cannot resolve
ended with that reason, and a waiting job's reason shown while the wait has a stated end.

Where SLURM itself cannot be made to do it here, a stand-in on ``PATH`` does only that part, printing exactly what
SLURM prints, and passes everything else to the real command: ``scontrol show config`` answering a smaller
``MaxArraySize`` (the dev cluster's is 10001) with the real ``sbatch`` wrapper refusing larger arrays in SLURM's
words, ``sbatch`` refusing a resource shape, and a site whose ``scontrol show partition`` is not allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sweeper.results.sweepdir import SweepDir
from tests.conftest import NEEDS_DEV_SLURM, REPO, SLURM_FEW_STEPS, run_sweeper

pytestmark = [pytest.mark.slow, pytest.mark.slurm, NEEDS_DEV_SLURM]

SLURM = ["launcher=slurm", "cluster=dev", "launcher.poll_interval_s=1", *SLURM_FEW_STEPS]


def _shim(folder: Path, name: str, body: str) -> None:
    """A stand-in ``name`` on PATH: ``body`` (bash) runs first; ``$REAL`` is the real command."""
    real = shutil.which(name)
    assert real, name
    path = folder / name
    path.write_text(f'#!/bin/bash\nREAL={real}\n{body}\nexec "$REAL" "$@"\n')
    path.chmod(0o755)


@pytest.fixture
def shims(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.fixture
def short_partition():
    """A real partition ``sweeper-short`` on the dev cluster's node, ``MaxTime=1`` (minute), removed after."""
    name = "sweeper-short"
    subprocess.run(["scontrol", "delete", f"PartitionName={name}"], capture_output=True)
    subprocess.run(
        [
            "scontrol",
            "create",
            f"PartitionName={name}",
            f"Nodes={socket.gethostname().split('.')[0]}",
            "MaxTime=1",
            "State=UP",
        ],
        check=True,
    )
    yield name
    subprocess.run(["scontrol", "delete", f"PartitionName={name}"], capture_output=True)


def _status(sweep_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "sweeper.status", str(sweep_dir)], capture_output=True, text=True, env=env
    )


def test_arrays_split_at_max_array_size_and_a_refused_array_is_recorded_per_point(tmp_path, shims):
    _shim(
        shims,
        "scontrol",
        '[ "$1 $2" = "show config" ] && { "$REAL" "$@" | sed "s/^MaxArraySize .*/MaxArraySize            = 2/"; exit ${PIPESTATUS[0]}; }',
    )
    # sbatch as a site with MaxArraySize=2 (indices 0..1) answers a larger array, and a node shape it cannot give
    _shim(
        shims,
        "sbatch",
        'script="${@: -1}"\n'
        'n=$(sed -n "s/^#SBATCH --array=0-\\([0-9]*\\).*/\\1/p" "$script")\n'
        'if [ -n "$n" ] && [ "$n" -gt 1 ]; then echo "sbatch: error: Batch job submission failed: Invalid job array '
        'specification" >&2; exit 1; fi\n'
        'if grep -q -- "^#SBATCH --ntasks-per-node=2" "$script"; then echo "sbatch: error: Batch job submission '
        'failed: Requested node configuration is not available" >&2; exit 1; fi',
    )
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper(["-m", "ranks_per_node=1,2", "seed=0,1,2", *SLURM, f"hydra.sweep.dir={sweep_dir}"], tmp_path)
    assert run.proc.returncode == 3, run.output[-3000:]  # incomplete: a submission was refused
    assert "Traceback" not in run.output, run.output[-3000:]
    # the refused group was split too (2 + 1): each array refused, each said once
    assert "sbatch refused an array of 2 point(s)" in run.proc.stderr and "ranks_per_node" in run.proc.stderr
    assert "sbatch refused an array of 1 point(s)" in run.proc.stderr
    records = SweepDir(sweep_dir).records()
    assert len(records) == 6
    ran = [r for r in records if r.spec["ranks_per_node"] == 1]
    refused = [r for r in records if r.spec["ranks_per_node"] == 2]
    assert [r.status for r in ran] == ["ok"] * 3, [r.reason for r in ran]
    submitted = json.loads((sweep_dir / "submitted.json").read_text())
    assert len(submitted) == 3 and len({e["job_id"].split("_")[0] for e in submitted.values()}) == 2  # 2 + 1
    for r in refused:
        assert (r.status, r.error_kind) == ("error", "scheduler"), r.reason
        assert "Requested node configuration is not available" in r.reason and "no job exists" in r.reason
        assert r.point_id not in submitted
    df = pd.read_csv(sweep_dir / "results.csv")
    assert (df["status"] != "pending").all()
    assert (sweep_dir / "report.md").exists()
    status = _status(sweep_dir)
    assert status.returncode == 0 and "pending" not in status.stdout, status.stdout  # no job: nothing waits


def test_an_array_the_site_refuses_as_too_large_is_halved_until_it_is_accepted(tmp_path, shims):
    """docs/cases.md#u19: the site's sbatch refuses an array index >= 2 while scontrol says MaxArraySize=10001 (or
    cannot be read): the array of 3 is submitted again as 2 + 1, and no point is refused."""
    _shim(
        shims,
        "sbatch",
        'script="${@: -1}"\n'
        'n=$(sed -n "s/^#SBATCH --array=0-\\([0-9]*\\).*/\\1/p" "$script")\n'
        'if [ -n "$n" ] && [ "$n" -ge 2 ]; then echo "sbatch: error: Batch job submission failed: Invalid job array '
        'specification" >&2; exit 1; fi',
    )
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper(
        ["-m", "seed=0,1,2", *SLURM, "launcher.wait=false", f"hydra.sweep.dir={sweep_dir}"], tmp_path, timeout=300
    )
    submitted = json.loads((sweep_dir / "submitted.json").read_text())
    try:
        assert run.proc.returncode == 0, run.output[-3000:]
        assert "an array of 3 is too large here; trying 2" in run.output
        assert len(submitted) == 3 and len({e["job_id"].split("_")[0] for e in submitted.values()}) == 2
        assert SweepDir(sweep_dir).records() == []  # nothing refused, nothing final yet
    finally:
        for e in submitted.values():
            subprocess.run(["scancel", e["job_id"]], capture_output=True)


def test_a_point_the_partition_can_never_run_is_refused_before_sbatch(tmp_path, short_partition):
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper(
        [
            "-m",
            *SLURM,
            f"cluster.partition={short_partition}",
            "cluster.time_limit_min=5",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    (r,) = SweepDir(sweep_dir).records()
    assert (r.status, r.failure["rule"]) == ("invalid", "S01"), r.reason
    assert r.failure["keys"] == ["cluster.time_limit_min", "cluster.partition"]
    assert "MaxTime of 1 min" in r.reason and "5 min" in r.reason
    assert not (sweep_dir / "submitted.json").exists()  # nothing was sent to SLURM


def test_a_job_slurm_can_never_start_ends_the_wait_with_its_reason(tmp_path, shims, short_partition):
    # a site that does not let users read its partitions: the limit is found only by the scheduler
    _shim(
        shims,
        "scontrol",
        'if [ "$1 $2 $3" = "-o show partition" ]; then echo "slurm_load_partitions: Access/permission denied" >&2; '
        "exit 1; fi",
    )
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper(
        [
            "-m",
            *SLURM,
            f"cluster.partition={short_partition}",
            "cluster.time_limit_min=5",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
        timeout=300,
    )
    assert run.proc.returncode == 0, run.output[-3000:]
    assert "site limits not read" in run.output
    (r,) = SweepDir(sweep_dir).records()
    assert (r.status, r.error_kind) == ("error", "scheduler"), r.reason
    assert "PartitionTimeLimit" in r.reason and "cluster.time_limit_min" in r.reason
    assert "cancelled the job" in r.reason
    job = r.failure["slurm_job_id"]
    state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    assert state in ("", "CANCELLED"), state  # gone from the queue: it can never write over the record


def test_a_waiting_job_shows_its_reason_and_the_wait_has_a_stated_end(tmp_path):
    sweep_dir = tmp_path / "sweep"
    run = run_sweeper(
        [
            "-m",
            *SLURM,
            "+cluster.sbatch_extra.hold=true",
            "launcher.wait_timeout_min=0.1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
        timeout=300,
    )
    try:
        assert run.proc.returncode == 0, run.output[-3000:]
        assert "stopped waiting after 0.1 min" in run.output
        assert "1 pending (JobHeldUser: 1)" in run.output
        status = _status(sweep_dir)
        assert status.returncode == 3, status.stdout
        assert "JobHeldUser: held by its user" in status.stdout, status.stdout
        subprocess.run(
            [sys.executable, "-m", "sweeper.report", str(sweep_dir)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            check=True,
        )
        df = pd.read_csv(sweep_dir / "results.csv")
        assert df.loc[0, "status"] == "pending" and "JobHeldUser" in df.loc[0, "reason"]
        assert "JobHeldUser" in (sweep_dir / "report.md").read_text()
    finally:
        for e in json.loads((sweep_dir / "submitted.json").read_text()).values():
            subprocess.run(["scancel", e["job_id"]], capture_output=True)
