"""No module of ``src/`` is over 400 lines (issue 17): a module that grows past it does more than one job and is cut
along its seams, as ``results/ranks.py``, ``job/measure.py``, ``report/plots.py``, ``results/row.py`` and
``capacity/memory.py`` were."""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 400
SRC = Path(__file__).resolve().parents[2] / "src"


def test_no_module_is_over_400_lines():
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert len(sizes) > 50  # the tree was found
    assert {k: n for k, n in sizes.items() if n > MAX_LINES} == {}
