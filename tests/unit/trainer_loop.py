"""The Trainer's step loop as a callback sees it, for unit tests of callbacks (no model, no Trainer)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


def run_steps(callback: Any, n_steps: int, before_step: Callable[[int], None] | None = None) -> int | None:
    """Call ``callback.on_step_begin`` then ``on_step_end`` for optimizer steps 0 .. ``n_steps - 1`` as
    ``transformers.Trainer`` does (``state.global_step`` is incremented between the two), stopping when the callback
    sets ``control.should_training_stop``. ``before_step(step)`` runs before each step.

    Returns:
        The ``global_step`` at which training was stopped, or None when all ``n_steps`` ran.
    """
    for step in range(n_steps):
        if before_step is not None:
            before_step(step)
        state = types.SimpleNamespace(global_step=step)
        control = types.SimpleNamespace(should_training_stop=False)
        callback.on_step_begin(None, state, control)
        state.global_step = step + 1
        callback.on_step_end(None, state, control)
        if control.should_training_stop:
            return state.global_step
    return None
