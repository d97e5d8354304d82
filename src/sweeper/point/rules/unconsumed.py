"""``training_args`` entries the installed transformers parses but the Trainer's path never reads for this point:
accepted, they would only change the label (a point of its own that runs exactly like another).

The pre-flight (:mod:`sweeper.point.preflight`) compares what the libraries *build* with and without an entry; a
``TrainingArguments`` field that is stored but never read by the ``Trainer`` shows as a difference there, so these
are kept as a table, each row with the source that shows it and a test against the installed library
(``tests/unit/test_gate_unconsumed.py``):

- :func:`library_says_unused`: the fields whose own help, in the installed ``TrainingArguments``, says "Not directly
  used by Trainer" (``do_train``, ``do_eval``, ``do_predict``, ``resume_from_checkpoint`` in transformers 5): asked
  of the library at run time, not listed here;
- :data:`EVALUATION_ONLY`: fields read only by the ``Trainer``'s evaluation and prediction
  (``transformers/trainer.py``: ``evaluate``, ``predict``, ``evaluation_loop``, ``prediction_step``,
  ``get_eval_dataloader``, ``get_test_dataloader``), so consumed only with ``eval=true``.
"""

from __future__ import annotations

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.point.rules.passthrough import changed_fields, show_value
from sweeper.point.rules.ta_schema import training_args_schema

#: The help text transformers gives a field it stores for scripts but never reads in the Trainer.
NOT_USED_BY_TRAINER = "not directly used by trainer"

#: Fields the Trainer reads only while evaluating or predicting, and sweeper does not set (it sets
#: ``per_device_eval_batch_size`` and ``eval_accumulation_steps``: rule P01). Source: transformers 5 ``trainer.py``,
#: every ``args.<field>`` read inside evaluate/predict/evaluation_loop/prediction_step only.
EVALUATION_ONLY: frozenset[str] = frozenset(
    {
        "eval_do_concat_batches",
        "prediction_loss_only",
        "include_for_metrics",
    }
)


def library_says_unused() -> dict[str, str]:
    """``{field: help}`` for each field of the installed ``TrainingArguments`` whose help says it is not used by
    the Trainer (read through :func:`sweeper.point.rules.ta_schema.training_args_schema`, the driver never imports
    transformers; ``{}`` when the schema cannot be read: then nothing is refused for it)."""
    schema = training_args_schema()
    if schema is None:
        return {}
    return {n: f.help for n, f in schema.fields.items() if NOT_USED_BY_TRAINER in f.help.lower()}


@rule(
    "P16",
    ("training_args.do_train", "training_args.do_eval", "training_args.prediction_loss_only", "..."),
    "a training_args entry the Trainer never reads for this point is refused (it would only change the label)",
    'TrainingArguments\' own help ("Not directly used by Trainer"); transformers/trainer.py evaluation-only '
    "reads (EVALUATION_ONLY in point/rules/unconsumed.py; tests/unit/test_gate_unconsumed.py)",
)
def _unconsumed_training_args(spec: PointSpec, _: Target):
    unused = library_says_unused()
    fields = sorted(f for f in spec.training_args if f in unused or (f in EVALUATION_ONLY and not spec.eval))
    bad = changed_fields(spec, fields)
    if not bad:
        return None
    parts = []
    for f in bad:
        shown = f"training_args.{f}={show_value(spec.training_args[f])}"
        if f in unused:
            parts.append(f'{shown}: transformers\' Trainer never reads it (its help: "{unused[f].strip()}")')
        else:
            parts.append(
                f"{shown}: the Trainer reads it only when it evaluates or predicts, and this point does not "
                "(eval=false)"
            )
    return (
        "; ".join(parts)
        + ": it would change nothing that runs, only the point's label; remove it"
        + (" (or set eval=true to evaluate after training)" if any(f in EVALUATION_ONLY for f in bad) else ""),
        tuple(f"training_args.{f}" for f in bad) + (("eval",) if any(f in EVALUATION_ONLY for f in bad) else ()),
    )
