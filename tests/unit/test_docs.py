"""The docs list what the code can produce: every status and every error kind has a row in docs/failures.md."""

from __future__ import annotations

import re

from sweeper.failures import ERROR_KINDS
from sweeper.job.faults import SITES
from sweeper.results.record import STATUSES
from tests.conftest import REPO

FAILURES_MD = (REPO / "docs" / "failures.md").read_text()
#: error kinds set outside the classifier: SLURM accounting, and the lifecycle's guard against sweeper's own bugs
OTHER_KINDS = ("scheduler", "internal")


def _first_cells(text: str) -> set[str]:
    return set(re.findall(r"^\| `([\w-]+)` \|", text, flags=re.MULTILINE))


def test_every_status_and_error_kind_has_a_row_in_the_failures_page():
    rows = _first_cells(FAILURES_MD)
    assert set(STATUSES) <= rows, set(STATUSES) - rows
    assert set(ERROR_KINDS) | set(OTHER_KINDS) <= rows, (set(ERROR_KINDS) | set(OTHER_KINDS)) - rows


def test_the_fault_site_table_of_the_failures_page_names_exactly_the_sites_of_the_code():
    section = FAILURES_MD.split("## Faults of sweeper's own measurement code in a rank")[1].split("\n## ")[0]
    cells = re.findall(r"^\| ([^|]+) \|", section, flags=re.MULTILINE)
    documented = {name for cell in cells for name in re.findall(r"`([\w-]+)`", cell)}
    assert documented == set(SITES), (documented - set(SITES), set(SITES) - documented)


def test_the_docs_pages_link_to_each_other_and_exist():
    for page in ("architecture.md", "measurement.md", "gate.md", "failures.md", "slurm.md"):
        assert (REPO / "docs" / page).exists(), page
    for link in re.findall(r"\]\(([\w-]+\.md)", (REPO / "docs" / "architecture.md").read_text()):
        assert (REPO / "docs" / link).exists(), link
