"""Real CPU contention, nothing faked: a real 2-rank CPU point runs while three busy-loop processes
(``while True: pass``), pinned with ``os.sched_setaffinity`` to the CPUs the ranks are pinned to (at most 2),
compete for them. The
ranks' training threads then wait on a run queue for a large share of the timed window, and the record says so:
``runqueue_wait_frac`` well above the threshold, ``contended`` true, in results.csv and in report.md. Linux only
(schedstat); one point of about 15-30 s on 2 cores."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from sweeper.config.sections import TimingConfig
from sweeper.job.contention import read_schedstat
from tests.conftest import run_sweeper

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or read_schedstat() is None,
        reason="needs Linux schedstat (/proc/self/task/<tid>/schedstat) and sched_setaffinity",
    ),
]

#: Busy-loop processes competing with the ranks: 3 (more than the 2 cores of the development machine, so both
#: ranks share their CPUs whatever the scheduler does). Each is started in a session of its own: under Linux's
#: autogroup scheduling (``kernel.sched_autogroup_enabled``, on by default) CPU time is shared fairly between
#: sessions first, and the local launcher starts torchrun in a new session, so three loops in the test's own
#: session (shared with pytest and the driver) competed as one group with the ranks' group and were measured to
#: cost a rank's thread 6.6 % of its window (a fresh-clone CI run, 2026-12-05; 0.13-0.6 before). As three sessions
#: they are three groups against the ranks' one.
BUSY = 3
SPIN = "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')})\nwhile True: pass"


def test_a_point_measured_next_to_busy_loops_is_contended(tmp_path):
    mine = os.sched_getaffinity(0)
    cpus = set(sorted(mine)[:2])  # the ranks' CPUs: at most 2, so that the busy loops outnumber them anywhere
    spin = [sys.executable, "-c", SPIN, ",".join(map(str, sorted(cpus)))]
    busy = [subprocess.Popen(spin, start_new_session=True) for _ in range(BUSY)]
    try:
        os.sched_setaffinity(0, cpus)  # inherited by the driver, torchrun and the ranks
        run = run_sweeper(
            [
                "timed_steps=6",
                "warmup_steps=1",
                "memory_steps=1",
                "profile_steps=0",
                "profile_trace=false",
                "wandb=off",
            ],
            tmp_path,
            timeout=300,
        )
    finally:
        os.sched_setaffinity(0, mine)
        for p in busy:  # only the processes this test started, by their own handles
            p.kill()
        for p in busy:
            p.wait()
    assert run.proc.returncode == 0, run.output[-4000:]
    (record,) = list(run.records())
    assert record.status == "ok", record.reason
    frac = record.metrics["runqueue_wait_frac"]
    # 2 ranks + 3 spinning processes on at most 2 CPUs: a rank's thread waits for a large share of the window. How
    # large depends on what else the shared machine runs (0.13 to 0.6 seen, the fresh-clone CI of 9c8cd57 gave
    # 0.135): the test asserts what the product decides, the threshold (timing.contention_warn_frac, 0.1) passed
    assert frac > TimingConfig().contention_warn_frac, frac
    assert record.metrics["contended"] is True
    with (run.sweep_dir / "results.csv").open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["runqueue_wait_frac"]) == pytest.approx(frac) and row["contended"] == "True"
    report = run.report.read_text()
    assert "was measured under CPU contention: a rank's training thread waited" in report
    assert "not certain:" in report.split("\n## ")[0]  # the answer does not present the lone verdict as certain
