"""Another Hydra app's task function as SLURM jobs: the path of ``hydra/launcher=sweeper_slurm`` for a config that is
not sweeper's.

sweeper's own grid points go through :mod:`sweeper.launchers.slurm.submit` (gated, recorded one file per point,
collected later, resumable). Any other task function (a user's own ``@hydra.main`` app, Hydra's launcher test suites,
tests/integration/test_hydra_suites.py) has no record, gate or resume: each run of the batch is one task of a SLURM
job array that composes its config, runs the task function through Hydra's ``run_job`` (its output directory,
``.hydra/`` copies, callbacks, ``hydra.job.id`` = the SLURM job id) and sends back the
:class:`hydra.core.utils.JobReturn`. The launcher blocks until every job of the batch has returned, as
:meth:`hydra.plugins.launcher.Launcher.launch` requires (the sweeper reads the returns of one batch before the next).

submitit pickles the callable with cloudpickle: a task function defined in ``__main__`` or inside a function travels
by value, one in an importable module by reference (the job must be able to import it). Each job is one SLURM task
with the parameters of ``hydra.launcher.cluster`` (:class:`sweeper.config.sections.ClusterConfig`: ``partition``,
``account``, ``cpus_per_task``, ``mem``, ``setup``, ...); ``time_limit_min`` null is :data:`TASK_TIME_LIMIT_MIN`.
A job SLURM ends without a return (time limit, memory, ``scancel``) is a ``FAILED`` return holding submitit's error,
which the sweeper raises once every job of the batch has ended, as Hydra's basic launcher does with a task function's
own error; submitit requeues a preempted job from its start (its default for a callable without ``checkpoint``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import DictConfig, open_dict

from sweeper.config.sections import ClusterConfig, from_mapping
from sweeper.launchers.slurm.site import never_runs, read_site
from sweeper.launchers.slurm.submit import PayloadNotPicklable, sbatch_parameters
from sweeper.results.sweepdir import SweepDir

if TYPE_CHECKING:
    from sweeper.launchers.slurm.submit import SlurmLauncher

#: ``--time`` of a task job, minutes, when ``hydra.launcher.cluster.time_limit_min`` is null.
TASK_TIME_LIMIT_MIN = 60


class HydraTaskJob:
    """What one array task runs: ``HydraTaskJob(hydra_context, config, task_function)(overrides, job_num, state)``.

    ``state`` is Hydra's singletons (:meth:`hydra.core.singleton.Singleton.get_state`: the config store and the
    OmegaConf resolvers registered in the submitting process), set again inside the job before composing.
    """

    def __init__(self, hydra_context: Any, config: DictConfig, task_function: Any) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.task_function = task_function

    def __call__(self, overrides: list[str], job_num: int, state: dict[Any, Any]) -> JobReturn:
        """Compose the run's config (the multirun config plus ``overrides``) and run the task function in it.

        Returns:
            Hydra's ``JobReturn`` (a task function that raised is a return of status ``FAILED`` holding the error,
            as with Hydra's basic launcher).
        """
        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import run_job, setup_globals

        Singleton.set_state(state)
        setup_globals()
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = submitit.JobEnvironment().job_id
            cfg.hydra.job.num = job_num
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )


def launch_tasks(launcher: SlurmLauncher, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
    """Run one batch of another app's task function as one SLURM job array and wait for every job.

    Returns:
        The runs' ``JobReturn``, in the order of ``job_overrides``; a run whose job ended without returning
        (``scancel``, time limit, memory kill, a task function that cannot be unpickled there) is status ``FAILED``
        holding submitit's ``UncompletedJobError`` / ``FailedJobError``, its message starting with the run and its job.

    Raises:
        PayloadNotPicklable: the task function or its config does not pickle (before any sbatch).
        ValueError: the partition can never run such a job (``never_runs``: too long, a partition that does not
            exist), before any sbatch.
        submitit.core.utils.FailedSubmissionError: sbatch refused the array.
    """
    import cloudpickle  # submitit's own pickler
    import submitit
    from hydra.core.singleton import Singleton

    assert launcher.config is not None
    cluster = from_mapping(ClusterConfig, launcher.task_cluster)
    time_min = cluster.time_limit_min if cluster.time_limit_min is not None else TASK_TIME_LIMIT_MIN
    site, _ = read_site()
    cannot = never_runs(site, cluster.partition, 1, int(time_min), "cluster.time_limit_min")
    if cannot is not None:  # the message names the grid's keys (cluster.<key>); here they are the launcher's
        raise ValueError(re.sub(r"(?<![\w.])cluster\.", "hydra.launcher.cluster.", cannot[0]))
    fn = HydraTaskJob(launcher.hydra_context, launcher.config, launcher.task_function)
    state = Singleton.get_state()
    try:
        cloudpickle.dumps((fn, state))
    except Exception as e:
        raise PayloadNotPicklable(f"the task function cannot be sent to SLURM: {type(e).__name__}: {e}") from e
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=SweepDir(sweep_dir).slurm_job_dir("%j"), max_num_timeout=0)
    params = sbatch_parameters(cluster, 1, 1, int(time_min), len(job_overrides))
    executor.update_parameters(**{**params, "job_name": str(launcher.config.hydra.job.name)})
    nums = [initial_job_idx + i for i in range(len(job_overrides))]
    for num, overrides in zip(nums, job_overrides, strict=True):
        print(f"[slurm] #{num} {' '.join(filter_overrides(overrides)) or '(defaults)'}", flush=True)
    jobs = executor.map_array(fn, [list(o) for o in job_overrides], nums, [state] * len(nums))
    print(f"[slurm] array {jobs[0].job_id.split('_')[0]}: {len(jobs)} job(s), waiting for their returns", flush=True)
    returns = []
    for job, num, overrides in zip(jobs, nums, job_overrides, strict=True):
        try:
            returns.append(job.result())
        except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedJobError) as e:
            # no return came back (scancel, time limit, memory kill): the run's return holds the error, as a task
            # function's own error is held, and the other jobs of the batch are still waited for
            print(f"[slurm] #{num}: job {job.job_id} ended without a return: {type(e).__name__}", flush=True)
            run = f"run #{num} ({' '.join(filter_overrides(overrides)) or '(defaults)'}), SLURM job {job.job_id}"
            error = type(e)(f"{run}: {e}")  # the same type, the run named (Python 3.10 has no add_note)
            error.__cause__ = e
            returns.append(_failed(list(overrides), error))
    return returns


def _failed(overrides: list[str], error: BaseException) -> JobReturn:
    """The ``JobReturn`` of a run whose job sent none back: status ``FAILED`` holding ``error`` (reading its
    ``return_value`` raises it, as for a task function that raised: Hydra's sweepers read every return of a batch)."""
    return JobReturn(overrides=overrides, status=JobStatus.FAILED, _return_value=error, task_name="", working_dir="")
