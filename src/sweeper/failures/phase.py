"""The phase a failure happened in (``setup`` / ``train`` / ``eval``), from the frames of its traceback."""

from __future__ import annotations

import re

PHASES: tuple[str, ...] = ("setup", "train", "eval")

_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')
EVAL_FUNCS = frozenset(
    {
        "evaluate",
        "_evaluate",
        "evaluation_loop",
        "prediction_loop",
        "prediction_step",
        "predict",
        "evaluation_step",
    }
)
STEP_FUNCS = frozenset(
    {
        "training_step",
        "compute_loss",
        "forward",
        "backward",
        "_engine_run_backward",
        "run_backward",
        "unscale_",
        "clip_grad_norm_",
        "step",
        "optimizer_step",
    }
)
_SETUP_FUNCS = frozenset(
    {
        "from_pretrained",
        "from_config",
        "_from_config",
        "__post_init__",
        "_setup_devices",
        "post_init",
        "_wrap_model",
        "prepare",
        "prepare_model",
        "_prepare_deepspeed",
        "_prepare_fsdp",
        "deepspeed_init",
        "initialize",
        "init_process_group",
        "create_optimizer",
        "create_optimizer_and_scheduler",
        "create_accelerator_and_postprocess",
        "_load_from_checkpoint",
    }
)
_SETUP_INIT_FILES = re.compile(
    r"(?:^|/)(?:trainer|training_args|modeling_\w+|configuration_\w+)\.py$|/deepspeed/|/accelerate/"
    r"|/torch/nn/parallel/|/torch/distributed/fsdp/|/peft/"
)
_LIBRARY_CONFIG_FILES = re.compile(
    r"(?:^|/)(?:training_args|trainer|trainer_utils|configuration_utils|training_args_seq2seq)\.py$"
    r"|/accelerate/|/deepspeed/|/peft/"
)


def frames(traceback_text: str) -> list[tuple[str, str]]:
    """(file, function) of every ``File "...", line N, in f`` line, outermost first (``\\`` read as ``/``)."""
    return [(m.group(1).replace("\\", "/"), m.group(2)) for m in _FRAME.finditer(traceback_text or "")]


def in_library_config_code(frame_list: list[tuple[str, str]]) -> bool:
    """Whether any frame is in code that validates a configuration (``TrainingArguments``, ``Trainer``,
    accelerate, DeepSpeed, peft)."""
    return any(_LIBRARY_CONFIG_FILES.search(path) for path, _ in frame_list)


def infer_phase(traceback_text: str) -> str:
    """Tell the phase from the functions the traceback passes through.

    Rule, first that applies:

    1. ``eval``: any frame in evaluation code (``evaluate``, ``evaluation_loop``, ``prediction_step``, ``predict``,
       ...), also when evaluation runs inside ``train`` (``_maybe_log_save_evaluate``).
    2. ``train``: any frame of a training step (``training_step``, ``compute_loss``, ``forward``, ``backward``,
       ``unscale_``, ``clip_grad_norm_``, an optimizer ``step``).
    3. ``setup``: any frame of construction before the first step: model building (``from_pretrained``,
       ``from_config``, ``__init__`` of a ``modeling_*.py`` module), ``Trainer``/``TrainingArguments`` construction
       (``__init__`` in ``trainer.py``/``training_args.py``, ``__post_init__``), wrapping (``_wrap_model``,
       accelerate ``prepare``, ``deepspeed_init``, DDP/FSDP ``__init__``), ``init_process_group``,
       ``create_optimizer``; this holds also inside ``train`` → ``_inner_training_loop`` when no step has run.
    4. otherwise ``train`` (also for an empty traceback; the caller overrides the phase with what it knows).
    """
    frames_ = frames(traceback_text)
    funcs = {f for _, f in frames_}
    if funcs & EVAL_FUNCS:
        return "eval"
    if funcs & STEP_FUNCS:
        return "train"
    for path, func in frames_:
        if func in _SETUP_FUNCS or (func == "__init__" and _SETUP_INIT_FILES.search(path)):
            return "setup"
    return "train"
