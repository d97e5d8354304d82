"""Progress lines: where a point is (window and step from its spec and its ranks' real step files), the sweep's ETA
(resumed and refused points left out), plain lines in a log, and user and library text printed literally (case T07: a
gloo message read as rich markup)."""

from __future__ import annotations

import dataclasses
import io
import time

import pytest
from rich.console import Console

from sweeper.launchers import progress
from sweeper.results.rankfile import write_rank_step
from sweeper.results.record import Record
from tests.unit.specs import make_spec

GLOO = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500 "
    "[bold red]not markup[/bold red] [/] [link=http://x]y[/link]"
)


@pytest.mark.parametrize("reason", [GLOO, "[/]", "[rank1]: [/tmp/a.py:3] boom", ":smile: [b]x"])
def test_a_failure_reason_with_brackets_is_printed_literally(capsys, reason):
    record = Record(sweep_id="s", point_id="p", status="error", reason=reason, wall_time_s=1.0)
    overrides = ["+training_args.run_name=[x]", "gc=true"]
    progress.finished(0, 2, overrides, record)
    out = capsys.readouterr().out
    assert reason in out.replace("\n", "")
    assert "+training_args.run_name=[x]" in out


def test_the_spinner_label_is_not_markup():
    with progress.announce(0, None, ["+fsdp_config.x=[/]"]):
        pass


def test_an_ok_line_has_throughput_and_binary_memory_units():
    record = Record(
        sweep_id="s",
        point_id="p",
        status="ok",
        metrics={"tokens_per_s_per_device": 12345.6, "peak_mem_bytes": 3 * 2**20},
        wall_time_s=2.0,
    )
    line = progress.summary_line(1, 4, ["gc=true"], record)
    assert line.startswith("[2/4] gc=true  ok")
    assert "12,346 tokens/s/device" in line and "peak 3.00 MiB" in line and "(2.0 s)" in line


# --- where a point is: its window and step, from the spec and the ranks' step files -----------------------------


def _spec(**kw):
    base = dict(warmup_steps=2, timed_steps=3, memory_steps=1, profile_steps=2, ranks_per_node=2)
    return make_spec(**{**base, **kw})


def _steps(pdir, **by_rank):
    """Write ``rank<r>.step`` files with the ranks' own writer (``r0=4, r1=5``)."""
    for name, step in by_rank.items():
        write_rank_step(pdir, int(name[1:]), step)


def test_before_every_rank_has_a_step_file_the_point_is_in_setup(tmp_path):
    spec = _spec()
    assert progress.read_position(spec, tmp_path / "missing").text() == "setup"
    assert progress.read_position(spec, tmp_path).text() == "setup"
    _steps(tmp_path, r0=0)  # rank 1 still building its model
    assert progress.read_position(spec, tmp_path).text() == "setup"


@pytest.mark.parametrize(
    ("r0", "r1", "text"),
    [
        (0, 0, "warm-up  step 1/8"),
        (1, 2, "warm-up  step 2/8"),  # the slowest rank decides
        (2, 2, "timed  step 3/8"),
        (4, 4, "timed  step 5/8"),
        (5, 5, "memory  step 6/8"),
        (6, 7, "profile  step 7/8"),
        (7, 7, "profile  step 8/8"),
        (8, 8, "writing record"),
    ],
)
def test_the_window_and_step_follow_the_step_files(tmp_path, r0, r1, text):
    _steps(tmp_path, r0=r0, r1=r1)
    assert progress.read_position(_spec(), tmp_path).text() == text


def test_empty_windows_are_skipped_and_exited_ranks_are_writing_the_record(tmp_path):
    spec = _spec(timed_steps=0, memory_steps=0)
    _steps(tmp_path, r0=2, r1=2)
    assert progress.read_position(spec, tmp_path).text() == "profile  step 3/4"
    assert progress.read_position(spec, tmp_path, ranks_done=True).text() == "writing record"


# --- ETA ----------------------------------------------------------------------------------------------------------


def test_eta_is_the_mean_of_launched_points_times_the_points_left():
    clock = progress.SweepClock()
    assert clock.eta_s(5) is None  # nothing measured yet
    clock.point_done(0.01, launched=False)  # resumed from its record
    clock.point_done(0.02, launched=False)  # refused by the gate
    assert clock.eta_s(5) is None
    clock.point_done(100.0, launched=True)
    clock.point_done(140.0, launched=True)
    assert clock.mean_s == 120.0
    assert clock.eta_s(3) == 360.0
    assert clock.eta_s(0) == 0.0
    assert clock.eta_s(2, running_s=50.0) == 2 * 120.0 + 70.0  # what the mean leaves of the running point
    assert clock.eta_s(2, running_s=500.0) == 240.0  # a slow point does not make the ETA negative


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (45, "45 s"), (170, "3 min"), (3600 + 5 * 60, "1 h 05 min")]
)
def test_durations_read_for_a_person(seconds, text):
    assert progress.format_duration(seconds) == text


def test_only_points_that_launched_ranks_count_for_the_eta_and_the_summary_line_shows_it(tmp_path):
    clock = progress.SweepClock()
    out = io.StringIO()
    console = _plain_console(out)
    with progress.announce(0, 4, ["gc=true"], console=console, clock=clock):
        pass  # resumed: its record was found, no rank started
    assert clock.walls_s == []
    with progress.announce(1, 4, ["gc=false"], console=console, clock=clock) as point:
        point.ranks_running(_spec(), tmp_path)
    assert len(clock.walls_s) == 1
    clock.walls_s[0] = 90.0  # a 90 s point, 2 points left
    record = Record(sweep_id="s", point_id="p", status="ok", metrics={"tokens_per_s_per_device": 1.0})
    progress.finished(1, 4, ["gc=false"], record, console=console, clock=clock)
    assert out.getvalue().splitlines()[-1].endswith("  eta 3 min")
    assert "eta" not in progress.summary_line(3, 4, ["x=1"], record, eta_s=0.0)


def test_the_summary_line_times_the_point_on_the_clock_of_its_progress_lines(tmp_path):
    # the record's wall_time_s starts at the ranks' launch, the progress lines at the point's start in the driver
    # (the pre-flight answer, a JIT-lock wait before it): a line "writing record (38 s)" was followed by "ok (35.0 s)"
    out = io.StringIO()
    with progress.announce(0, 1, ["zero=2"], console=_plain_console(out), clock=progress.SweepClock()) as point:
        point.t0 -= 38.0  # the point began 38 s ago in the driver
        point.ranks_running(_spec(), tmp_path, ranks_done=True)
    record = Record(sweep_id="s", point_id="p", status="ok", wall_time_s=35.0, metrics={"tokens_per_s_per_device": 1})
    progress.finished(0, 1, ["zero=2"], record, console=_plain_console(out), elapsed_s=point.elapsed_s())
    writing, done = out.getvalue().splitlines()[-2:]
    assert writing.endswith("writing record  (38 s)"), writing
    assert "(38.0 s)" in done and "35.0" not in done, done
    assert "(35.0 s)" in progress.summary_line(0, 1, [], record)  # no driver clock (a record alone): the ranks' time


# --- plain lines in a log (not a terminal) -------------------------------------------------------------------------


def _plain_console(out):
    return Console(file=out, force_terminal=False, highlight=False, markup=False, emoji=False, width=60)


def test_a_log_gets_one_plain_line_per_window_never_one_per_step_and_no_escapes(tmp_path):
    out = io.StringIO()
    clock = progress.SweepClock(walls_s=[200.0])
    overrides = ["+training_args.run_name=[bold]x[/bold]", "gc=true"]
    spec = _spec()
    with progress.announce(2, 5, overrides, console=_plain_console(out), clock=clock) as point:
        point.ranks_running(spec, tmp_path)
        point.ranks_running(spec, tmp_path)
        for step in range(spec.total_steps + 1):
            _steps(tmp_path, r0=step, r1=step)
            point.ranks_running(spec, tmp_path)
            point.ranks_running(spec, tmp_path)
        point.ranks_running(spec, tmp_path, ranks_done=True)
    text = out.getvalue()
    assert "\x1b" not in text
    lines = text.splitlines()
    label = "[3/5] +training_args.run_name=[bold]x[/bold] gc=true"  # literal, not markup, not wrapped at 60
    assert all(line.startswith(label + "  ") for line in lines), lines
    windows = [line[len(label) + 2 :].split("  (")[0] for line in lines]
    assert windows == [
        "start  eta 10 min",  # 2 points after this one x 200 s + this one's 200 s
        "setup",
        "warm-up  step 1/8",
        "timed  step 3/8",
        "memory  step 6/8",
        "profile  step 7/8",
        "writing record",
    ]


def test_a_batch_search_launch_is_one_line_too(tmp_path):
    out = io.StringIO()
    with progress.announce(0, None, [], console=_plain_console(out), clock=progress.SweepClock()) as point:
        for _ in range(3):
            point.ranks_running(_spec(), tmp_path, search=True)
        point.ranks_running(_spec(), tmp_path)
    assert [line.split("  (")[0] for line in out.getvalue().splitlines()] == [
        "[1] (defaults)  start",
        "[1] (defaults)  batch search",
        "[1] (defaults)  setup",
    ]


def test_the_wait_loop_hook_reaches_only_the_point_being_announced(tmp_path):
    out = io.StringIO()
    progress.ranks_running(_spec(), tmp_path)  # no point shown: nothing happens
    with progress.announce(0, 1, ["a=1"], console=_plain_console(out), clock=progress.SweepClock()):
        progress.ranks_running(_spec(), tmp_path)
    progress.ranks_running(_spec(), tmp_path)
    assert out.getvalue().splitlines() == ["[1/1] a=1  start", "[1/1] a=1  setup  (0 s)"]


def test_a_terminal_gets_a_live_status_line_with_the_window(tmp_path):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, highlight=False, markup=False, emoji=False)
    _steps(tmp_path, r0=3, r1=3)
    with progress.announce(0, 2, ["x=[/]"], console=console, clock=progress.SweepClock()) as point:
        point.ranks_running(_spec(), tmp_path)
        assert point.line().startswith("[1/2] x=[/]  timed  step 4/8  (0 s)")
        time.sleep(0.3)  # the spinner redraws itself
    assert "timed  step 4/8" in out.getvalue()


def test_an_auto_point_past_its_warm_up_is_not_labelled_with_a_window_it_may_have_left(tmp_path):
    spec = dataclasses.replace(_spec(timed_steps=20), timed_auto=True)  # 20: the cap (timing.max_timed_steps)
    _steps(tmp_path, r0=1, r1=1)
    assert progress.read_position(spec, tmp_path).text() == "warm-up  step 2/25"
    _steps(tmp_path, r0=12, r1=12)  # the timed window may have ended at step 10: memory or profile now
    assert progress.read_position(spec, tmp_path).text() == "timed (auto) or after  step 13/<=25"


def test_the_terminal_writes_a_peak_as_the_report_does():
    """Three significant digits, MiB below 1 GiB and GiB from there (report.fmt.num with the report's unit)."""
    from sweeper.units import GIB, MIB, num, peak_text

    for peak, shown in [
        (12_140_000, "11.6 MiB"),
        (3 * MIB, "3.00 MiB"),
        (1010 * MIB, "1,010 MiB"),
        (3 * GIB, "3.00 GiB"),
    ]:
        unit = GIB if peak >= GIB else MIB
        assert peak_text(peak) == shown == f"{num(peak, unit, 3, zeros=True)} {'GiB' if unit == GIB else 'MiB'}"
    record = Record(sweep_id="s", point_id="p", status="ok", metrics={"peak_mem_bytes": 12_140_000})
    assert "peak 11.6 MiB" in progress.summary_line(0, 1, [], record)


def test_a_contended_points_line_says_so_with_the_share_lost_as_the_report_does():
    """The report calls a contended point's tokens/s not certain; the terminal line, read first, says it too, with
    the larger of the run-queue wait and the hypervisor steal (docs/measurement.md "Contention")."""
    m = {"tokens_per_s_per_device": 7982.0, "peak_mem_bytes": 8_336_000, "contended": True}
    busy = Record(
        sweep_id="s", point_id="p", status="ok", metrics={**m, "runqueue_wait_frac": 0.32, "steal_frac": 0.05}
    )
    assert "measured under CPU contention: 32 % of the timed window lost" in progress.summary_line(0, 1, [], busy)
    stolen = Record(
        sweep_id="s", point_id="p", status="ok", metrics={**m, "runqueue_wait_frac": 0.02, "steal_frac": 0.2}
    )
    assert "20 % of the timed window lost" in progress.summary_line(0, 1, [], stolen)
    quiet = Record(
        sweep_id="s", point_id="p", status="ok", metrics={**m, "contended": False, "runqueue_wait_frac": 0.05}
    )
    assert "contention" not in progress.summary_line(0, 1, [], quiet)
