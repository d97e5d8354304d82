"""Rank 0's copy of what Hugging Face's ``WandbCallback`` would log of this training run
(:mod:`sweeper.results.trainer_run`: the Trainer's config, the parameter count, start and step times, the final
metrics), written to ``<point_dir>/trainer_run.json`` for the point's W&B run.

It runs at the harness's fault site ``trainer-run`` (contained, :mod:`sweeper.job.faults`): a fault loses the file,
never the point. Its events do no more than read a clock in a step (after the step timer has stopped its clock:
it sits after :class:`sweeper.job.timing.StepTimer` in the callback list); the file is written at train begin and
train end, outside every timed step.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from sweeper.results.trainer_run import FINAL_METRICS, trainer_config, write_trainer_run


def num_parameters(model: Any) -> int | None:
    """``model.num_parameters()`` (every unique parameter, embeddings included: what ``WandbCallback`` logs as
    ``model/num_parameters``) on the model as built, before any engine shards it; None for a model without it."""
    count = getattr(model, "num_parameters", None)
    return int(count()) if callable(count) else None


class TrainerRunLog(TrainerCallback):
    """Writes ``<point_dir>/trainer_run.json`` on the world process zero (other ranks do nothing).

    At ``on_train_begin``: ``config`` (:func:`sweeper.results.trainer_run.trainer_config` of the effective
    ``TrainingArguments.to_dict()`` and ``model.config.to_dict()``, secrets redacted) and ``started_at`` (Unix time,
    s). At each ``on_step_end``: the step's end time is kept (Unix s, ``step_ended_at``, one per optimizer step). At
    ``on_log``: the Trainer's final metrics (:data:`sweeper.results.trainer_run.FINAL_METRICS`) when it logs them.
    At ``on_train_end``: the file is written again with the step times and ``final``.

    Raises:
        OSError: the file cannot be written (the harness's ``trainer-run`` site contains it).
    """

    def __init__(self, point_dir: Path, num_parameters: int | None) -> None:
        self.point_dir = Path(point_dir)
        self.num_parameters = num_parameters
        self.data: dict[str, Any] | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        cfg = getattr(model, "config", None)
        model_config = cfg if isinstance(cfg, dict) else cfg.to_dict() if hasattr(cfg, "to_dict") else None
        self.data = {
            "config": trainer_config(args.to_dict(), model_config, self.num_parameters),
            "started_at": time.time(),
            "step_ended_at": [],
            "final": {},
        }
        write_trainer_run(self.point_dir, self.data)

    def on_step_end(self, args, state, control, **kwargs):
        if self.data is not None:
            self.data["step_ended_at"].append(time.time())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.data is not None and logs:
            for key in FINAL_METRICS:
                if key in logs:
                    self.data["final"][key] = logs[key]

    def on_train_end(self, args, state, control, **kwargs):
        if self.data is not None:
            write_trainer_run(self.point_dir, self.data)
