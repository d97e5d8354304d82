"""docs/architecture.md is the map of ``src/sweeper`` and stays one (issue 37, "the map drifts").

What the page must hold, read from the files alone (no import of sweeper, no process):

- every module of ``src/sweeper`` (``__init__.py`` aside) is named in the table "Packages by stage": in the row of its
  top-level package, by its path relative to that package, in backticks (``src/sweeper/launchers/slurm/submit.py``
  is ```slurm/submit.py``` in the ```launchers/``` row); a top-level module by its file name on the "Top level:" line
  (```status.py```);
- every ```name.py``` written in a row or on that line is a file, resolved the same way (no stale names), and every row
  names a package that exists;
- the diagram under "**The layers**" lists the floors of the import-linter ``layers`` contract of ``pyproject.toml``,
  top to bottom, the same packages on each floor (a diagram line is ``a | b`` then, after two or more spaces, its
  description);
- every module path written anywhere else on the page (``point/lifecycle.py``) is a file;
- every package's ``__init__.py`` has a docstring.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # requires-python is >=3.10; the same reader, as a package (huggingface_hub requires it there)
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "sweeper"
DOC = REPO / "docs" / "architecture.md"
PYPROJECT = REPO / "pyproject.toml"

TABLE_HEADING = "## Packages by stage"
TOP_LEVEL = "Top level:"
LAYERS = "**The layers**"
#: A module name as the table writes it: ```schema.py```, ```slurm/submit.py```.
NAMED = re.compile(r"`([\w/]+\.py)`")
#: A table row: its first cell is the package, ```config/```.
ROW = re.compile(r"^\| `(\w+)/` \|(.*)$")


def _table_section(text: str) -> str:
    assert TABLE_HEADING in text, f"docs/architecture.md has no section {TABLE_HEADING!r}"
    return text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]


def _rows(text: str) -> dict[str, set[str]]:
    """The package of each table row -> the module names written in it (relative to that package)."""
    rows: dict[str, set[str]] = {}
    for line in _table_section(text).splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"docs/architecture.md: two rows for the package `{m.group(1)}/`"
            rows[m.group(1)] = set(NAMED.findall(m.group(2)))
    assert rows, "docs/architecture.md: no package rows found in the table"
    return rows


def _top_level_paragraph(text: str) -> str:
    section = _table_section(text)
    assert f"\n{TOP_LEVEL}" in section, f"docs/architecture.md: no {TOP_LEVEL!r} line under {TABLE_HEADING!r}"
    return section.split(f"\n{TOP_LEVEL}", 1)[1].split("\n\n", 1)[0]


def _top_level(text: str) -> set[str]:
    return set(NAMED.findall(_top_level_paragraph(text)))


def _modules() -> tuple[dict[str, set[str]], set[str]]:
    """The modules of src/sweeper (``__init__.py`` aside): package -> paths relative to it, and the top-level ones."""
    packages: dict[str, set[str]] = {p.parent.name: set() for p in SRC.glob("*/__init__.py")}
    top: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        rel = path.relative_to(SRC)
        if len(rel.parts) == 1:
            top.add(rel.name)
        else:
            packages.setdefault(rel.parts[0], set()).add("/".join(rel.parts[1:]))
    return packages, top


def _floors(names: str) -> frozenset[str]:
    return frozenset(n.strip() for n in names.split("|"))


def _diagram_floors(text: str) -> list[frozenset[str]]:
    assert LAYERS in text, f"docs/architecture.md has no paragraph {LAYERS!r}"
    after = text.split(LAYERS, 1)[1]
    assert "\n```\n" in after, f"docs/architecture.md: no diagram (a ``` block) after {LAYERS!r}"
    block = after.split("\n```\n", 1)[1].split("\n```", 1)[0]
    return [_floors(re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]) for line in block.splitlines() if line.strip()]


def _contract_floors() -> list[frozenset[str]]:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    layers = [c for c in contracts if c["type"] == "layers"]
    assert len(layers) == 1, f"pyproject.toml: expected one import-linter `layers` contract, found {len(layers)}"
    return [_floors(floor) for floor in layers[0]["layers"]]


def _show(floors: list[frozenset[str]]) -> str:
    return "\n".join(" | ".join(sorted(f)) for f in floors)


def test_every_module_is_named_in_the_row_of_its_package_or_on_the_top_level_line():
    text = DOC.read_text()
    packages, top = _modules()
    rows = _rows(text)
    no_row = sorted(set(packages) - set(rows))
    assert not no_row, f"docs/architecture.md: no table row for the package(s) {', '.join(f'{p}/' for p in no_row)}"
    missing = [
        f"`{name}` in the `{pkg}/` row" for pkg, names in sorted(packages.items()) for name in sorted(names - rows[pkg])
    ]
    missing += [f"`{name}` on the {TOP_LEVEL!r} line" for name in sorted(top - _top_level(text))]
    assert not missing, "docs/architecture.md does not name these modules of src/sweeper:\n" + "\n".join(missing)


def test_every_module_name_in_the_table_and_the_top_level_line_exists():
    text = DOC.read_text()
    stale = [f"the `{pkg}/` row: no package src/sweeper/{pkg}/" for pkg in _rows(text) if not (SRC / pkg).is_dir()]
    stale += [
        f"`{name}` in the `{pkg}/` row: no file src/sweeper/{pkg}/{name} (names are relative to the row's package)"
        for pkg, names in sorted(_rows(text).items())
        if (SRC / pkg).is_dir()
        for name in sorted(names)
        if not (SRC / pkg / name).is_file()
    ]
    stale += [
        f"`{name}` on the {TOP_LEVEL!r} line: no file src/sweeper/{name}"
        for name in sorted(_top_level(text))
        if not (SRC / name).is_file()
    ]
    assert not stale, "docs/architecture.md names modules that do not exist:\n" + "\n".join(stale)


def test_the_layers_diagram_lists_the_floors_of_the_import_linter_layers_contract():
    diagram, contract = _diagram_floors(DOC.read_text()), _contract_floors()
    assert diagram == contract, (
        "the floors of docs/architecture.md's layers diagram differ from pyproject.toml's `layers` contract\n"
        f"diagram (top to bottom):\n{_show(diagram)}\n\npyproject.toml:\n{_show(contract)}"
    )


def test_every_module_path_written_elsewhere_on_the_page_exists():
    """Prose and other diagrams write paths from ``src/sweeper`` (``point/lifecycle.py``), ``src``
    (``sweeper/redact.py``) or the repository (``tests/unit/test_module_size.py``)."""
    text = DOC.read_text()
    section = _table_section(text)
    table_and_line = [line for line in section.splitlines() if ROW.match(line)] + [_top_level_paragraph(text)]
    elsewhere = text
    for part in table_and_line:
        elsewhere = elsewhere.replace(part, "")
    paths = set(re.findall(r"(?<![\w/.])(\w+(?:/\w+)+\.py)\b", elsewhere))
    assert paths, "no module path found in the prose of docs/architecture.md"
    stale = sorted(p for p in paths if not any((root / p).is_file() for root in (SRC, SRC.parent, REPO)))
    assert not stale, "docs/architecture.md names files that do not exist: " + ", ".join(stale)


def test_every_package_init_has_a_docstring():
    inits = sorted(SRC.rglob("__init__.py"))
    assert len(inits) > 10  # the tree was found
    bare = [
        str(p.relative_to(SRC.parent)) for p in inits if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()
    ]
    assert not bare, "these packages have no docstring (what the package holds, which floor it is on): " + ", ".join(
        bare
    )
