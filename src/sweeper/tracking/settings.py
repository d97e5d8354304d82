"""Which W&B mode a sweep really gets (``wandb=auto|off|offline|online``), without importing wandb.

* ``auto`` (default): for a single point run without ``-m``, ``off`` unless ``WANDB_MODE`` is set; for a grid, W&B's
  own ``WANDB_MODE`` when it is set (``disabled`` -> off, ``offline``/``dryrun`` ->
  offline, ``online``/``run`` -> online; any other value -> off, with a note), else ``offline`` when the ``wandb``
  package is installed (``pip install 'sweeper[tracking]'``), else ``off``. Never ``online`` unless a person asks
  (``wandb=online`` or ``WANDB_MODE=online``): results leave the machine only then. An explicit ``wandb=<mode>``
  wins over ``WANDB_MODE``.
* ``offline``: runs written under ``<sweep dir>/wandb/``; ``off`` (with a note) when wandb is not installed.
* ``online``: runs sent to the server; ``offline`` (with a note) when no API key is found (``WANDB_API_KEY`` or a
  ``wandb login`` netrc entry); the writer also falls back to offline when the server cannot be reached.

The API key is only ever *looked for* here: it is never read into a record, a report, a log or a W&B config.
"""

from __future__ import annotations

import importlib.util
import netrc
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

MODES: tuple[str, ...] = ("auto", "off", "offline", "online")
INSTALL_HINT = "pip install 'sweeper[tracking]'"


@dataclass(frozen=True)
class WandbSettings:
    """The ``wandb`` config node of a sweep (:class:`sweeper.config.schema.WandbConfig`) as plain data.

    Attributes:
        mode: one of :data:`MODES`.
        project: the W&B project.
        entity: the W&B entity (team or user), or None for the API key's default.
    """

    mode: str = "auto"
    project: str = "sweeper"
    entity: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"wandb mode {self.mode!r} is not one of {', '.join(MODES)}")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> WandbSettings:
        """From ``sweep.json``'s ``wandb`` entry or a resolved config node (enum values as strings); None or
        missing keys give the defaults.

        Raises:
            ValueError: an unknown mode.
        """
        from sweeper.config.schema import WandbConfig  # the schema's defaults, not restated here

        data = dict(data or {})
        mode = data.get("mode", WandbConfig.mode)
        project = data.get("project") or WandbConfig.project
        return cls(str(getattr(mode, "value", mode)), str(project), data.get("entity"))

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``sweep.json``."""
        return {"mode": self.mode, "project": self.project, "entity": self.entity}


def wandb_installed() -> bool:
    """Whether ``import wandb`` can find the package (it is not imported here)."""
    try:
        return importlib.util.find_spec("wandb") is not None
    except (ImportError, ValueError):
        return False


def api_key_available() -> bool:
    """Whether a W&B API key exists: ``WANDB_API_KEY`` non-empty, or a netrc entry for the W&B host
    (``WANDB_BASE_URL``'s host, default ``api.wandb.ai``) as ``wandb login`` writes it. The key is not returned."""
    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


#: W&B's own rule for a project name (wandb 0.31, ``wandb.sdk.wandb_settings.Settings.validate_project``): at most
#: this many characters, none of :data:`NAME_FORBIDDEN`. ``tests/unit/test_tracking.py`` checks it against wandb's.
NAME_MAX = 128
NAME_FORBIDDEN = "/\\#?%:"


def target_problem(project: Any, entity: Any) -> str | None:
    """Why ``wandb.project`` / ``wandb.entity`` cannot name a W&B project or entity (one sentence), or None.

    The project follows wandb's own validator (:data:`NAME_MAX`, :data:`NAME_FORBIDDEN`; not empty). wandb's client
    has no rule for an entity; it is the first part of the project's path (``<entity>/<project>``) and of every run
    URL, so the same rule is applied (a ``/`` in it would name another project). ``entity`` None: the API key's
    default entity."""
    for key, value in (("wandb.project", project), ("wandb.entity", entity)):
        if value is None and key == "wandb.entity":
            continue
        if not isinstance(value, str) or not value.strip():
            return f"{key}={value!r} is not a W&B name (give a non-empty name)"
        if len(value) > NAME_MAX:
            return f"{key} is {len(value)} characters long; W&B allows at most {NAME_MAX}"
        bad = sorted({c for c in value if c in NAME_FORBIDDEN})
        if bad:
            return f"{key}={value!r} cannot contain {' '.join(bad)} (W&B names exclude {' '.join(NAME_FORBIDDEN)})"
    return None


#: W&B's ``WANDB_MODE`` values and the mode ``auto`` takes from them.
WANDB_MODE_ENV = {"disabled": "off", "offline": "offline", "dryrun": "offline", "online": "online", "run": "online"}


def effective_mode(settings: WandbSettings, single_point: bool = False) -> tuple[str, str | None]:
    """The mode the writer will use (``off``, ``offline`` or ``online``) and a note for the user when it differs
    from what was asked (None otherwise, and for ``auto`` without wandb: off is then what was expected).

    ``single_point``: the sweep is one point run without ``-m`` (``sweep.json`` mode ``run``); ``auto`` is then
    ``off`` unless ``WANDB_MODE`` is set: W&B is for comparing the points of a grid, and a lone point's wall time is
    what the harness-overhead benchmark holds to 10 % (``wandb=offline`` still writes its run)."""
    if settings.mode == "auto" and single_point and not os.environ.get("WANDB_MODE"):
        return "off", None
    if settings.mode == "auto" and os.environ.get("WANDB_MODE"):
        env = os.environ["WANDB_MODE"].strip().lower()
        if env not in WANDB_MODE_ENV:
            known = ", ".join(WANDB_MODE_ENV)
            return "off", f"W&B off: WANDB_MODE={env[:40]!r} is not a W&B mode ({known}); set wandb=<mode> to choose"
        return effective_mode(WandbSettings(WANDB_MODE_ENV[env], settings.project, settings.entity))
    if settings.mode == "off":
        return "off", None
    if not wandb_installed():
        if settings.mode == "auto":
            return "off", None
        return "off", f"wandb={settings.mode} asked, but wandb is not installed ({INSTALL_HINT}): no W&B runs"
    if settings.mode == "online" and not api_key_available():
        return "offline", "wandb=online asked, but no W&B API key (WANDB_API_KEY or `wandb login`): runs are offline"
    return ("offline" if settings.mode == "auto" else settings.mode), None
