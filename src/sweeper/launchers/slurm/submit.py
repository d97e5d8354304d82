"""``launcher=slurm``: a Hydra launcher that submits the grid as SLURM job arrays through submitit.

Why our own launcher on submitit's API rather than hydra-submitit-launcher: that plugin pickles Hydra's task
function with its config for each job and blocks until every job ends (its maintainers declined non-blocking
submission). Here each point is validated and refused before submission like a local point, what is submitted is
a small callable with plain data (docs/cases.md#p08, pickle-checked first), the sweep can return right after ``sbatch``
(``launcher.wait=false``) and be collected later, and resuming a sweep directory skips points that are final or
still queued.

One array per resource shape (ranks per node x nodes); each array task is one point, each of its SLURM tasks one
rank (:mod:`sweeper.launchers.slurm.in_job`). Another Hydra app's config (not sweeper's schema) goes to
:mod:`sweeper.launchers.slurm.hydra_task`, which runs that app's task function in the jobs.
"""

from __future__ import annotations

import math
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig

from sweeper.config.compose import plain_node
from sweeper.config.sections import ClusterConfig, from_mapping
from sweeper.config.spec import PointSpec, from_config, replay_command
from sweeper.config.target import Target
from sweeper.launchers.prefetch import prefetch_imports
from sweeper.launchers.slurm.site import Site, array_chunk, never_runs, read_site, sbatch_fix, sbatch_message
from sweeper.launchers.slurm.waiting import alive_jobs, wait_for_records
from sweeper.point import preflight
from sweeper.point.context import SweepContext
from sweeper.point.gate import InvalidPoint
from sweeper.point.lifecycle import Prepared, begin_many, identity_of, refusal_record, target_for, write
from sweeper.results.incomplete import incomplete
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir

#: sbatch's words for an array above the site's ``MaxArraySize`` (SLURM 22-24).
ARRAY_TOO_LARGE = "invalid job array specification"


@dataclass(frozen=True)
class Submission:
    """What :meth:`SlurmLauncher.submit` did: Hydra's job returns (one per job override, its status word), the
    points left to SLURM (submitted now, or still queued from an earlier submission), and the jobs submitted now."""

    returns: list[JobReturn]
    waiting: list[str]
    submitted: int


class PayloadNotPicklable(TypeError):
    """What would be sent to SLURM does not pickle (docs/cases.md#p08); the message names the object."""


def check_picklable(obj: Any, what: str) -> None:
    """Pickle ``obj`` before any sbatch call.

    Raises:
        PayloadNotPicklable: naming ``what`` and the pickling error (e.g. a lock held by a logger).
    """
    try:
        pickle.dumps(obj)
    except Exception as e:
        raise PayloadNotPicklable(f"{what} cannot be sent to SLURM: {type(e).__name__}: {e}") from e


def executor_parameters(cluster: ClusterConfig | Mapping[str, Any], spec: PointSpec, n_tasks: int) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for points shaped like ``spec`` (:func:`sbatch_parameters`; the point's
    ``nodes`` and ``ranks_per_node``, and ``time_limit_min=null`` derived from its ``timeout_s``, rounded up to
    whole minutes).

    Raises:
        TypeError: a cluster key the schema does not have.
    """
    c = from_mapping(ClusterConfig, cluster)
    limit_min = c.time_limit_min if c.time_limit_min is not None else max(1, math.ceil(spec.timeout_s / 60))
    return sbatch_parameters(c, spec.nodes, spec.ranks_per_node, int(limit_min), n_tasks)


def sbatch_parameters(
    cluster: ClusterConfig | Mapping[str, Any], nodes: int, tasks_per_node: int, time_min: int, n_tasks: int
) -> dict[str, Any]:
    """submitit SlurmExecutor parameters (sbatch names in the comments) for jobs of ``nodes`` x ``tasks_per_node``
    SLURM tasks and ``time_min`` minutes, from the cluster's typed config (the schema's defaults for what it does not
    say); ``n_tasks`` names the job.

    Raises:
        TypeError: a cluster key the schema does not have.
    """
    c = from_mapping(ClusterConfig, cluster)
    params: dict[str, Any] = dict(
        nodes=nodes,  # --nodes
        ntasks_per_node=tasks_per_node,  # --ntasks-per-node: one task per rank
        cpus_per_task=int(c.cpus_per_task),
        time=int(time_min),  # --time, minutes
        signal_delay_s=int(c.signal_delay_s),  # --signal=USR2@<s>
        array_parallelism=int(c.array_parallelism),  # --array=...%<n>
        job_name=f"sweeper-{n_tasks}pts",
        stderr_to_stdout=False,
    )
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(c, name):
            params[name] = getattr(c, name)
    if c.mem is not None:
        params["mem"] = str(c.mem)
    if c.gpus_per_node:
        params["gpus_per_node"] = int(c.gpus_per_node)
    if c.setup:
        params["setup"] = list(c.setup)
    if c.sbatch_extra:
        params["additional_parameters"] = dict(c.sbatch_extra)
    return params


def job_callable(cluster: ClusterConfig | Mapping[str, Any]) -> Any:
    """The callable each array task runs (:class:`sweeper.launchers.slurm.in_job.SlurmPoint`) with the cluster's
    ``max_requeues`` and ``signal_delay_s`` as given (the schema's defaults, 2 and 30 s, when not)."""
    from sweeper.launchers.slurm.in_job import SlurmPoint

    c = from_mapping(ClusterConfig, cluster)
    return SlurmPoint(int(c.max_requeues), int(c.signal_delay_s))


class SlurmLauncher(Launcher):
    """Hydra launcher plugin (``hydra/launcher=sweeper_slurm``, selected by ``launcher=slurm``)."""

    def __init__(self, cluster: Any = None, **kwargs: Any) -> None:
        """``cluster``: ``hydra.launcher.cluster``, the SLURM parameters of another app's task jobs (sweeper's own
        points take ``cluster=<name>`` of the app's config instead)."""
        self.config: DictConfig | None = None
        self.hydra_context: Any = None
        self.task_function: Any = None
        self.task_cluster = plain_node(cluster) if cluster is not None else {}
        self._context: SweepContext | None = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self._context = None
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        """Submit the batch (:meth:`submit`), then, with ``launcher.wait=true``, block until every point submitted
        or still queued from an earlier submission has a final record (:meth:`wait`). Any other app's task function
        (a config not of sweeper's schema) runs as one SLURM job per run
        (:func:`sweeper.launchers.slurm.hydra_task.launch_tasks`, blocking until every job returned)."""
        from sweeper.config.schema import is_sweeper_config

        assert self.config is not None
        if not is_sweeper_config(self.config):
            from sweeper.launchers.slurm.hydra_task import launch_tasks

            return launch_tasks(self, job_overrides, initial_job_idx)
        done = self.submit(job_overrides, initial_job_idx)
        if done.waiting and self.context().launcher.wait:
            self.wait(done.waiting)
        elif done.waiting:
            print(
                f"{done.submitted} point(s) submitted, {len(done.waiting)} pending; "
                f"watch with `python -m sweeper.status {self.sweep_dir().path}`, "
                f"collect with `python -m sweeper.report {self.sweep_dir().path}`",
                flush=True,
            )
        return done.returns

    def context(self) -> SweepContext:
        """The sweep this launcher submits (:class:`sweeper.point.context.SweepContext`), built once."""
        assert self.config is not None
        if self._context is None:
            self._context = SweepContext.of(self.config)
        return self._context

    def sweep_dir(self) -> SweepDir:
        """The sweep directory (``hydra.sweep.dir``), resolved."""
        return self.context().sweep.resolved()

    def submit(self, job_overrides: Any, initial_job_idx: int) -> Submission:
        """Submit sweeper's grid points as described in the module doc and return without waiting: each point is
        identified, a final one kept (resume), one still queued from an earlier submission left to its job, the
        others gated (a refusal is its record) and submitted as job arrays (``submitted.json``).

        Raises:
            InvalidPoint: ``cluster=local`` (SLURM needs a cluster's section).
            PayloadNotPicklable: what would be sent to SLURM does not pickle.
        """
        from sweeper.config.compose import compose_containers

        assert self.config is not None
        sweep = self.sweep_dir()
        cluster, launcher = self.context().cluster, self.context().launcher
        if cluster.name in (None, "local"):
            raise InvalidPoint(
                "launcher=slurm needs cluster=<name> (cluster=dev is the development cluster)", ("cluster",)
            )
        rerun = frozenset(launcher.rerun_statuses)
        submitted = sweep.submitted()
        alive = frozenset(alive_jobs(submitted))
        groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        returns: list[JobReturn] = []
        waiting: list[str] = []
        seen: set[str] = set()
        site: Site | None = None
        site_note: str | None = None
        configs = compose_containers(self.hydra_context.config_loader, self.config, job_overrides)
        # overrides, spec, id, a repeat of an earlier point, target
        points: list[tuple[list[str], PointSpec, str, bool, Target]] = []
        specs = [(list(filter_overrides(o)), from_config(c)) for o, c in zip(job_overrides, configs, strict=True)]
        # a SLURM target is the cluster's alone (target_for): one for the batch, its plain data built once
        targets = [target_for(specs[0][1], "slurm", cluster)] * len(specs) if specs else []
        # the entries the libraries resolve away are not identity (lifecycle.identity_of): asked in one go first
        preflight.refusals([(s, t) for (_, s), t in zip(specs, targets, strict=True) if preflight.may_restate(s)])
        for (ov, spec), target in zip(specs, targets, strict=True):
            pid = identity_of(spec)
            points.append((ov, spec, pid, pid in seen, target))
            seen.add(pid)
        prefetch_imports()  # the report's libraries load while the pre-flight's worker answers (begin_many)
        started = iter(
            begin_many(
                [(spec, ov, target) for ov, spec, _, again, target in points if not again],
                sweep,
                rerun,
                pending_elsewhere=alive,
            )
        )
        for idx, (ov, spec, pid, again, _) in enumerate(points):
            if again:  # the same configuration as an earlier point of this grid (identity.py)
                status = f"same point as {pid}"
            else:
                outcome = next(started)
                if isinstance(outcome, Record):
                    status = outcome.status
                    if status == "pending":
                        waiting.append(pid)
                else:
                    params = executor_parameters(cluster, spec, len(job_overrides))
                    if site is None and site_note is None:
                        site, site_note = read_site()  # once per sweep, at its first point to submit
                        if site_note:
                            print(f"sweeper: SLURM site limits not read ({site_note}); submitting unchecked")
                    cannot = never_runs(
                        site,
                        cluster.partition,
                        spec.nodes,
                        int(params["time"]),
                        "cluster.time_limit_min" if cluster.time_limit_min is not None else "timeout_s",
                    )
                    if cannot is not None:
                        err = InvalidPoint(cannot[0], cannot[1], kind="config", rule="S01")
                        status = write(sweep, refusal_record(outcome.base(), err)).status
                    else:
                        payload = {**outcome.to_payload(), "time_limit_s": params["time"] * 60}
                        groups[(spec.nodes, spec.ranks_per_node)].append({"payload": payload, "params": params})
                        status = "to submit"
            # a frontier search submits as jobs end, a point maybe twice (screen, full window): no total, as locally
            total = "" if spec.search.name == "frontier" else f"/{len(job_overrides)}"
            print(f"[{initial_job_idx + idx + 1}{total}] {' '.join(ov) or '(defaults)'}  {status}", flush=True)
            returns.append(_job_return(ov, status, initial_job_idx + idx))
        jobs, not_sent = self._submit(sweep, groups, cluster, array_chunk(site))
        waiting += [
            it["payload"]["point_id"]
            for items in groups.values()
            for it in items
            if it["payload"]["point_id"] not in not_sent
        ]
        return Submission(returns, waiting, len(jobs))

    def wait(self, point_ids: Collection[str], any_end: bool = False) -> set[str]:
        """Block until every point of ``point_ids`` has a final record (``any_end``: until one of them has), or
        ``launcher.wait_timeout_min`` minutes; asks SLURM every ``launcher.poll_interval_s`` seconds
        (:func:`sweeper.launchers.slurm.waiting.wait_for_records`).

        Returns:
            The points of ``point_ids`` with a final record when it returned (empty after a timeout with none).
        """
        launcher = self.context().launcher
        return wait_for_records(
            self.sweep_dir(), list(point_ids), float(launcher.poll_interval_s), launcher.wait_timeout_min, any_end
        )

    def _submit(
        self, sweep: SweepDir, groups: dict, cluster: ClusterConfig, chunk: int | None
    ) -> tuple[list[Any], set[str]]:
        """Submit each resource group as job arrays of at most ``chunk`` tasks (the site's ``MaxArraySize``; one
        array per group when None). An array sbatch calls an invalid array specification (the site's limit is lower
        than ``scontrol`` said, or it could not be read) is halved and submitted again, down to one task. An array
        ``sbatch`` refuses otherwise gets a final record for each of its points (``error``, kind ``scheduler``,
        sbatch's message and what to change, :func:`refuse_array`) and one line in
        :data:`sweeper.results.incomplete.incomplete`; the other arrays are still submitted.

        Returns:
            The submitit jobs submitted, and the ids of the points whose array was refused.
        """
        import submitit

        jobs: list[Any] = []
        refused: set[str] = set()
        for items in groups.values():
            fn = job_callable(cluster)
            check_picklable(fn, "the job callable")
            for it in items:
                p = it["payload"]
                check_picklable(p, f"the payload of point {p['point_id']} ({' '.join(p['overrides'])})")
            size = chunk or len(items)
            search_path = sweep.search_path()  # every replay of the sweep carries its config folders
            parts = [items[start : start + size] for start in range(0, len(items), size)]
            while parts:
                part = parts.pop(0)
                payloads = [it["payload"] for it in part]
                executor = submitit.SlurmExecutor(folder=sweep.slurm_job_dir("%j"), max_num_timeout=0)
                executor.update_parameters(**{**part[0]["params"], "job_name": f"sweeper-{len(part)}pts"})
                t0 = time.perf_counter()
                try:
                    group_jobs = executor.map_array(fn, payloads)
                except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError, OSError) as e:
                    if len(part) > 1 and ARRAY_TOO_LARGE in str(e).lower():
                        # the site's limit is lower than it said (or it said nothing): halve the array and try again
                        half = (len(part) + 1) // 2
                        parts[:0] = [part[:half], part[half:]]
                        print(f"sbatch: an array of {len(part)} is too large here; trying {half}", flush=True)
                        continue
                    refused |= refuse_array(sweep, payloads, str(e))
                    continue
                sweep.add_submitted(
                    {
                        p["point_id"]: {
                            "job_id": j.job_id,
                            "overrides": p["overrides"],
                            "spec": p["spec"],
                            "replay": replay_command(p["overrides"], search_path),
                            "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        }
                        for p, j in zip(payloads, group_jobs, strict=True)
                    },
                )
                print(
                    f"sbatch: array {group_jobs[0].job_id.split('_')[0]} with {len(group_jobs)} task(s) "
                    f"in {time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
                jobs.extend(group_jobs)
        return jobs, refused


def refuse_array(sweep: SweepDir, payloads: list[dict[str, Any]], error: str) -> set[str]:
    """Record every point of an array ``sbatch`` refused: status ``error``, kind ``scheduler``, the reason with
    sbatch's own words and what to change (:func:`sweeper.launchers.slurm.site.sbatch_fix`); no job exists, so none
    is left ``pending``. Adds one line to :data:`sweeper.results.incomplete.incomplete` (exit 3, no traceback).

    Returns:
        The ids of the points recorded.
    """
    said = sbatch_message(error)
    fix = sbatch_fix(said)
    done: set[str] = set()
    for p in payloads:
        prepared = Prepared.from_payload(p)
        record = Record(
            **prepared.base({}),
            status="error",
            error_kind="scheduler",
            reason=f"sbatch refused the submission, no job exists: {said}; {fix}; then run the same command again",
            failure={"sbatch": said[-2000:]},
        )
        write(sweep, record)
        done.add(p["point_id"])
    incomplete.append(f"sbatch refused an array of {len(payloads)} point(s): {said} ({fix})")
    print(f"sweeper: sbatch refused {len(payloads)} point(s): {said}; {fix}", file=sys.stderr, flush=True)
    return done


def _job_return(overrides: list[str], status: str, idx: int) -> JobReturn:
    ret = JobReturn()
    ret.overrides = overrides
    ret.status = JobStatus.COMPLETED
    ret._return_value = status
    ret.task_name = "sweeper"
    ret.hydra_cfg = None
    ret.working_dir = ""
    return ret
