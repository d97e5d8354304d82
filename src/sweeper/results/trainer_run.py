"""What Hugging Face's own W&B callback would have logged of a point's training run, kept for its W&B run.

``transformers.integrations.WandbCallback`` (transformers 5.x, ``setup`` and ``on_log``) logs, on the world
process zero:

* as **config**, ``{**model.config.to_dict(), **args.to_dict()}`` (the model's config under the effective
  ``TrainingArguments``, which win where a name is in both; ``to_dict`` already replaces every ``*_token`` field by
  a placeholder such as ``<HUB_TOKEN>``) and ``model/num_parameters`` (``model.num_parameters()``);
* as **summary**, the Trainer's final metrics ``train_runtime`` (s), ``train_samples_per_second``,
  ``train_steps_per_second``, ``train_loss`` and ``total_flos`` (FLOPs);
* as **history**, every other logged value under ``train/`` with ``train/global_step`` as the x axis.

Rank 0 of a measured point writes the same things to ``points/<id>/trainer_run.json`` (:data:`TRAINER_RUN_FILE`,
atomically: :func:`write_trainer_run`) when training begins, and again when it ends, adding the wall-clock time
(Unix seconds) at which training began and each optimizer step ended and the final metrics; the W&B runs writer
(:mod:`sweeper.tracking.runs`) reads it back (:func:`read_trainer_run`). A point that never started training (refused,
pruned, failed in set-up) has no such file. Not part of the record: the record stays small for 10,000-point
collections, and nothing but the W&B run reads it.

Secrets: a value at a secret key (:func:`sweeper.redact.is_secret_value`, every nesting level) other than
transformers' own placeholder is replaced by :data:`sweeper.redact.REDACTED` before it is written, and the atomic
writer scrubs every secret value still known (:func:`sweeper.redact.scrub`). No torch import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeper.redact import REDACTED, is_secret_value
from sweeper.results.atomic import write_json_atomic

#: The file, in the point's folder.
TRAINER_RUN_FILE = "trainer_run.json"
#: The Trainer's final metrics ``WandbCallback`` puts in the summary (its ``single_value_scalars``).
FINAL_METRICS: tuple[str, ...] = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
)
#: The ``config`` key ``WandbCallback`` gives the parameter count.
NUM_PARAMETERS_KEY = "model/num_parameters"
#: transformers' placeholder for a ``*_token`` field (``TrainingArguments.to_dict``): ``<HUB_TOKEN>``.
_PLACEHOLDER = re.compile(r"^<[A-Z0-9_]+>$")


def redacted(tree: Any, path: str = "") -> Any:
    """``tree`` (dicts, lists, scalars) with every secret value (:func:`sweeper.redact.is_secret_value` at its
    dotted path) replaced by :data:`sweeper.redact.REDACTED`; transformers' own placeholders are kept. A new
    structure; ``tree`` is unchanged."""
    if isinstance(tree, Mapping):
        return {str(k): redacted(v, f"{path}.{k}" if path else str(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [redacted(v, f"{path}.{i}") for i, v in enumerate(tree)]
    if isinstance(tree, str) and _PLACEHOLDER.match(tree):
        return tree
    return REDACTED if is_secret_value(path, tree) else tree


def trainer_config(args: Mapping[str, Any], model_config: Mapping[str, Any] | None, num_parameters: int | None) -> dict:
    """``WandbCallback``'s config for a run: ``{**model_config, **args}`` plus :data:`NUM_PARAMETERS_KEY` when
    ``num_parameters`` is known, secrets redacted (:func:`redacted`), as JSON-safe data (anything JSON cannot
    hold becomes its ``str``, as ``json.dumps(default=str)`` writes it).

    Args:
        args: ``TrainingArguments.to_dict()``.
        model_config: ``model.config.to_dict()``, or None.
        num_parameters: ``model.num_parameters()`` (a count), or None.
    """
    combined: dict[str, Any] = {**(model_config or {}), **args}
    if num_parameters is not None:
        combined[NUM_PARAMETERS_KEY] = int(num_parameters)
    return json.loads(json.dumps(redacted(combined), default=str))


def write_trainer_run(point_dir: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` (``{"config": ..., "started_at": s, "step_ended_at": [s, ...], "final": {...}}``) as the
    point's :data:`TRAINER_RUN_FILE`, atomically, secrets scrubbed.

    Raises:
        OSError: the file cannot be written (the previous one, if any, is left as it was).
    """
    write_json_atomic(Path(point_dir) / TRAINER_RUN_FILE, dict(data))


def read_trainer_run(point_dir: Path) -> dict[str, Any] | None:
    """The point's :data:`TRAINER_RUN_FILE` as written by :func:`write_trainer_run`, or None when it has none or
    it is not a JSON object (never raises: a run without it is still written, with sweeper's part only)."""
    try:
        data = json.loads((Path(point_dir) / TRAINER_RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
