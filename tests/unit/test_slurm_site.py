"""The SLURM site's limits as ``scontrol`` prints them, what can never run in a partition, sbatch's refusals and the
scheduler's pending reasons (texts taken from SLURM 22.05 on the development cluster, slurm/)."""

from __future__ import annotations

import pytest

from sweeper.launchers.slurm.queue import parse_squeue
from sweeper.launchers.slurm.site import (
    NEVER_STARTS,
    array_chunk,
    never_runs,
    never_starts,
    parse_time_min,
    pending_text,
    sbatch_fix,
    sbatch_message,
    site_from_text,
)

CONFIG = """Configuration data as of 2026-12-02T21:05:11
AccountingStorageBackupHost = (null)
EnforcePartLimits       = NO
MaxArraySize            = 1001
MaxJobCount             = 10000
MinJobAge               = 3600
"""
PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL Default=YES QoS=N/A DefaultTime=01:00:00 MaxNodes=UNLIMITED "
    "MaxTime=UNLIMITED MinNodes=0 Nodes=vm State=UP TotalCPUs=2 TotalNodes=1 TRES=cpu=2,mem=23367M,node=1\n"
    "PartitionName=short AllowGroups=ALL Default=NO MaxNodes=4 MaxTime=00:30:00 Nodes=n[1-8] State=UP "
    "TotalCPUs=16 TotalNodes=8\n"
    "PartitionName=long Default=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 Nodes=n[1-8] State=DOWN TotalNodes=8\n"
)


def site():
    return site_from_text(CONFIG, PARTITIONS)


def test_the_site_is_read_as_scontrol_prints_it():
    s = site()
    assert (s.max_array_size, s.max_job_count) == (1001, 10000)
    assert s.partition(None).name == "debug"  # Default=YES
    short = s.partition("short")
    assert (short.max_time_min, short.max_nodes, short.total_nodes, short.state) == (30, 4, 8, "UP")
    assert s.partition("long").max_time_min == 2880 and s.partition("long").state == "DOWN"
    assert s.partition("debug").max_time_min is None and s.partition("debug").max_nodes is None
    assert s.partition("nosuch") is None


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("30", 30),
        ("01:00:00", 60),
        ("00:00:30", 1),
        ("1-02:03:00", 1563),
        ("05:30", 6),
    ],
)
def test_slurm_times_in_minutes(text, minutes):
    assert parse_time_min(text) == minutes


def test_arrays_are_split_at_max_array_size_and_never_above_max_job_count():
    assert array_chunk(site()) == 1001  # indices 0..1000 (slurm.conf: one less than MaxArraySize)
    assert array_chunk(site_from_text("MaxArraySize = 10001\nMaxJobCount = 500\n", "")) == 500
    assert array_chunk(site_from_text("MaxArraySize = 1\n", "")) == 1  # arrays disabled: one task each
    assert array_chunk(None) is None


def test_what_a_partition_can_never_run_is_refused_naming_the_keys_and_the_limit():
    s = site()
    msg, keys = never_runs(s, None, 2, 60, "timeout_s")
    assert keys == ("nodes", "cluster.partition") and "debug (the default) has 1 node" in msg
    msg, keys = never_runs(s, "short", 5, 10, "timeout_s")
    assert "at most 4 node(s)" in msg and "MaxNodes" in msg
    msg, keys = never_runs(s, "short", 2, 45, "cluster.time_limit_min")
    assert keys == ("cluster.time_limit_min", "cluster.partition") and "MaxTime of 30 min" in msg and "45 min" in msg
    msg, keys = never_runs(s, "gpu", 1, 10, "timeout_s")
    assert keys == ("cluster.partition",) and "debug, long, short" in msg
    assert never_runs(s, "short", 4, 30, "timeout_s") is None  # at the limits: fine
    assert never_runs(s, "long", 8, 2880, "timeout_s") is None  # DOWN can come back: not refused, shown pending
    assert never_runs(None, "short", 64, 10**6, "timeout_s") is None  # site unknown: sbatch decides


def test_sbatch_refusals_say_what_to_change():
    err = (
        "sbatch: error: Batch job submission failed: Invalid job array specification\n"
        "Traceback (most recent call last): ..."
    )
    assert sbatch_message(err) == "sbatch: error: Batch job submission failed: Invalid job array specification"
    assert "MaxArraySize" in sbatch_fix(sbatch_message(err))
    said = "sbatch: error: invalid partition specified: nosuch sbatch: error: Batch job submission failed: ..."
    assert "cluster.partition" in sbatch_fix(said)
    assert "ranks_per_node" in sbatch_fix("Requested node configuration is not available")
    assert "same command" in sbatch_fix("something new")


def test_pending_reasons_are_explained_and_those_that_never_resolve_known():
    assert never_starts("PartitionTimeLimit") and never_starts("QOSMaxWallDurationPerJobLimit")
    assert not never_starts("Resources") and not never_starts("ReqNodeNotAvail, UnavailableNodes:n3")
    assert not never_starts(None) and not never_starts("None")
    assert "cluster.time_limit_min" in pending_text("PartitionTimeLimit")
    assert "sinfo -R" in pending_text("ReqNodeNotAvail, UnavailableNodes:n3")
    assert pending_text("None") == "no reason given yet"
    assert pending_text("SomethingNew") == "SomethingNew"
    assert all("cluster." in fix or "nodes" in fix for fix in NEVER_STARTS.values())  # each names what to change


def test_squeue_lines_one_per_array_task():
    text = "96_0|PENDING|PartitionNodeLimit\n96_1|PENDING|PartitionNodeLimit\n97|RUNNING|None\n"
    assert parse_squeue(text) == {
        "96_0": {"state": "PENDING", "reason": "PartitionNodeLimit"},
        "96_1": {"state": "PENDING", "reason": "PartitionNodeLimit"},
        "97": {"state": "RUNNING", "reason": "None"},
    }


def test_docs_slurm_state_table_equals_the_code_and_each_state_records_so():
    import re

    from sweeper.launchers.slurm.accounting import STATE_OUTCOMES, record_from_scheduler
    from tests.conftest import REPO

    text = (REPO / "docs" / "slurm.md").read_text()
    table = text.split("<!-- slurm-states -->")[1].split("<!-- /slurm-states -->")[0]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows[cells[0]] = (cells[1], cells[2] or None)
    assert rows == STATE_OUTCOMES
    entry = {"job_id": "7_1", "overrides": [], "spec": {}}
    for state, (status, kind) in STATE_OUTCOMES.items():
        job = {"state": state, "exit_code": "1:0", "elapsed_s": 3, "time_limit_s": 60, "reason": "None"}
        r = record_from_scheduler(entry, job, "", "s", "p")
        assert (r.status, r.error_kind) == (status, kind), state
        assert re.search(r"7_1", r.reason), r.reason
