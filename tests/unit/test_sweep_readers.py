"""Every CLI that reads a sweep directory refuses a folder that is not one with the same clause and exit 2
(:meth:`sweeper.results.sweepdir.SweepDir.not_a_sweep`), run in this process."""

from __future__ import annotations

import pytest

from sweeper import status
from sweeper.report import cli as report_cli
from sweeper.tracking import __main__ as tracking_cli
from sweeper.wandb_report import cli as wandb_report_cli

READERS = {
    "sweeper.report": report_cli.main,
    "sweeper.status": status.main,
    "sweeper.tracking": tracking_cli.main,
    "sweeper.wandb_report": wandb_report_cli.main,
}


@pytest.mark.parametrize("prog", sorted(READERS))
@pytest.mark.parametrize("case", ["missing", "no-points", "a-file"])
def test_a_folder_that_is_not_a_sweep_is_refused_alike(prog, case, tmp_path, capsys):
    folder = {"missing": tmp_path / "nowhere", "no-points": tmp_path, "a-file": tmp_path / "report.md"}[case]
    if case == "a-file":
        folder.write_text("# not a sweep\n")
    assert READERS[prog]([str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    why = {
        "missing": f"sweep directory {folder} does not exist",
        "no-points": f"{folder} has no points/ folder; is it a sweep directory?",
        "a-file": f"{folder} is a file, not a sweep directory",  # it was "does not exist"
    }[case]
    assert err == f"{prog}: error: {why}"
