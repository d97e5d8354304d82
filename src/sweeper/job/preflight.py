"""``python -m sweeper.job.preflight``: build each point's real library objects before any rank starts, and say
which sweeper key a library refuses (docs/gate.md, "The pre-flight").

The driver never imports torch or transformers; it keeps one of these workers per process
(:mod:`sweeper.point.preflight`) and sends it points. For each point, in order, the worker asks the libraries
themselves, as the ranks would meet them:

1. ``seed``: transformers' ``set_seed`` (what the Trainer calls; numpy refuses a seed outside ``0 .. 2**32 - 1``);
2. ``callbacks[i]``: the ``_target_`` imported (a missing module and a missing class are told apart), callable
   (duck-typed: no ``TrainerCallback`` subclass required), its arguments bound to its signature;
3. ``model.config``: ``AutoConfig.for_model`` (the config's own validation), the model built on the meta device and
   one forward on the meta device (shapes checked, nothing computed: ``num_key_value_heads`` that does not divide
   the heads fails here);
4. ``TrainingArguments`` as :func:`sweeper.job.trainer_setup.training_arguments` builds it (its ``__post_init__``
   checks), then the DataLoader arguments the Trainer derives from it (``dataloader_num_workers`` ...);
5. the DeepSpeed config as the HF integration finalises it against the (meta) model, parsed and validated by
   DeepSpeed's own ``DeepSpeedConfig`` (pydantic);
6. every ``fsdp_config`` entry changes accelerate's FSDP plugin arguments (``TrainingArguments.fsdp_plugin_args``)
   or is refused as having no effect, with the setting under which transformers would read it, found by asking it
   (:data:`SWITCHES`);
7. a ``deepspeed_config`` entry DeepSpeed parses but the Trainer's path never consumes is refused
   (:data:`sweeper.job.preflight_resolved.DEEPSPEED_UNCONSUMED`);
8. for an accepted point, the entries whose removal leaves every resolved object equal (``restating``,
   :func:`sweeper.job.preflight_resolved.restating`): the driver drops them from the point's identity.

A refusal names the sweeper key: the library's message says which field, or else the key is found by building the
point again without each passthrough entry (or with each ``model.config`` value the command line changed put back):
the entry whose removal makes the library accept the point is named.

Protocol: one JSON request per stdin line, ``{"points": [{"spec": {...}, "device": "cpu"|"cuda"}, ...]}``; one JSON
line per request on stdout, ``{"format": 1, "results": [{"refusal": null | {"keys": [...], "message": "...",
"check": "..."}, "notes": [...], "restating": ["training_args.…", ...]}, ...]}``. A launch request,
``{"launch": {...}}``, forks a point's ranks (:mod:`sweeper.job.forked_launch`) and is answered ``{"format": 1,
"pid": <launch process>}`` (or ``"error"``). Everything the libraries print goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from sweeper.job import forked_launch
from sweeper.job.preflight_checks import (
    Refused,
    check_callbacks,
    check_dataloader,
    check_deepspeed,
    check_fsdp_effect,
    check_seed,
    check_training_args,
    error_text,
    meta_model_of,
    no_deepspeed_global,
)
from sweeper.job.preflight_resolved import check_deepspeed_unconsumed, restating

#: Version of the output's shape.
FORMAT = 1
_ANSWERS: dict[str, dict[str, Any]] = {}


def examine(spec_data: dict[str, Any], device: str) -> dict[str, Any]:
    """One point's answer: ``{"refusal": None | {"keys", "message", "check"}, "notes": [...]}``. ``seed`` is checked
    for every point; the rest once per distinct point without its seed (the seed changes no library object's
    validity, and a ``seed=range(0,1000)`` grid is one check)."""
    from sweeper.config.spec import PointSpec

    spec = PointSpec.from_dict(spec_data)
    try:
        check_seed(spec)
    except Refused as r:
        return {"refusal": {"keys": list(r.keys), "message": r.message, "check": r.check}, "notes": []}
    key = json.dumps([{k: v for k, v in spec_data.items() if k != "seed"}, device], sort_keys=True, default=str)
    if key not in _ANSWERS:
        _ANSWERS[key] = _examine(spec, device)
    return _ANSWERS[key]


def _examine(spec: Any, device: str) -> dict[str, Any]:
    notes: list[str] = []
    try:
        with no_deepspeed_global():
            check_callbacks(spec)
            model = meta_model_of(spec)
            args = check_training_args(spec, device, notes)
            if args is not None:
                check_dataloader(spec, args)
                if spec.deepspeed:
                    check_deepspeed(spec, args, model)
                    check_deepspeed_unconsumed(spec, args, model)
                if spec.fsdp != "none" and spec.fsdp_config:
                    check_fsdp_effect(spec, args)
    except Refused as r:
        return {"refusal": {"keys": list(r.keys), "message": r.message, "check": r.check}, "notes": notes}
    same: list[str] = []
    if args is not None:
        try:
            same = restating(spec, args.use_cpu, model)
        except Exception as e:  # noqa: BLE001 - the identity stays the spec's own; the point is not refused for it
            notes.append(f"resolved objects not compared: {error_text(e)}")
    return {"refusal": None, "notes": notes, "restating": same}


#: What every point's checks import, loaded before the first request is read: the driver starts the worker early
#: (:func:`sweeper.point.preflight.warm_up`, at ``python -m sweeper``'s start) so that these ~3 s of imports pass while
#: Hydra composes the grid. ``trainer_setup`` brings torch and transformers' Trainer (and with it the modules that
#: ``TrainingArguments.__post_init__`` would import); DeepSpeed is left for the ZeRO points that need it.
PRELOAD = ("sweeper.job.trainer_setup", "torch.utils.data")


def preload() -> None:
    """Import :data:`PRELOAD`; a module that fails is left for the check that needs it to report."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the point's own check imports it again and says what failed
            return


def main() -> None:
    """Serve requests on stdin until it closes (see the module doc); library output goes to stderr."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from sweeper.redact import reveal  # noqa: F401 - secrets stay references: the libraries never need their values

    preload()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        forked_launch.reap()
        if "launch" in request:  # fork a point's ranks (sweeper.job.forked_launch): answer its pid
            try:
                answer: dict[str, Any] = {"pid": forked_launch.start(request["launch"], (0, out.fileno()))}
            except Exception as e:  # noqa: BLE001 - the driver starts the ranks itself then
                answer = {"error": error_text(e)}
            out.write(json.dumps({"format": FORMAT, **answer}) + "\n")
            out.flush()
            continue
        results = []
        for point in request.get("points", []):
            try:
                results.append(examine(point["spec"], point.get("device", "cpu")))
            except Exception as e:  # noqa: BLE001 - the worker's own fault: the point is not refused for it
                results.append({"refusal": None, "notes": [f"pre-flight failed on this point: {error_text(e)}"]})
        out.write(json.dumps({"format": FORMAT, "results": results}, default=str) + "\n")
        out.flush()
    forked_launch.stop_all()  # the driver is gone (stdin closed): no launch of its outlives it


if __name__ == "__main__":
    main()
