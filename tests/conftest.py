"""Shared helpers: run the real ``python -m sweeper`` command in a temporary working directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.results.sweepdir import SweepDir
from tests.environment import restored_environment
from tests.spawn_guard import pytest_runtest_makereport, pytest_runtest_protocol  # noqa: F401  (the fast tier's guard)

REPO = Path(__file__).resolve().parents[1]

#: Skips a test unless the development SLURM cluster is up (``SLURM_CONF`` set, ``sbatch`` on PATH).
NEEDS_DEV_SLURM = pytest.mark.skipif(
    not os.environ.get("SLURM_CONF") or shutil.which("sbatch") is None,
    reason='needs the development SLURM cluster: eval "$(bash slurm/dev-cluster.sh start | tail -n 1)"',
)


#: Point settings of the SLURM sweeps: enough steps for every window (a median of 3 timed steps, one memory step),
#: no profiler trace: what their checks need.
SLURM_FEW_STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]


class SweepRun:
    """A finished ``python -m sweeper`` command: its process result and its sweep directory."""

    def __init__(self, proc: subprocess.CompletedProcess, cwd: Path) -> None:
        self._records: list | None = None
        self.proc = proc
        self.cwd = cwd
        self.output = proc.stdout + proc.stderr
        lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
        self.last_line = lines[-1] if lines else ""
        m = re.search(r"(\S+report\.md)", self.last_line)
        self.report = (cwd / m.group(1)) if m else None
        self.sweep_dir = self.report.parent if self.report else None

    def records(self):
        """The records of the sweep directory: as they are now, or as :meth:`freeze` kept them."""
        return list(self._records) if self._records is not None else SweepDir(self.sweep_dir).records()

    def freeze(self) -> SweepRun:
        """Keep the records this run left: later sweeps resumed in the same directory (sharing its points) do not
        change what :meth:`records` and :meth:`by` return."""
        self._records = list(SweepDir(self.sweep_dir).records())
        return self

    def by(self, **spec_values):
        """The one record whose spec matches all ``spec_values``."""
        found = [r for r in self.records() if all(r.spec.get(k) == v for k, v in spec_values.items())]
        assert len(found) == 1, f"{spec_values}: {len(found)} records"
        return found[0]


@pytest.fixture(autouse=True, scope="session")
def _cpu_peak_cache(tmp_path_factory):
    """The CPU matmul peak (sweeper.job.cpu_peak) is kept in a folder of this test session, not in the home
    directory: the first CPU point of the session measures it, the others reuse it, as on a user's host."""
    os.environ.setdefault("SWEEPER_CACHE_DIR", str(tmp_path_factory.mktemp("sweeper-cache")))
    yield


@pytest.fixture(autouse=True)
def _environment_restored():
    """Every test leaves ``os.environ`` as it found it, whatever the code it ran wrote there (tests/environment.py
    says which libraries write it and what leaked before)."""
    with restored_environment():
        yield


def _sweeper_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``python -m sweeper`` command of the tests (tests/ importable by the ranks), with the
    variables of ``extra`` (the ranks inherit them)."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("SWEEPER_SWEEP_ID", None)
    # W&B's own switch: no runs unless a test asks (wandb=offline wins over it; tests/integration/test_wandb.py)
    env.setdefault("WANDB_MODE", "disabled")
    return env


def run_sweeper(args: list[str], cwd: Path, timeout: float = 900, env: dict[str, str] | None = None) -> SweepRun:
    """Run ``python -m sweeper *args`` in ``cwd`` (tests/ importable by the ranks, for fault callbacks), with the
    environment variables of ``env`` set for it alone (so that sweeps run side by side can differ in them)."""
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", *args],
        cwd=cwd,
        env=_sweeper_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return SweepRun(proc, cwd)


class StartedSweep:
    """``python -m sweeper *args`` started in ``cwd`` and left running (:func:`start_sweeper`); its output goes to
    files of ``cwd``, so that a long output never blocks it."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.args, self.cwd = [sys.executable, "-m", "sweeper", *args], cwd
        self._out, self._err = (open(cwd / name, "w+") for name in ("sweeper.stdout", "sweeper.stderr"))
        self.popen = subprocess.Popen(self.args, cwd=cwd, env=_sweeper_env(), stdout=self._out, stderr=self._err)
        self._run: SweepRun | None = None

    def wait(self, timeout: float = 900) -> SweepRun:
        """The finished command, as :func:`run_sweeper` returns it (the same ``timeout``: killed past it)."""
        if self._run is None:
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
                raise
            finally:
                texts = []
                for f in (self._out, self._err):
                    f.seek(0)
                    texts.append(f.read())
                    f.close()
            proc = subprocess.CompletedProcess(self.args, self.popen.returncode, *texts)
            self._run = SweepRun(proc, self.cwd)
        return self._run


def start_sweeper(args: list[str], cwd: Path) -> StartedSweep:
    """Start ``python -m sweeper *args`` in ``cwd`` (as :func:`run_sweeper` runs it) without waiting for it."""
    return StartedSweep(args, cwd)


@pytest.fixture
def sweeper_cli(tmp_path):
    """``sweeper_cli(*args)`` runs the real command in a fresh working directory."""

    def run(*args: str, timeout: float = 900) -> SweepRun:
        return run_sweeper(list(args), tmp_path, timeout=timeout)

    return run


#: Point settings of the local ZeRO grid and the sweeps that share its directory (``zero_grid``).
ZERO_GRID_STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]


@pytest.fixture(scope="session")
def zero_grid(tmp_path_factory) -> SweepRun:
    """``+sweeps=zero`` (the named grid: ZeRO stages 0-3 on 2 gloo ranks) with ``ZERO_GRID_STEPS``, run once per
    session, its records frozen as this run left them: ``test_sweep_zero`` checks them, and ``test_grad_accum``
    resumes the same directory with its own grids, so that its ``grad_accum=1`` points under DDP (``zero=0``) and
    ZeRO-2 are these records (the same points: same spec, same identity) instead of two more training runs."""
    cwd = tmp_path_factory.mktemp("zero")
    run = run_sweeper(["+sweeps=zero", *ZERO_GRID_STEPS, f"hydra.sweep.dir={cwd / 'sweep'}"], cwd)
    assert run.proc.returncode == 0, run.output[-4000:]
    return run.freeze()


@pytest.fixture(scope="session")
def slurm_2x2(tmp_path_factory) -> SweepRun:
    """``-m fsdp=none,full_shard gc=true,false`` on the single-node development SLURM cluster, run once per session:
    ``test_slurm_sweeps`` checks the grid as one job array, and ``test_slurm_two_hosts`` compares its
    ``fsdp=none gc=false`` point (2 ranks on one host) with the same point on two hosts."""
    run = run_sweeper(
        [
            "-m",
            "fsdp=none,full_shard",
            "gc=true,false",
            *SLURM_FEW_STEPS,
            "launcher=slurm",
            "cluster=dev",
            "launcher.poll_interval_s=1",
        ],
        tmp_path_factory.mktemp("slurm2x2"),
    )
    assert run.proc.returncode == 0, run.output[-4000:]
    return run
