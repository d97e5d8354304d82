"""CPU contention of a point's timed window: the Linux schedstat reading in each rank (a real read while a busy
thread runs, and fake files for the parsing edge cases), the driver's ``runqueue_wait_frac`` and its threshold
``timing.contention_warn_frac``, the ``runqueue_wait_frac``/``contended`` columns, and the report's wording (with
outside text escaped). No ranks run here; tests/integration/test_timed_auto.py runs real ones."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

import sweeper.job.timing as measure
from sweeper.job.contention import parse_schedstat, read_schedstat, read_steal, schedstat_delta
from sweeper.job.timing import StepTimer, Windows
from sweeper.report import build_report
from sweeper.report.headline import answer
from sweeper.report.notes import contention_notes, contention_sentence, method_notes
from sweeper.report.tables import results_details_table
from sweeper.results.columns import BY_NAME, COLUMNS
from sweeper.results.metrics import contention_warn_frac, metrics_from_ranks, runqueue_wait_frac, steal_frac
from sweeper.results.row import records_to_frame
from sweeper.results.stats import StopRule
from sweeper.results.sweepdir import SweepDir
from tests.unit.specs import make_spec
from tests.unit.test_report import GIB, ok_point, read_md
from tests.unit.test_report_markup import Page
from tests.unit.trainer_loop import run_steps

AXES = ["fsdp", "gc"]
LINUX_SCHEDSTAT = sys.platform.startswith("linux") and read_schedstat() is not None


# ---- parsing (fake file content) ----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("169017 5138026 2\n", (169017, 5138026)),
        ("0 0 0", (0, 0)),
        ("  12   34   5  \n", (12, 34)),
        ("", None),
        ("1 2", None),  # too few fields
        ("1 2 3 4", None),  # too many
        ("1 -2 3", None),  # a sign
        ("1.5 2 3", None),  # not an integer
        ("a b c", None),
    ],
)
def test_parse_schedstat_reads_cpu_and_wait_nanoseconds_or_refuses(text, expected):
    assert parse_schedstat(text) == expected


def _tasks(root: Path, files: dict[str, str | None]) -> str:
    """A fake ``/proc/self/task``: one directory per thread id, with its ``schedstat`` (None: no file)."""
    for tid, text in files.items():
        (root / tid).mkdir(parents=True)
        if text is not None:
            (root / tid / "schedstat").write_text(text)
    return str(root)


def test_read_schedstat_sums_nothing_itself_and_skips_a_vanished_thread(tmp_path: Path):
    root = _tasks(tmp_path / "task", {"10": "100 20 3\n", "11": "5 7 1\n", "12": None, "notatid": None})
    assert read_schedstat(root) == {10: (100, 20), 11: (5, 7)}  # 12 exited between listing and reading


@pytest.mark.parametrize(
    "files",
    [
        {"10": "100 20 3\n", "11": "garbage\n"},  # a parse error anywhere: no reading rather than a partial one
        {"10": "0 0 0\n", "11": "0 0 0\n"},  # scheduler statistics off (the kernel writes zeros)
        {"12": None},  # no thread readable
        {},
    ],
)
def test_read_schedstat_gives_none_when_the_counters_cannot_be_read(tmp_path: Path, files):
    assert read_schedstat(_tasks(tmp_path / "task", files)) is None


def test_read_schedstat_gives_none_without_a_task_directory(tmp_path: Path):
    assert read_schedstat(str(tmp_path / "missing")) is None


def test_schedstat_delta_counts_new_threads_whole_and_vanished_ones_not_at_all():
    start = {1: (1_000_000_000, 100_000_000), 2: (5, 5), 3: (900, 900)}
    end = {1: (3_000_000_000, 600_000_000), 3: (10, 20), 4: (500_000_000, 250_000_000)}
    # thread 1: +2 s cpu, +0.5 s wait; 2 exited (not counted); 3 is a reused id (counts whole); 4 is new
    cpu, wait = schedstat_delta(start, end)
    assert cpu == pytest.approx(2.5 + 10e-9)
    assert wait == pytest.approx(0.75 + 20e-9)


# ---- a real read (Linux) ----


@pytest.mark.skipif(not LINUX_SCHEDSTAT, reason="needs Linux schedstat (/proc/self/task/<tid>/schedstat)")
def test_a_real_read_while_a_busy_thread_spins_grows_the_cpu_time():
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    busy = threading.Thread(target=spin, daemon=True)
    busy.start()
    try:
        start = read_schedstat()
        t0 = time.monotonic()
        time.sleep(0.4)  # the main thread sleeps (neither field grows for it); the busy thread runs or waits
        end = read_schedstat()
        wall = time.monotonic() - t0
    finally:
        stop.set()
        busy.join()
    assert start is not None and end is not None
    assert busy.native_id in start and busy.native_id in end  # every thread of the process is read
    cpu, wait = schedstat_delta(start, end)
    assert cpu > 0.1  # the spinning thread ran (it holds the GIL most of the time), even on a loaded machine
    assert wait >= 0
    assert cpu + wait <= 2 * wall + 0.05  # at most two runnable threads (busy, and the main one while reading)


# ---- StepTimer: where the readings are taken ----


def _drive(rule: StopRule | None, times: list[float], monkeypatch, warmup: int = 2, cap: int = 10, schedstat=True):
    """Run a StepTimer through steps with a fake step clock and fake schedstat readings; returns (timer, events):
    the order of step-clock reads ("clock <step>") and schedstat reads ("sched <step>")."""
    w = Windows(warmup, cap, 1, 0, rule)
    timer = StepTimer(w, cuda=False)
    events: list[str] = []
    clock = iter(x for t in [0.1] * warmup + times + [0.1] * 10 for x in (0.0, t))
    current = {"step": 0}
    reads = iter(range(1, 1000))

    def fake_clock() -> float:
        events.append(f"clock {current['step']}")
        return next(clock)

    def fake_read() -> dict[int, tuple[int, int]] | None:
        events.append(f"sched {current['step']}")
        n = next(reads)  # the calling thread is the training thread
        return {threading.get_native_id(): (n * 1_000_000_000, n * 100_000_000)} if schedstat else None

    monkeypatch.setattr(measure.time, "perf_counter", fake_clock)
    monkeypatch.setattr(measure, "read_schedstat", fake_read)
    run_steps(timer, warmup + cap + 1, before_step=lambda step: current.update(step=step))
    return timer, events


def test_the_timer_reads_schedstat_outside_the_clock_of_the_first_and_last_timed_step(monkeypatch):
    timer, events = _drive(None, [1.0] * 10, monkeypatch)
    assert [e for e in events if e.startswith("sched")] == ["sched 2", "sched 11"]  # 0-based steps 2 and 11
    first, last = events.index("sched 2"), events.index("sched 11")
    assert events[first + 1] == "clock 2"  # before the first timed step's clock starts
    assert events[last - 1] == "clock 11" and events[last - 2] == "clock 11"  # after the last one's clock stopped
    c = timer.contention()
    assert c["cpu_s"] == pytest.approx(1.0) and c["runqueue_wait_s"] == pytest.approx(0.1)
    assert c["threads"] == 1 and c["wall_s"] >= 0


def test_with_timed_steps_auto_the_window_ends_where_the_rule_ended_it(monkeypatch):
    timer, events = _drive(StopRule(0.5, 8, 10), [1.0] * 10, monkeypatch)
    assert timer.windows.timed == range(2, 10) and timer.windows.stop_reason == "ci"
    assert [e for e in events if e.startswith("sched")] == ["sched 2", "sched 9"]
    assert timer.contention()["runqueue_wait_s"] == pytest.approx(0.1)


def test_unreadable_schedstat_records_none_and_the_steps_go_on(monkeypatch):
    timer, _ = _drive(None, [1.0] * 10, monkeypatch, schedstat=False)
    c = timer.contention()
    assert c["runqueue_wait_s"] is None and c["cpu_s"] is None and c["threads"] is None
    assert c["wall_s"] is not None and len(timer.times_s) == 10


def test_a_window_that_never_ended_has_no_numbers():
    timer = StepTimer(Windows(1, 10, 1, 0), cuda=False)
    assert set(timer.contention().values()) == {None}


# ---- driver: the fraction and the threshold ----


def _rank(wait: float | None, wall: float | None) -> dict:
    return {"rank": 0, "schedstat": {"runqueue_wait_s": wait, "cpu_s": 1.0, "wall_s": wall, "threads": 20}}


def test_runqueue_wait_frac_is_the_max_over_ranks_of_wait_over_wall():
    assert runqueue_wait_frac([_rank(0.5, 10.0), _rank(2.0, 8.0)]) == pytest.approx(0.25)
    assert runqueue_wait_frac([_rank(None, 10.0), _rank(1.0, 10.0)]) == pytest.approx(0.1)
    assert runqueue_wait_frac([_rank(None, None), {"rank": 1}]) is None  # unreadable, older rank file
    assert runqueue_wait_frac([_rank(1.0, 0.0), _rank(float("nan"), 1.0), _rank(True, 1.0)]) is None
    assert runqueue_wait_frac([]) is None


def test_a_point_above_the_threshold_is_contended():
    spec = make_spec()
    assert contention_warn_frac(spec) == 0.1  # the schema's default
    m = metrics_from_ranks(spec, [_rank(0.4, 10.0), _rank(1.2, 10.0)])
    assert m["runqueue_wait_frac"] == pytest.approx(0.12) and m["contended"] is True
    loose = make_spec(timing={"contention_warn_frac": 0.2})
    assert metrics_from_ranks(loose, [_rank(1.2, 10.0)])["contended"] is False
    at = metrics_from_ranks(spec, [_rank(1.0, 10.0)])  # not above it
    assert at["contended"] is False
    assert "runqueue_wait_frac" not in metrics_from_ranks(spec, [{"rank": 0}])  # no reading: no verdict


def test_the_threshold_is_a_budget_not_identity():
    from sweeper.point.identity import point_id

    a, b = make_spec(), make_spec(timing={"contention_warn_frac": 0.5})
    assert a.timing.contention_warn_frac == 0.1 and b.timing.contention_warn_frac == 0.5
    assert point_id(a) == point_id(b)


# ---- the row ----


def _contended(pid: str, fsdp: str, gc: bool, tps: float, mem: int, frac: float | None, contended: bool | None):
    r = ok_point(pid, fsdp, gc, tps, mem)
    if frac is not None:
        r = dataclasses.replace(r, metrics={**r.metrics, "runqueue_wait_frac": frac, "contended": contended})
    return r


def test_the_row_has_typed_documented_contention_columns_next_to_the_interval():
    names = [c.name for c in COLUMNS]
    assert names.index("runqueue_wait_frac") == names.index("timed_stop") + 1
    assert names.index("steal_frac") == names.index("runqueue_wait_frac") + 1
    assert names.index("contended") == names.index("steal_frac") + 1
    assert BY_NAME["steal_frac"].unit == "fraction" and "/proc/stat" in BY_NAME["steal_frac"].doc
    assert BY_NAME["runqueue_wait_frac"].unit == "fraction" and BY_NAME["contended"].dtype == "boolean"
    assert "schedstat" in BY_NAME["runqueue_wait_frac"].doc and "contention_warn_frac" in BY_NAME["contended"].doc
    df = records_to_frame(
        [
            _contended("aaaa00000001", "none", True, 5000.0, GIB, 0.23, True),
            _contended("aaaa00000002", "none", False, 4000.0, GIB, 0.01, False),
            _contended("aaaa00000003", "full_shard", True, 3000.0, GIB, None, None),  # an older record
        ]
    )
    assert str(df["runqueue_wait_frac"].dtype) == "float64" and str(df["contended"].dtype) == "boolean"
    assert df["runqueue_wait_frac"].tolist()[:2] == [0.23, 0.01]
    assert df["contended"].tolist()[:2] == [True, False] and df["contended"].isna().tolist()[2]


# ---- hypervisor steal (/proc/stat): what a virtual machine loses that schedstat cannot see ----


def test_read_steal_is_psutils_host_steal_in_seconds_and_the_cpu_count():
    import psutil

    got = read_steal()
    assert got is not None and got[1] == psutil.cpu_count() >= 1  # this machine (the CI runs on Linux)
    assert got[0] == pytest.approx(psutil.cpu_times().steal, abs=1.0)  # seconds, summed over CPUs, since boot


def test_read_steal_is_none_where_psutil_reports_no_steal(monkeypatch):
    import collections

    import psutil

    no_steal = collections.namedtuple("scputimes", "user system idle")(1.0, 2.0, 3.0)  # psutil off Linux
    monkeypatch.setattr(psutil, "cpu_times", lambda: no_steal)
    assert read_steal() is None

    def unreadable():
        raise OSError("no /proc")

    monkeypatch.setattr(psutil, "cpu_times", unreadable)
    assert read_steal() is None


def test_the_timer_keeps_the_steal_of_the_timed_window(monkeypatch):
    readings = iter([(10.0, 2), (10.6, 2)])
    monkeypatch.setattr(measure, "read_steal", lambda: next(readings))
    timer, _ = _drive(None, [1.0] * 10, monkeypatch)
    c = timer.contention()
    assert c["steal_s"] == pytest.approx(0.6) and c["cpus"] == 2


def _steal_rank(steal: float | None, wall: float = 10.0, cpus: int = 2, wait: float = 0.1) -> dict:
    return {
        "rank": 0,
        "schedstat": {
            "runqueue_wait_s": wait,
            "cpu_s": 1.0,
            "wall_s": wall,
            "threads": 4,
            "steal_s": steal,
            "cpus": cpus,
        },
    }


def test_steal_frac_is_the_hosts_stolen_share_and_alone_makes_a_point_contended():
    assert steal_frac([_steal_rank(3.0), _steal_rank(1.0)]) == pytest.approx(0.15)  # 3 s of 10 s x 2 CPUs
    assert steal_frac([_steal_rank(None), {"rank": 1}]) is None
    m = metrics_from_ranks(make_spec(), [_steal_rank(3.0), _steal_rank(3.0)])
    assert m["runqueue_wait_frac"] == pytest.approx(0.01) and m["steal_frac"] == pytest.approx(0.15)
    assert m["contended"] is True  # the run queue was quiet; the hypervisor was not
    assert metrics_from_ranks(make_spec(), [_steal_rank(0.2)])["contended"] is False


def test_the_sentence_names_the_steal_when_it_is_what_stretched_the_steps():
    s = contention_sentence("`fsdp=none`", 0.01, 0.15)
    assert "waited 1 % of the timed window for a CPU and the hypervisor took 15 % of the host's CPU time (steal)" in s
    assert "steal" not in contention_sentence("`fsdp=none`", 0.23, 0.001)


# ---- the report ----


def test_the_sentence_names_the_share_of_the_window_in_percent():
    s = contention_sentence("`fsdp=none`", 0.234)
    assert s == (
        "`fsdp=none` was measured under CPU contention: a rank's training thread waited 23 % of the timed window for a CPU; "
        "compare it with other points only after a rerun on a quiet machine."
    )


def test_a_verdict_that_involves_a_contended_point_is_not_certain():
    quiet = [
        _contended("aaaa00000001", "none", True, 5000.0, 3 * GIB, 0.01, False),
        _contended("aaaa00000002", "full_shard", True, 3000.0, 2 * GIB, 0.02, False),
    ]
    (first, _) = answer(records_to_frame(quiet), AXES, ("GiB", GIB))
    assert "not certain" not in first and "contention" not in first
    # the fastest itself contended
    loud = [_contended("aaaa00000001", "none", True, 5000.0, 3 * GIB, 0.3, True), quiet[1]]
    (first, _) = answer(records_to_frame(loud), AXES, ("GiB", GIB))
    fastest = first.split("; least memory")[0]
    assert fastest.endswith(" (not certain: `fsdp=none gc=true` was measured under CPU contention)")
    # a slower point that waited 50 %: had it not waited, 3000 / 0.5 = 6000 would beat 5000
    slow = [quiet[0], _contended("aaaa00000002", "full_shard", True, 3000.0, 2 * GIB, 0.5, True)]
    (first, _) = answer(records_to_frame(slow), AXES, ("GiB", GIB))
    assert "not certain: `fsdp=full_shard gc=true` was measured under CPU contention" in first.split("; least")[0]
    # one that waited 10 % could not have reached it: the verdict stands
    far = [quiet[0], _contended("aaaa00000002", "full_shard", True, 3000.0, 2 * GIB, 0.1, True)]
    (first, _) = answer(records_to_frame(far), AXES, ("GiB", GIB))
    assert "not certain" not in first
    # the fastest that fits a capacity is a verdict too
    (first, _) = answer(records_to_frame(slow), AXES, ("GiB", GIB), [("small", 2.5)])
    assert "fastest that fits small (2.50 GiB): `fsdp=full_shard gc=true`" in first
    assert first.endswith("(not certain: `fsdp=full_shard gc=true` was measured under CPU contention).")


def test_the_report_names_each_contended_point_in_md_and_html(tmp_path: Path):
    recs = [
        _contended("aaaa00000001", "none", True, 5000.0, 3 * GIB, 0.234, True),
        _contended("aaaa00000002", "full_shard", False, 4000.0, 2 * GIB, 0.01, False),
    ]
    for r in recs:
        SweepDir(tmp_path).write_record(r)
    text = read_md(build_report(tmp_path))
    results = text.split("## Results")[1].split("\n## ")[0]
    sentence = (
        "`fsdp=none gc=true` (point `aaaa00000001`) was measured under CPU contention: a rank's training thread waited 23 % of "
        "the timed window for a CPU; compare it with other points only after a rerun on a quiet machine."
    )
    assert f"\n\n{sentence}\n\n" in results and "aaaa00000002` (point" not in results
    assert "| 23.4 contended |" in results and "| 1 |" in results  # the details table, in percent
    assert "not certain: `fsdp=none gc=true` was measured under CPU contention" in text.split("\n## ")[0]
    assert "`timing.contention_warn_frac` (10 %)" in text.split("## How each number was measured")[1]
    page = Page((tmp_path / "report.html").read_text())
    assert (
        "fsdp=none gc=true (point aaaa00000001) was measured under CPU contention: a rank's training thread waited 23 % of the "
        "timed window for a CPU" in page.flat
    )


def test_a_quiet_sweep_and_an_older_one_say_nothing_about_contention():
    quiet = records_to_frame([_contended("aaaa00000001", "none", True, 5000.0, GIB, 0.01, False)])
    old = records_to_frame([ok_point("aaaa00000001", "none", True, 5000.0, GIB)])
    assert contention_notes(quiet, AXES) == [] and contention_notes(old, AXES) == []
    assert "CPU run-queue wait (%)" in results_details_table(quiet).columns
    assert "CPU run-queue wait (%)" not in results_details_table(old).columns
    assert any("runqueue_wait_frac" in n for n in method_notes(old))  # the method note is always there


def test_outside_text_in_a_contended_point_name_stays_text():
    hostile = "<b>x</b>*y*|`z`"
    r = _contended("aaaa00000001", "none", True, 5000.0, GIB, 0.5, True)
    r = dataclasses.replace(r, spec={**r.spec, "fsdp": hostile})
    (note,) = contention_notes(records_to_frame([r]), AXES)
    page = Page(MarkdownIt("commonmark", {"html": False}).render(note))
    assert f"fsdp={hostile} gc=true (point aaaa00000001) was measured under CPU contention" in page.flat
    assert page.tags["b"] == page.tags["em"] == 0


def test_many_contended_points_are_named_up_to_a_cap_then_counted():
    recs = [_contended(f"aaaa0000000{i}", "none", i % 2 == 0, 1000.0 + i, GIB, 0.1 + i / 100, True) for i in range(8)]
    notes = contention_notes(records_to_frame(recs), AXES)
    assert len(notes) == 6 and notes[0].startswith("`fsdp=none gc=false` (point `aaaa00000007`)")  # most first
    assert notes[-1] == (
        "3 more ok point(s) were measured under CPU contention: the `contended` column of `results.csv`."
    )


def test_the_measurement_note_reads_the_threshold_the_points_were_judged_against():
    r = _contended("aaaa00000001", "none", True, 5000.0, GIB, 0.5, True)
    r = dataclasses.replace(r, spec={**r.spec, "timing": {"contention_warn_frac": 0.2}})
    notes = method_notes(records_to_frame([r]))
    assert any("`timing.contention_warn_frac` (20 %)" in n for n in notes)


def test_the_process_reads_its_own_threads():
    if not LINUX_SCHEDSTAT:
        pytest.skip("needs Linux schedstat")
    reading = read_schedstat()
    assert threading.get_native_id() in reading and os.getpid() in reading


def test_a_point_contended_by_steal_alone_is_named_with_its_steal_and_the_details_show_it_in_percent():
    from sweeper.report.headline import lost_frac
    from sweeper.report.notes import contention_notes
    from sweeper.report.tables import results_details_table

    stolen = dataclasses.replace(
        ok_point("aaaa00000001", "none", True, 5000.0, GIB),
        metrics={**ok_point("aaaa00000001", "none", True, 5000.0, GIB).metrics, "runqueue_wait_frac": 0.02,
                 "steal_frac": 0.15, "contended": True},
    )  # fmt: skip
    quiet = _contended("aaaa00000002", "none", False, 4000.0, GIB, 0.01, False)
    df = records_to_frame([stolen, quiet])
    assert lost_frac(df).tolist()[0] == pytest.approx(0.15)  # the larger of the two shares
    (note,) = contention_notes(df, ["fsdp", "gc"])
    assert "waited 2 % of the timed window for a CPU and the hypervisor took 15 % of the host's CPU time" in note
    details = results_details_table(df)
    assert details["hypervisor steal (%)"].tolist()[0] == "15"
    assert "hypervisor steal (%)" not in results_details_table(records_to_frame([quiet]))  # none: no column
