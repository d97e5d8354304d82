"""The life of one point, the same for every launcher: identity -> existing record -> gate -> directory -> (the
launcher runs the ranks) -> final status -> record.

::

    begin(spec, ...)  ->  Record (already final, pending elsewhere, or refused: written)  |  Prepared
    <launcher runs the ranks of a Prepared point: locally (launchers.local) or as a SLURM job (launchers.slurm)>
    finish(prepared, ranks, ...)  ->  Record (written atomically, one file per point)

Nothing here imports torch. Every outcome is a record; nothing raises for a failing point.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.envinfo import environment, library_versions
from sweeper.grid.spec import PointSpec, replay_command
from sweeper.point.gate import InvalidPoint, Target, check
from sweeper.point.hardware import local_device_type
from sweeper.point.identity import point_id
from sweeper.results.atomic import write_json_atomic
from sweeper.results.record import RESULT_FILE, Record, existing_final_status, point_dir, read_record, write_record

SPEC_FILE = "spec.json"


def target_for(spec: PointSpec, launcher: str, cluster: dict[str, Any] | None = None) -> Target:
    """Where ``spec`` would run: the local machine (``launcher="local"``) or a SLURM cluster config.

    The local device comes from ``spec.device`` (``auto`` resolved without torch); a cluster's device from its
    ``gpus_per_node`` and ``gpu_name``.
    """
    cluster = dict(cluster or {})
    if launcher == "slurm":
        device = "cuda" if cluster.get("gpus_per_node") else "cpu"
        return Target("slurm", device, cluster.get("gpu_name"), library_versions(), cluster)
    return Target("local", local_device_type(spec.device), None, library_versions(), cluster)


@dataclass
class Prepared:
    """A point that passed the gate and has its directory ready: everything its ranks and its record need.

    Attributes:
        sweep_dir: the sweep directory (absolute).
        sweep_id, point_id: the sweep's id and the point's 12-hex id.
        overrides: the Hydra overrides selecting the point.
        spec: the full point spec (budgets included).
        target: where it runs.
    """

    sweep_dir: Path
    sweep_id: str
    point_id: str
    overrides: list[str]
    spec: PointSpec
    target: Target

    @property
    def pdir(self) -> Path:
        """The point's directory, ``<sweep_dir>/points/<point_id>``."""
        return point_dir(self.sweep_dir, self.point_id)

    def base(self, env: dict[str, Any] | None = None) -> dict[str, Any]:
        """The record fields every outcome of this point shares."""
        return _base(self.sweep_id, self.point_id, self.overrides, self.spec, env)

    def to_payload(self) -> dict[str, Any]:
        """Plain data (pickles for SLURM): the inverse of :meth:`from_payload`."""
        return dict(
            sweep_dir=str(self.sweep_dir),
            sweep_id=self.sweep_id,
            point_id=self.point_id,
            overrides=list(self.overrides),
            spec=self.spec.to_dict(),
            target=dict(
                launcher=self.target.launcher,
                device_type=self.target.device_type,
                gpu_name=self.target.gpu_name,
                versions=dict(self.target.versions),
                cluster=dict(self.target.cluster),
            ),
        )

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> Prepared:
        """Rebuild from :meth:`to_payload` (inside a SLURM job)."""
        return cls(
            Path(data["sweep_dir"]),
            data["sweep_id"],
            data["point_id"],
            list(data["overrides"]),
            PointSpec.from_dict(data["spec"]),
            Target(**data["target"]),
        )


def _base(sweep_id: str, pid: str, overrides: list[str], spec: PointSpec, env: dict[str, Any] | None) -> dict[str, Any]:
    return dict(
        sweep_id=sweep_id,
        point_id=pid,
        overrides=list(overrides),
        spec=spec.to_dict(),
        replay=replay_command(overrides),
        env=env if env is not None else environment(),
    )


def refusal_record(base: dict[str, Any], err: InvalidPoint) -> Record:
    """The record of a point the gate refused: status ``invalid``/``unsupported``, the keys and rule named."""
    return Record(
        status=err.status,
        reason=str(err),
        error_kind=err.kind,
        failure={"keys": list(err.keys), "rule": err.rule},
        **base,
    )


def begin(
    spec: PointSpec,
    overrides: list[str],
    sweep_dir: Path,
    sweep_id: str,
    target: Target,
    rerun: frozenset[str] = frozenset(),
    pending_elsewhere: frozenset[str] = frozenset(),
) -> Prepared | Record:
    """Everything before the ranks start.

    1. identity: the point id of the normalised spec (:mod:`sweeper.point.identity`);
    2. a final record already there is returned as it is (resume), unless its status is in ``rerun``
       (``launcher.rerun_statuses``: the old record is kept as ``result.<n>.json`` and the point runs again);
    3. a point in ``pending_elsewhere`` (its SLURM job is still queued or running) gets an unwritten ``pending``
       record;
    4. the gate (:func:`sweeper.point.gate.check`): a refusal is written as the point's record and returned;
    5. the directory: created, stale rank files of an interrupted attempt removed, ``spec.json`` written.

    Returns:
        A :class:`Record` when the point must not run now, else a :class:`Prepared` point.
    """
    sweep_dir = Path(sweep_dir).resolve()
    pid = point_id(spec)
    pdir = point_dir(sweep_dir, pid)
    if existing_final_status(sweep_dir, pid, rerun):
        return read_record(pdir / RESULT_FILE)
    if pid in pending_elsewhere:
        return Record(
            status="pending",
            reason="queued or running from an earlier submission",
            **_base(sweep_id, pid, overrides, spec, {}),
        )
    try:
        check(spec, target)
    except InvalidPoint as e:
        return write(sweep_dir, refusal_record(_base(sweep_id, pid, overrides, spec, None), e))
    prepared = Prepared(sweep_dir, sweep_id, pid, list(overrides), spec, target)
    pdir.mkdir(parents=True, exist_ok=True)
    for stale in [*pdir.glob("rank*.json"), *pdir.glob("rank*.step")]:
        stale.unlink()  # left by an interrupted earlier attempt of this same point
    write_json_atomic(pdir / SPEC_FILE, spec.to_dict())
    return prepared


def finish(
    prepared: Prepared,
    ranks: list[dict[str, Any]],
    *,
    returncode: int | None,
    timed_out: bool,
    log_tail: str,
    wall_time_s: float | None,
    env: dict[str, Any] | None = None,
    outcome: dict[str, Any] | None = None,
    artifacts: dict[str, str] | None = None,
) -> Record:
    """Turn what the ranks left into the point's final record and write it.

    Args:
        ranks: the rank files' contents (see ``docs/architecture.md``, rank-file schema), any order.
        returncode: the launcher's exit code for the ranks (torchrun's, or rank 0's under SLURM); None if unknown.
        timed_out: the launcher stopped the ranks at ``timeout_s``.
        log_tail: the end of the ranks' combined log (signal names, torchrun's error summary).
        wall_time_s: seconds from starting the ranks to now.
        env: the environment to record (default: this process's).
        outcome: a launcher-decided outcome (e.g. ``host_oom`` from the host-memory watch) that replaces the
            one read from the rank files; same keys as :func:`sweeper.results.ranks.summarize_ranks` returns.
        artifacts: extra files of the point (name -> path relative to the point directory), e.g. the ranks' log.

    Returns:
        The record written.
    """
    from sweeper.results.ranks import read_rank_steps, summarize_ranks

    spec = prepared.spec
    env = dict(env if env is not None else environment())
    env.setdefault("device_type", prepared.target.device_type)
    if ranks and ranks[0].get("device_name"):
        env["device_name"] = ranks[0]["device_name"]
    result = outcome or summarize_ranks(
        spec, ranks, returncode=returncode, timed_out=timed_out, log_tail=log_tail, steps=read_rank_steps(prepared.pdir)
    )
    record = Record(**prepared.base(env), **result, wall_time_s=wall_time_s)
    record.artifacts.update(artifacts or {})
    return write(prepared.sweep_dir, record)


def write(sweep_dir: Path, record: Record) -> Record:
    """Write ``record`` atomically as its point's ``result.json`` and return it."""
    write_record(sweep_dir, record)
    return record


def internal_error(spec: PointSpec, overrides: list[str], sweep_dir: Path, sweep_id: str, exc: BaseException) -> Record:
    """Record a failure of sweeper's own code on one point (status ``error``, kind ``internal``) so that the grid
    goes on and the report is written; the reason carries the exception's type and text, literally.

    Returns:
        The record written, or an unwritten one when even writing failed (e.g. a full disk; the reason says so).
    """
    import traceback

    pid = point_id(spec)
    record = Record(
        status="error",
        error_kind="internal",
        reason=f"sweeper failed on this point (a bug, please report it): {type(exc).__name__}: {exc}",
        failure={"traceback": traceback.format_exc()[-4000:]},
        **_base(sweep_id, pid, overrides, spec, None),
    )
    try:
        path = point_dir(Path(sweep_dir), pid) / RESULT_FILE
        if not path.exists():
            write(Path(sweep_dir), record)
    except OSError as e:
        record.reason += f"; the record could not be written to {path.parent}: {e}"
    return record
