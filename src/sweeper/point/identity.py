"""A point's identity: what changes the run, normalised, hashed into a 12-hex point id.

Two specs that would run the same training get the same id, so a grid never holds one configuration twice and
timing noise never decides between two copies of it (docs/cases.md#t09, docs/cases.md#t10). Normalisation, before
hashing:

- **budgets are not identity**: ``timeout_s``, ``host_mem_limit_gib``, ``profile_steps`` and ``profile_trace``
  bound or decorate a run without changing what it measures (the profile window runs after the timed and memory
  windows and only yields the top-ops table and the trace), ``timing.*`` (how ``timed_steps=auto`` sizes its
  window: its confidence target and step bounds; ``timed_steps=auto`` itself is identity, a procedure other than
  any fixed count), and capacity planning's ``prune``, ``train_tokens`` and ``plan.*`` only change what is
  predicted or whether the point is launched, and ``search.*`` (how the multirun walks the grid, and whether this
  job is the frontier search's short screen of the point or its full measurement: docs/search.md); a rerun with a
  new budget replaces the old record (history kept as
  ``result.<n>.json``);
- **settings without effect are dropped**: ``use_reentrant`` without checkpointing (``gc=false``), ``fsdp_config``
  without FSDP, ``deepspeed_config`` without DeepSpeed (both refused by the gate anyway), and passthrough entries
  that restate what sweeper sets itself or the library default it leaves in place (see
  :func:`sweeper.point.library_args.redundant_passthrough`: ``+deepspeed_config.zero_optimization.stage=2`` with
  ``zero=2``, ``+training_args.report_to=none``, ``+fsdp_config.reshard_after_forward=true`` with full_shard);
- **what the libraries resolve to the same objects is the same point**: the pre-flight builds each point's
  ``TrainingArguments``, DeepSpeed's parse of its config and its model config with and without each entry, and the
  entries that change none of them are dropped too (``restating``, :func:`sweeper.point.preflight.restating`):
  ``+deepspeed_config.zero_optimization.reduce_bucket_size=4096`` on a hidden-64 model (what ``"auto"`` resolves
  to), ``+model.config.rope_theta=10000.0`` on a Llama (its default);
- **an axis that is off is not there**: ``tp``, ``sp`` and ``pp`` at 1 are left out, so the ids of points recorded
  before these axes existed do not change;
- **one spelling per key**: ``fsdp_config`` keys lose the ``fsdp_`` prefix transformers strips
  (``fsdp_cpu_offload`` is ``cpu_offload``).

The record keeps the full spec as given; only the hash uses the normalised form. See ``docs/architecture.md``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sweeper.config.spec import PointSpec

#: Spec fields that bound or decorate a run without changing what it measures.
BUDGET_FIELDS: frozenset[str] = frozenset(
    {
        "timeout_s",
        "host_mem_limit_gib",
        "profile_steps",
        "profile_trace",
        "prune",
        "train_tokens",
        "plan",
        "timing",
        "search",
    }
)


#: The parallelism degrees: 1 (off) leaves the identity as it was before the axes existed.
_DEGREES = ("tp", "sp", "pp")

#: The spec field of each section a ``restating`` key starts with.
_SECTIONS = {"training_args": "training_args", "deepspeed_config": "deepspeed_config", "model.config": "model_config"}


def normalised(spec: PointSpec, restating: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The spec as its identity: budgets removed, settings without effect reset (see the module doc);
    ``restating``: dotted keys (``training_args.…``, ``deepspeed_config.…``, ``model.config.…``) the libraries
    resolve to what the point is without them (the pre-flight's answer), dropped too.

    Returns:
        A plain dict (JSON-serialisable), the input of :func:`point_id`.
    """
    from sweeper.point.library_args import fsdp_key, redundant_passthrough

    data = {k: v for k, v in spec.to_dict().items() if k not in BUDGET_FIELDS}
    # timed_steps=auto is its own measurement procedure (identity); its cap, like every timing.* key, is a budget.
    # A fixed timed_steps hashes as before (no timed_auto key), so the ids of existing records do not change.
    if data.pop("timed_auto", False):
        data["timed_steps"] = "auto"
    for degree in _DEGREES:  # off is no key at all: a point of a version without the axes keeps its id
        if data.get(degree) == 1:
            del data[degree]
    if not spec.gc:
        data["use_reentrant"] = None  # torch.utils.checkpoint is never called
    if spec.fsdp == "none":
        data["fsdp_config"] = {}
    if not spec.deepspeed:
        data["deepspeed_config"] = {}
    for section, keys in redundant_passthrough(spec).items():
        data[section] = _drop(data[section], keys)
    for prefix, section in _SECTIONS.items():
        keys = {k[len(prefix) + 1 :] for k in restating if k.startswith(f"{prefix}.")}
        if keys:
            data[section] = _drop(data[section], keys)
    data["fsdp_config"] = {fsdp_key(k): v for k, v in data["fsdp_config"].items()}
    return data


def _drop(mapping: dict[str, Any], dotted: set[str]) -> dict[str, Any]:
    """``mapping`` without the entries named by ``dotted`` paths (``"zero_optimization.stage"``)."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        inner = {d.split(".", 1)[1] for d in dotted if d.startswith(f"{k}.")}
        if k in dotted:
            continue
        if inner and isinstance(v, dict):
            v = _drop(v, inner)
            if not v:
                continue
        out[k] = v
    return out


def canonical_json(spec: PointSpec, restating: frozenset[str] = frozenset()) -> str:
    """The normalised spec as canonical JSON (sorted keys, no whitespace): the input of :func:`point_id`."""
    return json.dumps(normalised(spec, restating), sort_keys=True, separators=(",", ":"), default=str)


def point_id(spec: PointSpec, restating: frozenset[str] = frozenset()) -> str:
    """12 hex digits of SHA-256 over :func:`canonical_json`: equal identities share an id, any change of what
    runs gives a new one. ``restating``: the pre-flight's entries without effect (:func:`normalised`); the driver
    passes :func:`sweeper.point.preflight.restating` (:func:`sweeper.point.lifecycle.identity_of`). Computed once
    per spec and ``restating`` (:meth:`~sweeper.config.spec.PointSpec.memoised`)."""
    return spec.memoised(
        ("point_id", restating), lambda: hashlib.sha256(canonical_json(spec, restating).encode()).hexdigest()[:12]
    )
