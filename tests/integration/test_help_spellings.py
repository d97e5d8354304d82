"""T12: every override spelled in ``--help`` and the README composes (Hydra refuses ``fsdp_config.x=1`` without +)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from sweeper.config.compose import compose_points
from tests.conftest import REPO
from tests.unit.test_compose import loader_and_master  # noqa: F401 - fixture

_PASSTHROUGH = re.compile(r"\+?(?:training_args|fsdp_config|deepspeed_config)\.[\w.]+=[^\s`'\"]+")


_CODE = re.compile(r"`([^`\n]+)`|^(?:\s{2,}|\$ )(.+)$", re.MULTILINE)


def _spellings(text: str, code_only: bool = False) -> list[str]:
    """Passthrough overrides shown in ``text`` (in Markdown: inside code spans and code lines only)."""
    if code_only:
        text = "\n".join(a or b for a, b in _CODE.findall(text))
    return sorted({m.group(0) for m in _PASSTHROUGH.finditer(text) if "<" not in m.group(0)})


@pytest.fixture(scope="module")
def help_text() -> str:
    out = subprocess.run([sys.executable, "-m", "sweeper", "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_help_and_readme_show_passthrough_spellings(help_text):
    assert len(_spellings(help_text)) >= 3
    assert len(_spellings((REPO / "README.md").read_text(), code_only=True)) >= 3


@pytest.mark.parametrize("source", ["help", "README.md", "docs"])
def test_every_passthrough_spelling_shown_to_users_composes(loader_and_master, help_text, source):  # noqa: F811
    if source == "help":
        text = help_text
    elif source == "docs":
        text = "\n".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))
    else:
        text = (REPO / source).read_text()
    loader, master = loader_and_master
    for override in _spellings(text, code_only=source != "help"):
        assert override.startswith("+"), f"{source} shows {override!r}: a new dict key needs Hydra's +"
        compose_points(loader, master, [[override]])


def test_help_lists_the_allowed_values_the_schema_accepts(help_text):
    from sweeper.config.schema import ZERO_STAGES, Device, Dtype, Fsdp, Precision

    for key, enum in (("fsdp", Fsdp), ("precision", Precision), ("model_dtype", Dtype), ("device", Device)):
        assert f"{key}=" + "|".join(v.value for v in enum) in help_text
    assert "zero=" + "|".join(map(str, ZERO_STAGES)) in help_text
    assert "host_mem_limit_gib=" in help_text


@pytest.mark.parametrize("group", ["search", "wandb", "launcher"])
def test_help_names_every_choice_of_the_config_groups_a_grid_key_selects(help_text, group):
    # a config group chosen on the command line is a grid key too: --help shows it with every option it has
    shown = re.search(rf"(?<![\w.]){group}=([\w|]+)", help_text)
    assert shown, f"--help does not show {group}=..."
    assert set(shown.group(1).split("|")) == {p.stem for p in (REPO / "conf" / group).glob("*.yaml")}
