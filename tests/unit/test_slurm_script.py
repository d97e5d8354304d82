"""The sbatch script a point becomes (golden file) and sacct parsing on canned output: no cluster needed.

Regenerate the golden file after a deliberate change with ``SWEEPER_UPDATE_GOLDEN=1 pytest tests/unit/test_slurm_script.py``
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

from submitit.slurm.slurm import _make_sbatch_string

from sweeper.launchers.slurm.accounting import expand_array_tasks, parse_sacct
from sweeper.launchers.slurm.submit import executor_parameters
from tests.unit.specs import H100_CLUSTER
from tests.unit.specs import make_spec as _spec

GOLDEN = Path(__file__).parent / "golden" / "sbatch_h100_2x8.sh"


def test_the_sbatch_script_of_a_two_node_point_matches_the_golden_file():
    params = executor_parameters(H100_CLUSTER, _spec(ranks_per_node=8, nodes=2, timeout_s=601), n_tasks=3)
    text = _make_sbatch_string(
        command="python -u -m submitit.core._submit /sweep/slurm/%j", folder="/sweep/slurm/%j", map_count=3, **params
    )
    if os.environ.get("SWEEPER_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --time=11",
        "#SBATCH --signal=USR2@90",
        "#SBATCH --array=0-2%3",  # min(array_parallelism, points)
        "#SBATCH --partition=gpu",
        "#SBATCH --qos=high",
        "#SBATCH --exclusive",
    ):
        assert line in text.splitlines(), line


CANNED = """\
101_0|COMPLETED|0:0|35|2|
101_1|TIMEOUT|0:15|125|2|TimeLimit
102|PREEMPTED|0:0|40|10|
102|RUNNING|0:0|12|10|None
103|CANCELLED by 0|0:15|7|Partition_Limit|
104|FAILED|9:0|3||
garbage line without separators
"""


def test_array_tasks_cancelled_while_pending_are_listed_one_by_one():
    """sacct shows pending array tasks as one line (``287_[0-1%1]``); cancelled before they start, that line is all
    there is of them: each task gets its state, and a line of a task that did start stays."""
    text = "287_0|CANCELLED by 0|0:0|3|1||\n287_[1-2,5%1]|CANCELLED by 0|0:0|0|1||\n288_[0]|PENDING|0:0|0|1|Priority|\n"
    info = parse_sacct(text)
    assert set(info) == {"287_0", "287_1", "287_2", "287_5", "288_0"}
    assert info["287_0"]["elapsed_s"] == 3  # its own line, not the range's
    assert info["287_1"]["state"] == info["287_5"]["state"] == "CANCELLED"
    assert info["288_0"]["state"] == "PENDING" and info["288_0"]["reason"] == "Priority"
    assert expand_array_tasks("287_[0-1%1]") == ["287_0", "287_1"]
    assert expand_array_tasks("287_3") is None and expand_array_tasks("288") is None
    assert expand_array_tasks("287_[x-1]") is None
    assert parse_sacct("300|FAILED|0:125|30|10||4G\n")["300"]["req_mem"] == "4G"  # the ReqMem column


def test_an_older_job_with_the_same_id_never_hides_the_newest():
    """Job ids restart when a controller loses its state (and wrap at ``MaxJobId``); ``sacct -D -j 5`` then lists the
    old job 5 too, in no order the parser may rely on: the line submitted last is the job. A requeued job's runs share
    its Submit time and keep "the last line wins"; an old array's range line never replaces a newer task's line."""
    old = "5|CANCELLED by 0|0:0|0|2||1G|2026-12-04T21:10:00"
    new = "5|COMPLETED|0:0|3|2||1G|2026-12-05T06:10:00"
    for text in (f"{old}\n{new}\n", f"{new}\n{old}\n"):
        assert parse_sacct(text)["5"]["state"] == "COMPLETED", text
    requeued = "7|PREEMPTED|0:0|40|10||1G|2026-12-05T06:00:00\n7|RUNNING|0:0|12|10|None|1G|2026-12-05T06:00:00\n"
    assert parse_sacct(requeued)["7"]["state"] == "RUNNING"
    tasks = "9_0|COMPLETED|0:0|3|2||1G|2026-12-05T06:10:00\n9_[0-1]|CANCELLED by 0|0:0|0|2||1G|2026-12-04T21:00:00\n"
    info = parse_sacct(tasks)
    assert info["9_0"]["state"] == "COMPLETED" and info["9_1"]["state"] == "CANCELLED"
    assert (
        parse_sacct("9_[0-1]|CANCELLED by 0|0:0|0|2||1G|2026-12-04T21:00:00\n" + tasks.splitlines()[0])["9_0"]["state"]
        == "COMPLETED"
    )


def test_sacct_lines_are_parsed_into_states_seconds_and_the_current_run_of_a_requeued_job():
    info = parse_sacct(CANNED)
    assert set(info) == {"101_0", "101_1", "102", "103", "104"}
    assert info["101_0"] == {
        "state": "COMPLETED",
        "exit_code": "0:0",
        "elapsed_s": 35,
        "time_limit_s": 120,
        "reason": "",
        "req_mem": None,  # no ReqMem column in these lines
    }
    assert info["101_1"]["state"] == "TIMEOUT" and info["101_1"]["time_limit_s"] == 120
    assert info["102"]["state"] == "RUNNING" and info["102"]["elapsed_s"] == 12  # -D: the last run wins
    assert info["103"]["state"] == "CANCELLED" and info["103"]["time_limit_s"] is None
    assert info["104"]["exit_code"] == "9:0" and info["104"]["time_limit_s"] is None


def test_cluster_values_are_taken_as_given_and_the_schema_fills_the_rest():
    """A typed cluster config, no ``or <default>`` fallbacks: ``signal_delay_s=0`` (no early signal) stays 0, an
    explicit time limit wins over the point's timeout, and keys not given take the schema's defaults (30 s, 64 at
    once, 1 CPU per task); a key the schema does not have is refused."""
    import pytest

    from sweeper.launchers.slurm.submit import job_callable

    spec = _spec(timeout_s=601)
    zero = executor_parameters({"name": "c", "signal_delay_s": 0, "time_limit_min": 3}, spec, n_tasks=1)
    assert zero["signal_delay_s"] == 0 and zero["time"] == 3
    bare = executor_parameters({"name": "c"}, spec, n_tasks=1)
    assert (bare["signal_delay_s"], bare["array_parallelism"], bare["cpus_per_task"], bare["time"]) == (30, 64, 1, 11)
    assert (job_callable({"name": "c"}).max_requeues, job_callable({"name": "c"}).signal_delay_s) == (2, 30)
    given = job_callable({"name": "c", "max_requeues": 0, "signal_delay_s": 0})
    assert (given.max_requeues, given.signal_delay_s) == (0, 0)
    with pytest.raises(TypeError, match="no key gpus"):
        executor_parameters({"name": "c", "gpus": 8}, spec, n_tasks=1)
