"""What the SLURM site allows, read once per sweep, and what it refuses: before ``sbatch`` and after it.

- :func:`read_site` asks ``scontrol show config`` (``MaxArraySize``, ``MaxJobCount``) and ``scontrol -o show
  partition`` (each partition's ``MaxTime``, ``MaxNodes``, ``TotalNodes``, ``State``, which one is the default).
- :func:`never_runs` says why a point can never run in its partition (more nodes than the partition has or allows, a
  time limit above its ``MaxTime``, a partition that does not exist), naming the sweeper keys; the launcher records
  such a point ``invalid`` without submitting it.
- :func:`array_chunk` is the largest array the site accepts: the launcher splits a larger group into several arrays
  (submitit has no array splitting).
- :func:`sbatch_fix` turns an ``sbatch`` refusal into what to change.
- :data:`NEVER_STARTS` holds the pending reasons SLURM gives a job that cannot start without someone changing the
  job or the site (https://slurm.schedmd.com/job_reason_codes.html); :func:`pending_text` explains a reason.

Sources: ``slurm.conf(5)`` (``MaxArraySize``: "the maximum job array task index value will be one less than
MaxArraySize", so an array may hold ``MaxArraySize`` tasks, 0 .. MaxArraySize-1; ``MaxJobCount``), ``scontrol(1)``,
``sbatch(1)``; the wordings were taken from SLURM 22.05 on the development cluster (slurm/).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

#: Pending reasons of a job that will never start as it is: a limit of the partition, QOS or association, a
#: constraint no node has, an unknown account or QOS, a dependency that can no longer be met. Each maps to what to
#: change. Reasons that can resolve on their own (``Resources``, ``Priority``, ``ReqNodeNotAvail`` for a node that
#: is down or drained, ``PartitionDown``, ``BeginTime``, ``JobHeldUser``...) are not here: those jobs stay pending,
#: with the reason shown.
NEVER_STARTS: dict[str, str] = {
    "PartitionNodeLimit": "the job asks more nodes than the partition allows (its MaxNodes or its node count): "
    "lower nodes or pick another cluster.partition",
    "PartitionTimeLimit": "the job's time limit is above the partition's MaxTime: lower cluster.time_limit_min "
    "(or timeout_s, which sets it when cluster.time_limit_min is null) or pick another cluster.partition",
    "QOSMaxWallDurationPerJobLimit": "the job's time limit is above its QOS's MaxWall: lower cluster.time_limit_min "
    "or pick another cluster.qos",
    "QOSMaxNodePerJobLimit": "the job asks more nodes than its QOS allows per job: lower nodes or pick another "
    "cluster.qos",
    "QOSMaxCpuPerJobLimit": "the job asks more CPUs than its QOS allows per job: lower cluster.cpus_per_task, "
    "ranks_per_node or nodes, or pick another cluster.qos",
    "QOSMaxGRESPerJob": "the job asks more GPUs than its QOS allows per job: lower nodes or cluster.gpus_per_node, or "
    "pick another cluster.qos",
    "QOSMaxMemoryPerJob": "the job asks more memory than its QOS allows per job: lower cluster.mem or pick another "
    "cluster.qos",
    "AssocMaxWallDurationPerJobLimit": "the job's time limit is above what its account allows: lower "
    "cluster.time_limit_min or use another cluster.account",
    "AssocMaxNodesPerJobLimit": "the job asks more nodes than its account allows per job: lower nodes or use another "
    "cluster.account",
    "AssocMaxCpuPerJobLimit": "the job asks more CPUs than its account allows per job: lower the ranks or CPUs, or use "
    "another cluster.account",
    "BadConstraints": "no node of the partition has the requested features: fix cluster.constraint",
    "InvalidQOS": "the QOS is not valid for this account or partition: fix cluster.qos",
    "InvalidAccount": "the account does not exist or may not use this partition: fix cluster.account",
    "DependencyNeverSatisfied": "the job depends on a job that failed: remove the dependency (cluster.sbatch_extra)",
}

#: Reasons shown with a hint while the job waits (they can resolve without a change).
WAITING: dict[str, str] = {
    "Resources": "waiting for free nodes",
    "Priority": "other jobs go first",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved (see `sinfo -R`)",
    "PartitionDown": "the partition is down (see `sinfo`)",
    "PartitionInactive": "the partition is inactive (see `sinfo`)",
    "BeginTime": "not before its begin time (a requeued job waits a little before it restarts)",
    "JobArrayTaskLimit": "the array's --array=...%N limit (cluster.array_parallelism) is reached",
    "JobHeldUser": "held by its user (`scontrol release <job>`)",
    "JobHeldAdmin": "held by an administrator",
    "QOSMaxJobsPerUserLimit": "the QOS's running-jobs limit per user is reached",
    "AssocMaxJobsLimit": "the account's running-jobs limit is reached",
    "Dependency": "waiting for a job it depends on",
    # "Requested partition configuration not available now" (job_reason_codes); seen for a moment on the dev
    # cluster for a job that then showed PartitionTimeLimit, so not taken as final
    "PartitionConfig": "the partition cannot give what the job asks now (nodes, CPUs, memory or GPUs)",
}


@dataclass(frozen=True)
class Partition:
    """One partition as ``scontrol -o show partition`` describes it.

    Attributes:
        name: the partition name.
        max_time_min: ``MaxTime`` in minutes, None for ``UNLIMITED``/``INFINITE``.
        max_nodes: ``MaxNodes`` (per job), None for ``UNLIMITED``.
        total_nodes: ``TotalNodes``, the nodes the partition has.
        state: ``State`` (``UP``, ``DOWN``, ``DRAIN``, ``INACTIVE``).
        default: ``Default=YES``.
    """

    name: str
    max_time_min: int | None
    max_nodes: int | None
    total_nodes: int | None
    state: str
    default: bool


@dataclass(frozen=True)
class Site:
    """The site's limits that decide what ``sbatch`` accepts and what can ever start.

    Attributes:
        max_array_size: ``MaxArraySize``: an array holds at most this many tasks (indices 0 .. MaxArraySize-1);
            1 means arrays are disabled.
        max_job_count: ``MaxJobCount``: jobs slurmctld keeps at once (None when not said).
        partitions: by name.
    """

    max_array_size: int
    max_job_count: int | None
    partitions: dict[str, Partition] = field(default_factory=dict)

    def partition(self, name: str | None) -> Partition | None:
        """The partition ``name``, or the default partition when ``name`` is None; None when there is none."""
        if name is not None:
            return self.partitions.get(name)
        return next((p for p in self.partitions.values() if p.default), None)


def parse_time_min(text: str) -> int | None:
    """A SLURM time (``UNLIMITED``, ``INFINITE``, ``minutes``, ``[days-]hh:mm:ss``, ``mm:ss``) in whole minutes,
    rounded up; None for no limit.

    Raises:
        ValueError: text SLURM does not write for a time.
    """
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days = 0
    if "-" in t:
        d, t = t.split("-", 1)
        days = int(d)
    parts = [int(p) for p in t.split(":")]
    if len(parts) == 1:  # minutes
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:  # minutes:seconds
        h, m, s = 0, parts[0], parts[1]
    elif len(parts) == 3:
        h, m, s = parts
    else:
        raise ValueError(f"not a SLURM time: {text!r}")
    return days * 1440 + h * 60 + m + (1 if s else 0)


def _limit(text: str | None) -> int | None:
    return None if text is None or text.upper() in ("UNLIMITED", "INFINITE", "N/A") else int(text)


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as ``{key: value}`` (lines ``Key = Value``)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_partitions(text: str) -> dict[str, Partition]:
    """``scontrol -o show partition``: one partition per line of ``Key=Value`` words."""
    parts: dict[str, Partition] = {}
    for line in text.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "PartitionName" not in kv:
            continue
        total = kv.get("TotalNodes")
        parts[kv["PartitionName"]] = Partition(
            name=kv["PartitionName"],
            max_time_min=parse_time_min(kv.get("MaxTime", "UNLIMITED")),
            max_nodes=_limit(kv.get("MaxNodes")),
            total_nodes=int(total) if total and total.isdigit() else None,
            state=kv.get("State", "UP"),
            default=kv.get("Default", "NO") == "YES",
        )
    return parts


def site_from_text(config_text: str, partitions_text: str) -> Site:
    """The :class:`Site` of ``scontrol show config`` and ``scontrol -o show partition`` output."""
    conf = parse_config(config_text)
    count = conf.get("MaxJobCount")
    return Site(
        max_array_size=int(conf.get("MaxArraySize", "1001")),
        max_job_count=int(count) if count and count.isdigit() else None,
        partitions=parse_partitions(partitions_text),
    )


def read_site(timeout_s: float = 30.0) -> tuple[Site | None, str | None]:
    """Ask this machine's SLURM controller for its limits (two ``scontrol`` calls).

    Returns:
        ``(site, None)``, or ``(None, why)`` when ``scontrol`` is missing or fails: the sweep is then submitted
        without the checks (``sbatch`` still refuses what it refuses, and each refusal is recorded).
    """
    if shutil.which("scontrol") is None:
        return None, "scontrol not found"
    try:
        conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=timeout_s)
        part = subprocess.run(
            ["scontrol", "-o", "show", "partition"], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"scontrol: {e}"
    if conf.returncode != 0 or part.returncode != 0:
        return None, f"scontrol failed: {(conf.stderr or part.stderr).strip()}"
    return site_from_text(conf.stdout, part.stdout), None


def array_chunk(site: Site | None) -> int | None:
    """The most tasks one array may hold on ``site`` (``MaxArraySize``, and not above ``MaxJobCount``); None when
    the site is not known (submit each group as one array)."""
    if site is None:
        return None
    limit = max(1, site.max_array_size)
    if site.max_job_count:
        limit = min(limit, site.max_job_count)
    return limit


def never_runs(
    site: Site | None, partition_name: str | None, nodes: int, time_min: int, time_key: str
) -> tuple[str, tuple[str, ...]] | None:
    """Why a job of ``nodes`` nodes and ``time_min`` minutes can never run in the partition, or None.

    Args:
        site: the site's limits (None: not known, nothing refused).
        partition_name: ``cluster.partition`` (None: the site's default partition).
        nodes: the point's ``nodes``.
        time_min: the job's ``--time`` in minutes.
        time_key: the key that set the time (``cluster.time_limit_min``, or ``timeout_s`` when that is null).

    Returns:
        ``(message, keys)``: the message names the partition, its limit and the keys to change.
    """
    if site is None:
        return None
    part = site.partition(partition_name)
    if part is None:
        if partition_name is None:
            return None  # no default partition: sbatch says what it wants
        known = ", ".join(sorted(site.partitions)) or "none"
        return (
            f"cluster.partition={partition_name} does not exist on this SLURM site (partitions: {known})",
            ("cluster.partition",),
        )
    label = f"partition {part.name}" + ("" if partition_name else " (the default)")
    if part.total_nodes is not None and nodes > part.total_nodes:
        return (
            f"nodes={nodes} but {label} has {part.total_nodes} node(s): the job could never start "
            "(SLURM would keep it pending for ever); lower nodes or pick another cluster.partition",
            ("nodes", "cluster.partition"),
        )
    if part.max_nodes is not None and nodes > part.max_nodes:
        return (
            f"nodes={nodes} but {label} allows at most {part.max_nodes} node(s) per job (MaxNodes): the job "
            "could never start; lower nodes or pick another cluster.partition",
            ("nodes", "cluster.partition"),
        )
    if part.max_time_min is not None and time_min > part.max_time_min:
        return (
            f"the job's time limit, {time_min} min ({time_key}), is above {label}'s MaxTime of "
            f"{part.max_time_min} min: the job could never start; set {time_key} to at most that, or pick another "
            "cluster.partition",
            (time_key, "cluster.partition"),
        )
    return None


#: Fragments of ``sbatch`` refusals (``sbatch: error: Batch job submission failed: ...``) and what to change.
SBATCH_FIXES: tuple[tuple[str, str], ...] = (
    ("invalid job array specification", "the array is larger than the site's MaxArraySize allows"),
    ("invalid partition", "fix cluster.partition (`sinfo -s` lists the partitions)"),
    ("invalid account", "fix cluster.account (`sacctmgr show assoc user=$USER`)"),
    ("invalid qos", "fix cluster.qos (`sacctmgr show assoc user=$USER format=qos`)"),
    ("node count specification invalid", "lower nodes or pick another cluster.partition"),
    (
        "requested node configuration is not available",
        "lower what one node is asked for (ranks_per_node, "
        "cluster.cpus_per_task, cluster.mem, cluster.gpus_per_node, cluster.constraint) or pick another partition",
    ),
    ("time limit", "lower cluster.time_limit_min (or timeout_s) or pick another cluster.partition"),
    ("memory specification", "lower cluster.mem"),
    (
        "job violates accounting/qos policy",
        "the job passes a limit of its account or QOS (`sacctmgr show qos`): "
        "lower what it asks or use another cluster.qos/cluster.account",
    ),
    ("maxjobcount", "the controller holds its MaxJobCount of jobs: resume later with the same command"),
    ("temporarily unable to accept job", "the controller is busy: resume later with the same command"),
)


def sbatch_fix(message: str) -> str:
    """What to change for an ``sbatch`` refusal ``message`` (:data:`SBATCH_FIXES`); a general line otherwise."""
    low = message.lower()
    for fragment, fix in SBATCH_FIXES:
        if fragment in low:
            return fix
    return "change what sbatch names, then run the same command again (points already recorded are kept)"


def sbatch_message(text: str) -> str:
    """The lines of ``sbatch``'s stderr that say why (``sbatch: error: ...``), joined; the whole text otherwise."""
    lines = [ln.strip() for ln in text.splitlines() if re.match(r"\s*sbatch: error:", ln)]
    return " ".join(lines) if lines else " ".join(text.split())


def pending_text(reason: str | None) -> str:
    """A pending reason with what it means: ``PartitionNodeLimit: the job asks more nodes ...``; the reason alone
    for one not known here (``None`` and ``"None"``: SLURM has not decided yet, shown as such)."""
    if not reason or reason == "None":
        return "no reason given yet"
    key = reason.split(",")[0].split("(")[0].strip()
    why = NEVER_STARTS.get(key) or WAITING.get(key)
    return f"{reason}: {why}" if why else reason


def never_starts(reason: str | None) -> bool:
    """Whether a pending ``reason`` means the job will never start as it is (:data:`NEVER_STARTS`)."""
    return bool(reason) and str(reason).split(",")[0].split("(")[0].strip() in NEVER_STARTS
