"""Every argparse command's ``--help`` gives its description whole (issue 39: ``sweeper.report`` and
``sweeper.wandb_report`` were cut at the docstring's first line break, mid-sentence)."""

from __future__ import annotations

import importlib
import re

import pytest

from sweeper.units import summary

COMMANDS = ["sweeper.report.cli", "sweeper.wandb_report.cli", "sweeper.status", "sweeper.tracking.__main__"]


def test_summary_is_the_first_paragraph_on_one_line():
    doc = """``python -m x <dir>``: does a thing that
    takes two lines.

    More detail that is not the summary."""
    assert summary(doc) == "python -m x <dir>: does a thing that takes two lines."
    assert summary(None) == ""


@pytest.mark.parametrize("module", COMMANDS)
def test_help_holds_the_whole_first_sentence(module, capsys):
    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as stop:
        mod.main(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse re-wraps: compare words
    expected = summary(mod.__doc__)
    assert " ".join(expected.split()) in text
    assert re.search(r"[.)]$", expected), expected  # the paragraph ends a sentence
