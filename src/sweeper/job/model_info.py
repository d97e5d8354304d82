"""``python -m sweeper.job.model_info <config.json>``: what a user's Hugging Face model config is to sweeper, as JSON.

The driver never imports transformers; when ``model=`` names a ``config.json`` (a path, a folder holding one, or a
hub id in the local cache: :mod:`sweeper.config.model_files`), it runs this module once per file content and
transformers version and caches the model file it makes from the answer.

Output (one JSON object on stdout)::

    {"model_type": "mistral", "decoder_layer": "MistralDecoderLayer", "causal_lm": "MistralForCausalLM",
     "config": {...the file's architecture numbers...}, "transformers": "5.25.0"}

or ``{"error": "..."}`` (exit 1) when transformers cannot read the file or has no causal LM for its ``model_type``.
``decoder_layer`` is the causal-LM class's first ``_no_split_modules`` entry: the block transformers itself never
splits, the FSDP auto-wrap and checkpointing unit. Nothing is built and nothing is downloaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: Keys of a ``config.json`` that say where and how it was saved, not what the architecture is: left out of the
#: model file (``dtype`` is the point's ``model_dtype``).
NOT_ARCHITECTURE = frozenset(
    {"architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "model_type", "auto_map"}
)


def describe(path: Path) -> dict[str, Any]:
    """The answer for the ``config.json`` at ``path`` (see the module doc).

    Raises:
        ValueError: transformers cannot read it, or has no causal LM class for its ``model_type`` (the message says
            which, with the installed version).
    """
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    raw = json.loads(path.read_text())
    if not isinstance(raw, dict) or not raw.get("model_type"):
        raise ValueError(f"{path} is not a Hugging Face model config: it has no model_type")
    model_type = str(raw["model_type"])
    try:
        AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k != "model_type"})
    except Exception as e:
        raise ValueError(f"transformers {transformers.__version__} cannot read {path}: {type(e).__name__}: {e}") from e
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if not name:
        raise ValueError(
            f"transformers {transformers.__version__} has no causal-LM class for model_type={model_type!r} ({path}): "
            "sweeper trains AutoModelForCausalLM models only"
        )
    cls = getattr(transformers, name)
    blocks = list(getattr(cls, "_no_split_modules", None) or [])
    if not blocks:
        raise ValueError(
            f"{name} names no _no_split_modules in transformers {transformers.__version__}: sweeper cannot tell its "
            "decoder block (the FSDP wrap and checkpointing unit); give a model file with decoder_layer "
            "(docs/models.md)"
        )
    return {
        "model_type": model_type,
        "decoder_layer": blocks[0],
        "causal_lm": name,
        "config": {k: v for k, v in raw.items() if k not in NOT_ARCHITECTURE},
        "transformers": transformers.__version__,
    }


def main(argv: list[str]) -> int:
    """Print :func:`describe` of ``argv[0]`` as one JSON line; ``{"error": ...}`` and exit 1 on a ValueError or an
    unreadable file."""
    try:
        print(json.dumps(describe(Path(argv[0]))))
    except (ValueError, OSError) as e:
        print(json.dumps({"error": str(e)}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
