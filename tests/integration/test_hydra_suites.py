"""Hydra's own plugin test suites against sweeper's two Hydra plugins, as Hydra's launcher plugins run them.

The suites are ``hydra.test_utils.launcher_common_tests`` of the installed hydra-core (``LauncherTestSuite``,
``BatchedSweeperTestSuite``, ``IntegrationTestSuite``; hydra-core ships no other sweeper suite). The apps they run
are in the same wheel: ``hydra.test_utils.a_module`` with ``hydra/test_utils/configs/`` (compose.yaml, db_conf.yaml,
custom_resolver.yaml, ...), and ``IntegrationTestSuite`` writes its own ``task.py``/``config.yaml`` into the test's
folder (``hydra.test_utils.test_utils.integration_test``). Nothing is copied from Hydra's repository.

- ``SweeperBasicSweeper`` (``hydra/sweeper=sweeper_basic``) under ``LauncherTestSuite`` and
  ``BatchedSweeperTestSuite`` over Hydra's basic launcher (in-process): the sweeper alone, in every CI run.
- ``SweeperSlurmLauncher`` (``hydra/launcher=sweeper_slurm``, with ``sweeper_basic`` as the sweeper) under all three
  suites on the development SLURM cluster (skipped without ``SLURM_CONF``): every run of a suite is a task of a real
  SLURM job array (``BatchedSweeperTestSuite``: three batches, three arrays, one after the other).

Which path of the launcher they test: the suites launch arbitrary task functions over Hydra's test configs, which
are not sweeper grid points. The launcher runs such a task function through its task path
(:mod:`sweeper.launchers.slurm.hydra_task`: one array task per run, the task function pickled by submitit,
Hydra's ``run_job`` inside the job, the ``JobReturn`` sent back). Its grid-point path cannot run under these suites
at all: every suite test asserts what the task function saw and returned (``JobReturn.cfg``, ``overrides``,
``return_value``, the output directory with ``.hydra/``), and a grid point's job never calls the task function (it
starts the ranks and writes ``points/<id>/result.json``; tests/integration/test_slurm_sweeps.py and
test_slurm_submission.py test that path).

Excluded suite tests: none. Every test of the three suites runs and must pass.

The tests below the suites check what the suites cannot see: that Hydra finds both plugins, that the suites' runs
really were SLURM jobs with the launcher's own parameters, how a failing task function and a job that can never be
sent end. The suites' jobs ask for 2 minutes (``hydra.launcher.cluster.time_limit_min=2``), so a stuck one ends.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.test_utils.launcher_common_tests import BatchedSweeperTestSuite, IntegrationTestSuite, LauncherTestSuite

from sweeper.launchers.slurm.submit import PayloadNotPicklable
from tests.conftest import NEEDS_DEV_SLURM


@pytest.fixture(autouse=True)
def _hydra_version_base_as_in_hydras_own_runs():
    """Each suite test starts with Hydra's version base unset, as in Hydra's own test runs (then 1.1: a job changes
    into its own folder, where the suites look for its log). The base is process-wide (a ``VersionBase`` singleton):
    once anything earlier in this pytest process ran an app with ``version_base="1.3"``, jobs stayed in the caller's
    folder and 14 of these tests failed in the full suite only (fresh-clone CI of fe7cec5)."""
    from hydra import version

    before = version.VersionBase.instance().getbase()
    version.VersionBase.instance().version_base = version._UNSPECIFIED_
    yield
    version.VersionBase.instance().version_base = before


#: The sweeper of every suite run below (Hydra's default is its own basic sweeper).
SWEEPER = "hydra/sweeper=sweeper_basic"
#: The suites' SLURM jobs' time limit, minutes (the task path's default is an hour).
TIME_LIMIT = "hydra.launcher.cluster.time_limit_min=2"


@pytest.mark.parametrize("launcher_name, overrides", [("basic", [SWEEPER])])
class TestSweeperBasicSweeper(LauncherTestSuite):
    """Hydra's launcher suite over its basic launcher, with sweeper's sweeper expanding the sweeps."""


@pytest.mark.parametrize("launcher_name, overrides", [("basic", [SWEEPER, "hydra.sweeper.max_batch_size=2"])])
class TestSweeperBasicSweeperBatched(BatchedSweeperTestSuite):
    """Hydra's sweeper suite: 6 runs in 3 batches of 2."""


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.parametrize("launcher_name, overrides", [("sweeper_slurm", [SWEEPER, TIME_LIMIT])])
class TestSweeperSlurmLauncher(LauncherTestSuite):
    """Hydra's launcher suite on the development SLURM cluster."""


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.parametrize(
    "launcher_name, overrides", [("sweeper_slurm", [SWEEPER, TIME_LIMIT, "hydra.sweeper.max_batch_size=2"])]
)
class TestSweeperSlurmLauncherBatched(BatchedSweeperTestSuite):
    """Hydra's sweeper suite on SLURM: each batch one job array, submitted when the one before has returned."""


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [
        (
            {},
            [
                "-m",
                "hydra/launcher=sweeper_slurm",
                SWEEPER,
                TIME_LIMIT,
                "hydra/hydra_logging=disabled",
                "hydra/job_logging=disabled",
            ],
        )
    ],
)
class TestSweeperSlurmLauncherIntegration(IntegrationTestSuite):
    """Hydra's integration suite: a ``@hydra.main`` script of its own run as a process, its task function (defined
    in ``__main__``) run in SLURM jobs."""


@pytest.mark.parametrize("kind, name", [(Launcher, "SweeperSlurmLauncher"), (Sweeper, "SweeperBasicSweeper")])
def test_hydra_discovers_both_plugins(kind, name):
    assert name in [c.__name__ for c in Plugins.instance().discover(kind)]


def _sweep(hydra_sweep_runner, tmp_path: Path, task_function, *overrides: str):
    """A multirun of Hydra's test app ``hydra.test_utils.a_module`` (config ``compose``: ``foo: 10, bar: 100``) on
    SLURM with sweeper's sweeper; the caller enters it (``with sweep:``)."""
    return hydra_sweep_runner(
        calling_file=None,
        calling_module="hydra.test_utils.a_module",
        task_function=task_function,
        config_path="configs",
        config_name="compose",
        overrides=["hydra/launcher=sweeper_slurm", SWEEPER, *overrides],
        temp_dir=tmp_path,
    )


def _slurm_ids():
    """A task function returning its SLURM array job id and task id. Made inside a function, so cloudpickle sends it
    by value (the job need not import this test module)."""

    def task(_cfg) -> tuple[str, str]:
        return os.environ["SLURM_ARRAY_JOB_ID"], os.environ["SLURM_ARRAY_TASK_ID"]

    return task


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.usefixtures("hydra_restore_singletons")
def test_the_runs_are_tasks_of_one_slurm_array_with_the_launchers_cluster_parameters(hydra_sweep_runner, tmp_path):
    with _sweep(
        hydra_sweep_runner, tmp_path, _slurm_ids(), "+a=0,1", "hydra.launcher.cluster.time_limit_min=3"
    ) as sweep:
        returns = sweep.returns[0]
        script = "".join(p.read_text() for p in (tmp_path / "slurm").glob("*/*_submission.sh"))
    arrays = {r.return_value[0] for r in returns}
    assert len(arrays) == 1 and [r.return_value[1] for r in returns] == ["0", "1"]
    (array,) = arrays
    for i, r in enumerate(returns):
        assert r.hydra_cfg.hydra.job.id == f"{array}_{i}"  # the SLURM job id, as hydra-submitit-launcher sets it
        assert r.cfg == {"foo": 10, "bar": 100, "a": i}
        choices = r.hydra_cfg.hydra.runtime.choices
        assert (choices["hydra/launcher"], choices["hydra/sweeper"]) == ("sweeper_slurm", "sweeper_basic")
    assert re.search(r"^#SBATCH --time=3$", script, re.M) and re.search(r"^#SBATCH --array=0-1%2$", script, re.M)


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_task_function_that_raises_in_its_slurm_job_raises_the_same_error_in_the_multirun(
    hydra_sweep_runner, tmp_path
):
    """As with Hydra's basic launcher: ``run_job`` keeps the error in the run's ``JobReturn`` (status FAILED), the
    sweeper reads the return and raises it."""

    def fails(cfg) -> None:  # defined here: cloudpickle sends it by value
        raise ValueError(f"task of a={cfg.a} failed on purpose in job {os.environ['SLURM_JOB_ID']}")

    with pytest.raises(ValueError, match=r"task of a=0 failed on purpose in job \d+"):
        with _sweep(hydra_sweep_runner, tmp_path, fails, "+a=0"):
            pass
    assert list((tmp_path / "slurm").glob("*/*_result.pkl"))  # the error came back from a SLURM job


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.usefixtures("hydra_restore_singletons")
@pytest.mark.parametrize(
    "override, error, says",
    [
        ("hydra.launcher.cluster.partition=nowhere", ValueError, r"hydra\.launcher\.cluster\.partition=nowhere does"),
        (None, PayloadNotPicklable, "task function cannot be sent to SLURM: TypeError: cannot pickle"),
    ],
    ids=["partition-that-does-not-exist", "task-function-that-does-not-pickle"],
)
def test_a_batch_that_cannot_run_is_refused_before_any_sbatch(hydra_sweep_runner, tmp_path, override, error, says):
    lock = threading.Lock()

    def holds_a_lock(_cfg) -> bool:  # a closure over a lock: cloudpickle cannot send it
        return lock.locked()

    task = _slurm_ids() if override else holds_a_lock
    with pytest.raises(error, match=says):
        with _sweep(hydra_sweep_runner, tmp_path, task, "+a=0", *([override] if override else [])):
            pass
    assert not (tmp_path / "slurm").exists()  # no job array was submitted


def _cancel_when_started(marker: Path, cancelled: list[str], deadline_s: float = 120.0) -> None:
    """Wait until the job writes ``marker`` (its SLURM job id), then ``scancel`` that job (a user's, or an admin's)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if marker.exists() and marker.read_text().strip():
            job = marker.read_text().strip()
            subprocess.run(["scancel", job], check=True)
            cancelled.append(job)
            return
        time.sleep(0.2)


@pytest.mark.slurm
@NEEDS_DEV_SLURM
@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_scancelled_job_fails_its_run_after_the_batch_ends_and_the_other_run_still_returns(
    hydra_sweep_runner, tmp_path
):
    """A job that ends without a return (here ``scancel`` while its task function runs) is that run's FAILED return
    holding submitit's error, raised by the sweeper once every job of the batch has ended: the other run's job is
    waited for and returns, and nothing of the array is left queued or running."""
    import submitit

    marker = tmp_path / "started"

    def waits_for_cancel(cfg) -> str:  # defined here: cloudpickle sends it by value
        if cfg.a == 0:
            marker.write_text(f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}")
            time.sleep(100)
        else:
            time.sleep(3)  # still running when its neighbour is cancelled
        return f"a={cfg.a} done"

    cancelled: list[str] = []
    canceller = threading.Thread(target=_cancel_when_started, args=(marker, cancelled), daemon=True)
    canceller.start()
    start = time.monotonic()
    with pytest.raises(submitit.core.utils.UncompletedJobError, match=r"CANCELLED") as raised:
        with _sweep(hydra_sweep_runner, tmp_path, waits_for_cancel, "+a=0,1"):
            pass
    canceller.join(timeout=1)
    assert cancelled and time.monotonic() - start < 90  # ended by the cancel, not by the job's 100 s or its limit
    (job,) = cancelled
    assert str(raised.value).startswith(f"run #0 (+a=0), SLURM job {job}: ")  # the run and its job named
    array = job.split("_")[0]
    results = [p.name for p in (tmp_path / "slurm").glob(f"{array}_*/*_result.pkl")]
    assert results == [f"{array}_1_0_result.pkl"], results  # the other run returned
    listed = subprocess.run(["squeue", "-h", "-j", array, "-o", "%i"], capture_output=True, text=True).stdout
    assert not listed.strip()  # nothing of the batch left behind
