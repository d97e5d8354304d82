"""Progress lines print user and library text literally (case T07: a gloo message read as rich markup)."""

from __future__ import annotations

import pytest

from sweeper.launchers import progress
from sweeper.results.record import Record

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
    assert "12,346 tokens/s/device" in line and "peak 3.0 MiB" in line and "(2.0 s)" in line
