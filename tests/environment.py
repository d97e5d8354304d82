"""The process environment of the test session, put back after every test.

In-process tests run library and product code that writes ``os.environ`` as a side effect, not only through
``monkeypatch``: transformers' ``TrainingArguments`` with ``fsdp`` sets ``FSDP_CPU_RAM_EFFICIENT_LOADING``, sweeper's
secret handling exports ``SWEEPER_SECRET_*``, ``wandb`` sets ``WANDB_*``, the harness's rank set-up ``RANK`` and
``WORLD_SIZE``. A later test that starts a process with ``dict(os.environ)`` then runs it under another test's
settings: a plain ``Trainer`` that inherits ``RANK``/``WANDB_*`` logs another W&B config than the one it would log on
a user's machine (the CI failure of 2026-12-06 in tests/integration/test_wandb.py, reproduced only after the unit
tier). ``tests/conftest.py`` wraps every test in :func:`restored_environment`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def restored_environment() -> Iterator[None]:
    """Run the body, then make ``os.environ`` exactly what it was before it: variables the body set are removed,
    variables it changed or removed get their old values back (``os.environ`` item access, so the C-level
    environment that child processes inherit follows)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for name in [n for n in os.environ if n not in saved]:
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
