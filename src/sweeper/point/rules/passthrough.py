"""Rules on ``training_args``: fields sweeper owns, unknown fields, ill-typed values.

A ``training_args`` entry that restates what sweeper sets (or the installed ``TrainingArguments`` default sweeper
leaves in place) passes and is dropped from the point's identity (:func:`sweeper.point.library_args.
redundant_passthrough`); the rules below refuse the rest of what cannot run as asked.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.point.library_args import training_arg_restates
from sweeper.point.rules.known_keys import OWNED_TRAINING_ARGS, TIMED_WINDOW_PREFIXES, TIMED_WINDOW_TRAINING_ARGS
from sweeper.point.rules.ta_schema import conforms, training_args_schema, type_text


def show_value(value: Any) -> str:
    """A value as a refusal shows it: JSON where it can (``true``, ``"x"``, ``[1, 2]``), else its ``repr``."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _defaults() -> dict[str, Any] | None:
    schema = training_args_schema()
    return schema.defaults() if schema is not None else None


def changed_fields(spec: PointSpec, fields: list[str]) -> list[str]:
    """The ``fields`` of ``spec.training_args`` that do not merely restate sweeper's value or the default."""
    if not fields:
        return []
    defaults = _defaults()
    return [f for f in fields if not training_arg_restates(spec, f, spec.training_args[f], defaults)]


@rule(
    "P01",
    ("training_args.<field sweeper sets>",),
    "training_args may not change a TrainingArguments field sweeper sets from one of its own keys",
    "sweeper.job.trainer_setup.training_arguments (OWNED_TRAINING_ARGS in point/rules/known_keys.py)",
)
def _owned_training_args(spec: PointSpec, _: Target):
    bad = changed_fields(spec, sorted(set(spec.training_args) & set(OWNED_TRAINING_ARGS)))
    if not bad:
        return None
    parts = [
        f"training_args.{f}={show_value(spec.training_args[f])} is set by sweeper from "
        f"{', '.join(OWNED_TRAINING_ARGS[f])}; set {', '.join(OWNED_TRAINING_ARGS[f])} instead"
        for f in bad
    ]
    keys = [f"training_args.{f}" for f in bad] + [k for f in bad for k in OWNED_TRAINING_ARGS[f]]
    return "; ".join(parts), tuple(dict.fromkeys(keys))


def _timed_window(field: str) -> bool:
    return field in TIMED_WINDOW_TRAINING_ARGS or field.startswith(TIMED_WINDOW_PREFIXES)


@rule(
    "P02",
    ("training_args.report_to", "training_args.save_*", "training_args.logging_*", "training_args.hub_*", "..."),
    "sweeper owns tracking, saving, logging and evaluation strategy: nothing may run in the timed window",
    "docs/measurement.md (nothing runs in the timed window; trackers run on the driver from the records); "
    "docs/cases.md#t06",
)
def _timed_window_training_args(spec: PointSpec, _: Target):
    bad = changed_fields(
        spec, sorted(f for f in spec.training_args if _timed_window(f) and f not in OWNED_TRAINING_ARGS)
    )
    if not bad:
        return None
    shown = ", ".join(f"training_args.{f}={show_value(spec.training_args[f])}" for f in bad)
    return (
        f"{shown}: sweeper owns tracking, saving and logging (nothing may run inside the timed window, and "
        "trackers such as W&B are written on the driver from the records, never from the ranks); remove "
        f"{'them' if len(bad) > 1 else 'it'}: results are in each point's result.json and the sweep's "
        "results.csv; for an evaluation after training use eval=true",
        tuple(f"training_args.{f}" for f in bad),
    )


def _unchecked(spec: PointSpec) -> list[str]:
    """training_args fields the two rules above leave to the installed field list."""
    return [f for f in spec.training_args if f not in OWNED_TRAINING_ARGS and not _timed_window(f)]


@rule(
    "P03",
    ("training_args.<field>",),
    "every training_args field is a field of the installed TrainingArguments",
    "the installed transformers (python -m sweeper.job.ta_fields, cached per version); docs/cases.md#t04",
)
def _unknown_training_args(spec: PointSpec, _: Target):
    fields = _unchecked(spec)
    schema = training_args_schema() if fields else None
    if schema is None:
        return None
    bad = sorted(f for f in fields if f not in schema.fields)
    if not bad:
        return None
    parts = []
    for f in bad:
        close = difflib.get_close_matches(f, list(schema.fields), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        parts.append(f"training_args.{f}{hint}")
    return (
        f"{'; '.join(parts)}: not a field of TrainingArguments in the installed transformers {schema.transformers}; "
        "remove it or use a field that exists (python -m sweeper --help lists sweeper's own keys)",
        tuple(f"training_args.{f}" for f in bad),
    )


@rule(
    "P04",
    ("training_args.<field>",),
    "every training_args value can be its field's type (a Literal/enum field takes only its choices)",
    "the installed TrainingArguments' annotations (python -m sweeper.job.ta_fields)",
)
def _ill_typed_training_args(spec: PointSpec, _: Target):
    fields = _unchecked(spec)
    schema = training_args_schema() if fields else None
    if schema is None:
        return None
    bad = sorted(f for f in fields if f in schema.fields and not conforms(spec.training_args[f], schema.fields[f].type))
    if not bad:
        return None
    parts = []
    for f in bad:
        field = schema.fields[f]
        value = spec.training_args[f]
        default = f", default {show_value(field.default)}" if field.has_default else ""
        parts.append(
            f"training_args.{f}={show_value(value)} ({type(value).__name__}) cannot be TrainingArguments.{f}, "
            f"which is {type_text(field.type)} ({field.text}{default})"
        )
    return (
        "; ".join(parts) + "; give a value of that type (quote a string that looks like a number: "
        "+training_args.x='\"1\"')",
        tuple(f"training_args.{f}" for f in bad),
    )
