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
@pytest.mark.parametrize("case", ["missing", "no-points"])
def test_a_folder_that_is_not_a_sweep_is_refused_alike(prog, case, tmp_path, capsys):
    folder = tmp_path / "nowhere" if case == "missing" else tmp_path
    assert READERS[prog]([str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    why = (
        f"sweep directory {folder} does not exist"
        if case == "missing"
        else f"{folder} has no points/ folder; is it a sweep directory?"
    )
    assert err == f"{prog}: error: {why}"
