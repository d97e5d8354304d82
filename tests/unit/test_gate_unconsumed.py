"""Rule P16: training_args entries the Trainer never reads for the point are refused, and each row of the table is
true of the installed transformers (its TrainingArguments' help; every ``args.<field>`` read in its trainer.py)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import pytest
import transformers.trainer
from transformers import TrainingArguments

from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint, check
from sweeper.point.rules.unconsumed import EVALUATION_ONLY, NOT_USED_BY_TRAINER, library_says_unused
from tests.unit.specs import make_spec as spec_with

#: Functions of transformers/trainer.py that only evaluate or predict.
EVALUATION_FUNCTION = re.compile(r"eval|predict|prediction|test_dataloader")


def _args_reads() -> dict[str, set[str]]:
    """``{attribute: {enclosing function}}`` for every ``args.<attribute>`` / ``self.args.<attribute>`` read in the
    installed transformers/trainer.py (properties of TrainingArguments read through ``args`` count under their
    own name)."""
    tree = ast.parse(inspect.getsource(transformers.trainer))
    reads: dict[str, set[str]] = {}

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.stack: list[str] = []

        def visit_FunctionDef(self, node):
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Attribute(self, node):
            base = node.value
            is_args = (isinstance(base, ast.Name) and base.id == "args") or (
                isinstance(base, ast.Attribute) and base.attr == "args"
            )
            if is_args:
                reads.setdefault(node.attr, set()).add(self.stack[-1] if self.stack else "<module>")
            self.generic_visit(node)

    Visitor().visit(tree)
    return reads


def test_the_fields_the_library_calls_unused_are_read_from_its_own_help_and_never_read_by_the_trainer():
    unused = library_says_unused()
    assert {"do_train", "do_eval", "do_predict"} <= set(unused)  # transformers 5's help says so of each
    fields = {f.name: f for f in dataclasses.fields(TrainingArguments)}
    reads = _args_reads()
    for name in unused:
        assert NOT_USED_BY_TRAINER in str(fields[name].metadata.get("help", "")).lower()
        assert name not in reads, (name, reads.get(name))  # the Trainer indeed never reads args.<name>


@pytest.mark.parametrize("field", sorted(EVALUATION_ONLY))
def test_each_evaluation_only_field_is_read_only_where_the_trainer_evaluates_or_predicts(field):
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert field in fields, f"{field} is no longer a TrainingArguments field: remove the row"
    reads = _args_reads()
    where = reads.get(field, set())
    assert where, f"{field}: no read found in trainer.py (the test would pass vacuously)"
    outside = sorted(w for w in where if not EVALUATION_FUNCTION.search(w))
    assert outside == [], f"{field} is read on the training path of the installed Trainer ({outside}): remove the row"


def test_no_row_is_a_field_sweeper_sets_itself():
    from sweeper.point.rules.known_keys import OWNED_TRAINING_ARGS

    assert not (EVALUATION_ONLY | set(library_says_unused())) & set(OWNED_TRAINING_ARGS)


def test_an_entry_the_trainer_never_reads_is_refused_naming_the_key_and_the_library_words():
    spec = spec_with(training_args={"do_eval": True})
    with pytest.raises(InvalidPoint) as e:
        check(spec, Target())
    assert e.value.rule == "P16" and e.value.keys == ("training_args.do_eval",)
    assert "Not directly used by Trainer" in str(e.value) and "only the point's label" in str(e.value)


def test_an_evaluation_only_entry_is_refused_without_eval_and_accepted_with_it():
    spec = spec_with(training_args={"prediction_loss_only": True})
    with pytest.raises(InvalidPoint) as e:
        check(spec, Target())
    assert e.value.rule == "P16" and e.value.keys == ("training_args.prediction_loss_only", "eval")
    assert "eval=true" in str(e.value)
    evaluating = spec_with(eval=True, training_args={"prediction_loss_only": True})
    check(evaluating, Target())  # consumed: evaluation runs after training


def test_an_entry_that_restates_the_default_is_not_refused():
    spec = spec_with(training_args={"do_train": False})  # TrainingArguments' default: it changes nothing
    check(spec, Target())


def test_the_driver_reads_the_format_the_helper_prints():
    from sweeper.job import ta_fields
    from sweeper.point.rules import ta_schema

    assert ta_schema.FORMAT == ta_fields.FORMAT  # the help text (format 2) reaches the gate through the cache
