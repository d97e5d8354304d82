"""What every rank shares, whatever it runs (a measured point, :mod:`sweeper.job.harness`, or batch-search trials,
:mod:`sweeper.job.batch_trials`).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from sweeper.grid.spec import PointSpec


class PhaseTracker(TrainerCallback):
    """Knows the phase (setup / train / eval) and the current optimizer step, for failure records."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.phase = "train"

    def on_step_begin(self, args, state, control, **kwargs):
        self.step = state.global_step


def user_callbacks(spec: PointSpec) -> list[Any]:
    """The point's own ``TrainerCallback``s (``callbacks``: Hydra ``_target_`` entries), instantiated; ``[]`` when
    it has none."""
    if not spec.callbacks:
        return []
    from hydra.utils import instantiate

    return [instantiate(c) for c in spec.callbacks]
