"""Text from libraries and users is never markup: it shows literally in report.md and report.html."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

from markdown_it import MarkdownIt

from sweeper.report import build_report
from sweeper.report.md import code, escape, fence
from sweeper.report.plot_data import plot_data
from sweeper.report.plot_png import png_figure
from sweeper.results.record import Record
from sweeper.results.row import records_to_frame
from sweeper.results.sweepdir import SweepDir

#: A C++ source location (rich markup), a script, a table pipe, emphasis, a code span, a backslash, an entity, a
#: link, an autolink and a line break: each must show as typed.
HOSTILE = (
    "[/tmp/pair.cc:123] <script>alert(1)</script> | *x* _y_ `z` \\ &amp; [a](javascript:alert(2)) "
    "<http://example.com> $\\alpha$\nsecond line"
)
ONE_LINE = HOSTILE.replace("\n", " ")
RUN_NAME = "<script>alert(3)</script>*b*|`c`"


class Page(HTMLParser):
    """The text of an HTML page outside <script>/<style>, and how many elements of each tag it has."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.text: list[str] = []
        self._skip = 0
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)

    @property
    def flat(self) -> str:
        """The text with each run of white space as one space."""
        return " ".join("".join(self.text).split())


def spec(run_name: str, gc: bool) -> dict:
    return {"model": "tiny", "fsdp": "none", "gc": gc, "precision": "fp32", "training_args": {"run_name": run_name}}


def records(reason: str, run_name: str) -> list[Record]:
    ok = Record(
        sweep_id="sw-markup",
        point_id="aaaa00000001",
        status="ok",
        overrides=[f"+training_args.run_name={run_name}", "gc=false"],
        spec=spec(run_name, False),
        replay=f"python -m sweeper '+training_args.run_name={run_name}' gc=false",
        metrics={"tokens_per_s_per_device": 100.0, "peak_mem_bytes": 2**20, "mfu_note": reason},
        env={"host": reason},
    )
    bad = Record(
        sweep_id="sw-markup",
        point_id="ffff00000001",
        status="error",
        error_kind="runtime",
        overrides=["+training_args.run_name=plain", "gc=true"],
        spec=spec("plain", True),
        replay="python -m sweeper +training_args.run_name=plain gc=true",
        reason=reason,
        failure={"phase": "train", "rank": 0, "step": 2, "exception_type": "RuntimeError"},
    )
    return [ok, bad]


def write(sweep_dir: Path, recs: list[Record]) -> Path:
    for r in recs:
        SweepDir(sweep_dir).write_record(r)
    return build_report(sweep_dir)


def test_a_hostile_reason_and_override_show_literally_in_the_html_and_nothing_runs(tmp_path: Path):
    write(tmp_path / "plain", records("a plain reason", "plain-name"))
    write(tmp_path / "hostile", records(HOSTILE, RUN_NAME))
    plain = Page((tmp_path / "plain" / "report.html").read_text())
    page = Page((tmp_path / "hostile" / "report.html").read_text())
    assert ONE_LINE in page.flat  # failures table, environment
    assert RUN_NAME in page.flat  # the swept axis training_args.run_name, in the results table
    assert page.flat.count(ONE_LINE) >= 3  # failure reason, host, MFU note
    # no element came from the text: the same tags as the report of the same sweep with plain texts
    assert page.tags["script"] == plain.tags["script"] == 3  # plotly's: config, plotly.js, the plot
    assert page.tags == plain.tags
    assert page.tags["em"] == page.tags["a"] == page.tags["img"] == 0


def test_a_hostile_reason_is_escaped_in_report_md_tables_and_reads_back_literally(tmp_path: Path):
    text = write(tmp_path, records(HOSTILE, RUN_NAME)).read_text()
    failures = text.split("## Failures")[1].split("\n## ")[0]
    header = next(line for line in failures.splitlines() if line.startswith("| status"))
    row = next(line for line in failures.splitlines() if "ffff00000001" in line)
    cells = re.split(r"(?<!\\)\|", row)
    assert len(cells) == len(re.split(r"(?<!\\)\|", header))  # the reason's "|" did not add a cell
    assert "<script>" not in failures and "\\<script\\>" in failures  # outside code spans: escaped
    # what a Markdown viewer (CommonMark + tables, raw HTML off) shows is the literal text
    viewer = Page(MarkdownIt("commonmark", {"html": False}).enable("table").render(text))
    assert ONE_LINE in viewer.flat and RUN_NAME in viewer.flat
    assert viewer.tags["em"] == viewer.tags["a"] == viewer.tags["script"] == 0
    replay = text.split("## Replay")[1]
    assert f"'+training_args.run_name={RUN_NAME}'" in replay  # verbatim in the code block


def test_escape_code_and_fence_keep_every_character():
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    for s in [HOSTILE, RUN_NAME, "``a`b``", "`", "full_shard __init__ a_b_", "&lt; &#60; \\*"]:
        one = " ".join(s.split("\n"))
        assert Page(md.render(escape(s))).flat == " ".join(one.split())
        assert Page(md.render(code(s))).flat == " ".join(one.split())
        assert "".join(Page(md.render(fence(s))).text).strip("\n") == s
    assert escape("full_shard") == "full_shard"  # snake_case stays readable in report.md


def test_plot_labels_are_not_mathtext():
    recs = records(HOSTILE, "$\\alpha$")
    fig = png_figure(plot_data(records_to_frame(recs), ["training_args.run_name"], [("$x$ GPU", 1.0)]))
    texts = [t for ax in fig.axes for t in ax.texts if "$" in t.get_text()]
    assert len(texts) >= 2 and not any(t.get_parse_math() for t in texts)


def test_raw_html_in_markdown_stays_text_in_the_html():
    from sweeper.report.render import markdown_to_html

    page = Page(markdown_to_html("<script>alert(1)</script> <b>x</b> <http://example.com>"))
    assert page.tags["script"] == page.tags["b"] == 0
    assert "<script>alert(1)</script> <b>x</b>" in page.flat
