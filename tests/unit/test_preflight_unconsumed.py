"""Each row of the pre-flight's "parsed but never consumed" table for DeepSpeed
(:data:`sweeper.job.preflight_resolved.DEEPSPEED_UNCONSUMED`, rule F03) is true of the installed DeepSpeed, accelerate
and transformers: read from their source with ``ast``, not from a list."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import accelerate.accelerator
import deepspeed
import deepspeed.runtime.engine
import transformers.integrations.deepspeed
import transformers.trainer
from transformers import LlamaForCausalLM

from sweeper.job.preflight_resolved import DEEPSPEED_UNCONSUMED, unconsumed_row

ENGINE = ast.parse(inspect.getsource(deepspeed.runtime.engine))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


PARENT = _parents(ENGINE)


def _function(node: ast.AST) -> str:
    """The name of the function ``node`` is in."""
    while node in PARENT:
        node = PARENT[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name
    return "<module>"


def _self_calls(name: str) -> list[ast.Call]:
    """Every ``self.<name>(...)`` call in deepspeed/runtime/engine.py."""
    return [
        n
        for n in ast.walk(ENGINE)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
    ]


def _guarded_by_training_dataloader(node: ast.AST) -> bool:
    """``node`` is inside an ``and`` (or an ``if`` test) that also checks ``self.training_dataloader is not None``."""
    while node in PARENT:
        node = PARENT[node]
        if isinstance(node, (ast.BoolOp, ast.If, ast.IfExp)):
            text = ast.unparse(node.test if isinstance(node, (ast.If, ast.IfExp)) else node)
            if "self.training_dataloader is not None" in text:
                return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
    return False


def _no_training_data_on_the_trainers_path() -> None:
    """Neither transformers' Trainer, its DeepSpeed integration nor accelerate passes ``training_data`` to
    ``deepspeed.initialize`` or calls ``deepspeed_io``: the engine's own DataLoader is never built."""
    for module in (accelerate.accelerator, transformers.integrations.deepspeed, transformers.trainer):
        source = inspect.getsource(module)
        assert "training_data" not in source and "deepspeed_io" not in source, module.__name__


def _training_dataloader_only_from_deepspeed_io() -> None:
    """``self.training_dataloader`` is assigned only ``self.deepspeed_io(training_data)`` or None."""
    for node in ast.walk(ENGINE):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "self.training_dataloader" for t in node.targets):
            value = ast.unparse(node.value)
            assert value == "None" or value.startswith("self.deepspeed_io("), value


def test_every_row_names_its_reason_and_source_and_matches_its_own_prefix():
    assert set(DEEPSPEED_UNCONSUMED) == {"dataloader_drop_last", "data_efficiency.data_sampling", "pipeline"}
    for prefix, (why, source) in DEEPSPEED_UNCONSUMED.items():
        assert why and source and unconsumed_row(prefix) == prefix
        assert unconsumed_row(f"{prefix}.x") == prefix
    assert unconsumed_row("data_efficiency.data_routing.random_ltd.enabled") is None  # consumed: it wraps layers
    assert unconsumed_row("pipeline_x") is None


def test_dataloader_drop_last_is_read_only_by_the_dataloader_deepspeed_builds_itself():
    calls = _self_calls("dataloader_drop_last")
    assert calls and {_function(c) for c in calls} == {"deepspeed_io"}
    _no_training_data_on_the_trainers_path()
    _training_dataloader_only_from_deepspeed_io()


def test_data_sampling_is_read_only_through_deepspeeds_own_dataloader():
    names = (
        "curriculum_learning_enabled",
        "curriculum_learning_config",
        "data_sampling_enabled",
        "data_sampling_config",
    )
    calls = [c for n in names for c in _self_calls(n)]
    assert calls
    for call in calls:
        assert _function(call) == "deepspeed_io" or _guarded_by_training_dataloader(call), ast.unparse(call)
    _no_training_data_on_the_trainers_path()
    _training_dataloader_only_from_deepspeed_io()


def test_the_pipeline_block_is_read_only_by_the_pipeline_engine_which_a_hugging_face_model_never_gets():
    root = Path(deepspeed.__file__).parent
    readers = set()
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "_config.pipeline" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "pipeline"
                and ast.unparse(node.value).endswith("._config")  # the engine's DeepSpeedConfig
            ):
                readers.add(path.relative_to(root).parts[:2])
    assert readers == {("runtime", "pipe")}, readers
    assert "isinstance(model, PipelineModule)" in inspect.getsource(deepspeed.initialize)
    from deepspeed.pipe import PipelineModule

    assert not issubclass(LlamaForCausalLM, PipelineModule)
