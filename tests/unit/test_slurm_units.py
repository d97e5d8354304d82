"""SLURM pieces that need no cluster: signal cause, sbatch parameters, payload pickling, sacct-state mapping."""

from __future__ import annotations

import threading

import pytest

from sweeper.launchers.slurm.accounting import record_from_scheduler
from sweeper.launchers.slurm.in_job import signal_cause
from sweeper.launchers.slurm.submit import PayloadNotPicklable, check_picklable, executor_parameters
from tests.unit.specs import H100_CLUSTER
from tests.unit.specs import make_spec as _spec


@pytest.mark.parametrize(
    ("elapsed", "limit", "delay", "cause"),
    [
        (45, 60, 20, "timeout"),  # a 1-minute job signalled at its limit: a timeout, not a preemption
        (1780, 1800, 90, "timeout"),
        (300, 1800, 90, "preempted"),  # signalled 25 minutes early: preemption
        (1200, 1800, 90, "preempted"),  # submitit would call this a timeout (80 % of the limit)
        (10, 0, 30, "preempted"),  # no limit known
    ],
)
def test_a_signal_is_a_timeout_only_where_the_time_limit_puts_it(elapsed, limit, delay, cause):
    assert signal_cause(elapsed, limit, delay) == cause


def test_sbatch_parameters_come_from_the_cluster_config_and_the_point():
    p = executor_parameters(H100_CLUSTER, _spec(ranks_per_node=8, nodes=2, timeout_s=601), n_tasks=3)
    assert p["nodes"] == 2 and p["ntasks_per_node"] == 8  # one SLURM task per rank
    assert p["time"] == 11  # ceil(601 s / 60)
    assert (p["partition"], p["account"], p["qos"], p["constraint"]) == ("gpu", "proj", "high", "h100")
    assert p["gpus_per_node"] == 8 and p["cpus_per_task"] == 12 and p["mem"] == "0"
    assert p["array_parallelism"] == 4 and p["signal_delay_s"] == 90
    assert p["setup"] == H100_CLUSTER["setup"] and p["additional_parameters"] == {"exclusive": True}


def test_a_payload_holding_a_lock_is_refused_before_sbatch_naming_the_object():
    """Case P08: a thread lock (e.g. inside a logger) cannot be pickled; one clear error, before submission."""
    with pytest.raises(PayloadNotPicklable, match=r"point abc123.*lock"):
        check_picklable({"spec": {}, "logger_lock": threading.Lock()}, "the payload of point abc123")
    check_picklable({"spec": _spec().to_dict()}, "a plain payload")


@pytest.mark.parametrize(
    ("state", "code", "log", "status"),
    [
        ("TIMEOUT", "0:15", "", "timeout"),
        (
            "FAILED",
            "9:0",
            "slurmstepd: error: StepId=28.0 exceeded memory limit (328110080 > 314572800), being killed",
            "host_oom",
        ),
        ("OUT_OF_MEMORY", "0:125", "", "host_oom"),
        ("CANCELLED", "0:0", "", "cancelled"),
        ("PREEMPTED", "0:0", "", "preempted"),
        ("NODE_FAIL", "0:0", "", "error"),
        ("COMPLETED", "0:0", "", "error"),  # ended without writing a result: never silently ok
    ],
)
def test_scheduler_states_become_statuses_with_the_job_facts(state, code, log, status):
    entry = {"job_id": "41_3", "overrides": ["gc=true"], "spec": {"gc": True}, "replay": "python -m sweeper gc=true"}
    job = {"state": state, "exit_code": code, "elapsed_s": 77, "time_limit_s": 60, "reason": ""}
    r = record_from_scheduler(entry, job, log, "sweep1", "p1")
    assert r.status == status
    assert r.failure["slurm_job_id"] == "41_3" and r.failure["slurm_state"] == state
    assert r.failure["elapsed_s"] == 77 and r.failure["time_limit_s"] == 60
    assert "41_3" in r.reason
    if status == "host_oom" and log:
        assert r.failure["host_rss_bytes"] == 328110080 and r.failure["host_mem_limit_bytes"] == 314572800


@pytest.mark.parametrize(
    ("log", "events", "step"),
    [
        (
            "slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM "
            "Killed.\nsrun: error: vm: task 1: Out Of Memory",
            1,
            "1234.0",
        ),
        ("slurmstepd: error: Detected 2 oom-kill event(s) in StepId=88.batch cgroup.", 2, "88.batch"),
        ("slurmstepd: error: 3 oom-kill event(s) in step 77.0 cgroup. Some of your processes may have been", 3, "77.0"),
    ],
)
def test_a_cgroup_oom_kill_is_host_oom_not_a_crash(log, events, step):
    """docs/cases.md#u21: with cgroups, slurmstepd reports the kernel's OOM kill; sacct says FAILED."""
    entry = {"job_id": "12_0", "overrides": [], "spec": {}, "replay": "python -m sweeper"}
    job = {"state": "FAILED", "exit_code": "0:125", "elapsed_s": 30, "time_limit_s": 600, "req_mem": "4G"}
    r = record_from_scheduler(entry, job, log, "sweep1", "p1")
    assert r.status == "host_oom" and r.failure["oom_kill_events"] == events
    assert f"step {step}" in r.reason and "raise cluster.mem" in r.reason and "4G requested" in r.reason


def test_the_rendezvous_port_is_the_jobs_own_outside_the_ephemeral_range():
    from sweeper.launchers.slurm.in_job import RENDEZVOUS_PORTS, rendezvous_port

    ids = ["1234", "1234_0", "1234_1", "99_7", *(str(i) for i in range(500))]
    ports = [rendezvous_port(i) for i in ids]
    assert all(p in RENDEZVOUS_PORTS for p in ports) and RENDEZVOUS_PORTS.stop <= 32768  # Linux's ephemeral start
    assert rendezvous_port("1234_1") == rendezvous_port("1234_1")  # every node of a job derives the same
    assert len(set(ports)) > 0.95 * len(ports)  # array tasks of one array get different ports
