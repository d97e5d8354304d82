"""Combinations known to fail with some versions of a library, as data (consulted by the gate before launch and
when classifying a failure).

A row's condition names keys of the point spec (:meth:`sweeper.config.spec.PointSpec.to_dict`) by dotted path, into
the passthrough dicts too (``training_args.ddp_find_unused_parameters``, ``deepspeed_config.zero_optimization.stage``),
plus the derived keys of :data:`DERIVED`. The gate (:mod:`sweeper.point.rules.known`) refuses a point that meets a
row with ``before_launch=True``; a row whose failure the spec cannot show (``before_launch=False``) only names the
cause of a failure the classifier has already seen (:func:`sweeper.failures.classify`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_MISSING = object()


def _ddp(spec: dict[str, Any]) -> bool | None:
    """True when the Trainer wraps the model in plain DDP: no FSDP, no DeepSpeed, more than one rank."""
    try:
        world = int(spec["ranks_per_node"]) * int(spec["nodes"])
        return normalise_value(spec["fsdp"]) == "none" and normalise_value(spec["zero"]) == 0 and world > 1
    except (KeyError, TypeError, ValueError):
        return None


#: Keys computed from the spec that a condition may use: name -> (function of the spec dict, the spec keys it
#: reads, named by a refusal in its place).
DERIVED: dict[str, tuple[Callable[[dict[str, Any]], Any], tuple[str, ...]]] = {
    "ddp": (_ddp, ("fsdp", "zero", "ranks_per_node", "nodes")),
}


def spec_value(spec: dict[str, Any], key: str) -> Any:
    """``spec``'s value at the dotted ``key`` (``training_args.x``: the ``x`` entry of the ``training_args`` dict;
    a flat key holding a dot is read as is), a :data:`DERIVED` key computed, None when absent."""
    if key in DERIVED:
        return DERIVED[key][0](spec)
    if key in spec:
        return spec[key]
    node: Any = spec
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


@dataclass(frozen=True)
class KnownIncompatible:
    """One combination known to fail with some versions of one library.

    Attributes:
        description: what fails and why, in a sentence.
        condition: dotted spec keys (see the module doc) and the value each must have; a tuple means "any of
            these"; an absent key counts as ``None``. Values compare after :func:`normalise_value`.
        library: the distribution name whose version decides (``deepspeed``, ``torch``, ``transformers``).
        affected: a PEP 440 specifier (``packaging.specifiers.SpecifierSet``) of the failing versions; ``""`` is
            every version.
        source: where it was reported, e.g. ``"huggingface/transformers#47254"``.
        workaround: what to run instead.
        before_launch: the spec shows the whole condition, so the gate refuses the point before launch; False when
            part of the cause is invisible in the spec (then only a classified failure is attributed to the row).
        keys: the keys a refusal names (default: the condition's keys, derived keys replaced by what they read).
    """

    description: str
    condition: dict[str, Any]
    library: str
    affected: str
    source: str
    workaround: str = ""
    before_launch: bool = True
    keys: tuple[str, ...] = ()

    def matches_spec(self, spec: dict[str, Any]) -> bool:
        """True when every condition key of ``spec`` has an allowed value."""
        for key, wanted in self.condition.items():
            value = normalise_value(spec_value(spec, key))
            allowed = wanted if isinstance(wanted, tuple) else (wanted,)
            if not any(_equal(value, normalise_value(a)) for a in allowed):
                return False
        return True

    def named_keys(self) -> tuple[str, ...]:
        """The keys a refusal by this row names: :attr:`keys`, else the condition's (derived keys expanded)."""
        if self.keys:
            return self.keys
        out: list[str] = []
        for key in self.condition:
            out.extend(DERIVED[key][1] if key in DERIVED else (key,))
        return tuple(dict.fromkeys(out))

    def affects(self, version: str | None) -> bool:
        """True when ``version`` is in :attr:`affected`; False when unknown or unparsable."""
        if not version:
            return False
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return SpecifierSet(self.affected).contains(Version(version), prereleases=True)
        except (InvalidVersion, InvalidSpecifier):
            return False


def _equal(a: Any, b: Any) -> bool:
    """Equal, with a bool equal only to a bool (``True`` is not ``1`` here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


#: Combinations known to fail, by library version. Consulted before launch (:func:`match_known_incompatible` with
#: ``before_launch=True``) and when classifying a failure (an ``incompatible`` error then carries the row's reason
#: and the versions).
KNOWN_INCOMPATIBLE: list[KnownIncompatible] = [
    KnownIncompatible(
        description=(
            "plain DDP (fsdp=none, zero=0, more than one rank) + gc=true + use_reentrant=true + "
            "training_args.ddp_find_unused_parameters=true: the reentrant backward "
            "of each checkpointed layer fires DDP's gradient hooks again after the unused-parameter search has "
            "marked parameters ready, and the first backward fails with 'Expected to mark a variable ready only "
            "once'. torch's DDP docs: with use_reentrant=True, DDP works only without find_unused_parameters=True "
            "(static_graph=True is the documented escape)"
        ),
        condition={
            "ddp": True,
            "gc": True,
            "use_reentrant": True,
            "training_args.ddp_find_unused_parameters": True,
            "training_args.ddp_static_graph": (None, False),
        },
        library="torch",
        affected="",
        source=(
            "torch.nn.parallel.DistributedDataParallel docs, gradient-checkpointing note (pytorch/pytorch#106985); "
            "pytorch/pytorch#24005; huggingface/accelerate#2017; docs/cases.md#t03"
        ),
        workaround=(
            "use_reentrant=false (non-reentrant checkpointing works with DDP without limits), or drop "
            "training_args.ddp_find_unused_parameters (sweeper sets false), or +training_args.ddp_static_graph=true"
        ),
        keys=("gc", "use_reentrant", "training_args.ddp_find_unused_parameters", "fsdp", "zero"),
    ),
    KnownIncompatible(
        description=(
            "DeepSpeed ZeRO-3 + gradient checkpointing (non-reentrant) + frozen parameters (e.g. LoRA): ZeRO-3 "
            "repartitions a frozen parameter before the checkpoint recompute, so the recomputed tensor has size 0 "
            "and torch.utils.checkpoint raises CheckpointError. Fixed in DeepSpeed 0.19.3 (deepspeedai/DeepSpeed"
            "#8148); the first affected release is not known (reports since 2024, huggingface/trl#2514), so every "
            "earlier release is treated as affected. Frozen parameters are not a sweeper key (a callback can "
            "freeze them), so the gate cannot see this before launch; the classifier attributes the failure "
            "(a recomputed tensor of size 0 under ZeRO-3) to it"
        ),
        condition={"zero": 3, "gc": True, "use_reentrant": (False, None)},
        library="deepspeed",
        affected="<0.19.3",
        source="huggingface/transformers#47254",
        workaround="use_reentrant=true, or zero=2, or deepspeed>=0.19.3",
        before_launch=False,
    ),
]


def normalise_value(value: Any) -> Any:
    """Spec values as the table compares them: "true"/"false" -> bool, "3" -> 3."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "yes"):
            return True
        if low in ("false", "no"):
            return False
        if low.isdigit():
            return int(low)
    return value


def _version_of(versions: dict[str, str], library: str) -> str | None:
    canon = {k.lower().replace("_", "-"): v for k, v in versions.items()}
    return canon.get(library.lower().replace("_", "-"))


def match_known_incompatible(
    spec: dict[str, Any], versions: dict[str, str], *, before_launch: bool = False
) -> KnownIncompatible | None:
    """The first :data:`KNOWN_INCOMPATIBLE` row whose condition ``spec`` meets, for the installed ``versions``.

    ``versions`` maps distribution names to version strings (``{"deepspeed": "0.19.2"}``); a library missing from
    it, or with an unparsable version, does not match (nothing is claimed about a version we cannot see).

    Args:
        before_launch: only rows the gate may refuse on (:attr:`KnownIncompatible.before_launch`).
    """
    for row in KNOWN_INCOMPATIBLE:
        if before_launch and not row.before_launch:
            continue
        if row.matches_spec(spec) and row.affects(_version_of(versions, row.library)):
            return row
    return None


def describe(row: KnownIncompatible, versions: dict[str, str]) -> str:
    """The reason a point meeting ``row`` fails: description, the installed version, source, workaround."""
    version = _version_of(versions, row.library)
    scope = f"is in the affected range {row.affected}" if row.affected else "(every release is affected)"
    text = f"{row.description} [{row.library} {version} {scope}; {row.source}]"
    return f"{text}. Workaround: {row.workaround}." if row.workaround else text + "."


def known_incompatible(spec: dict[str, Any], versions: dict[str, str]) -> str | None:
    """The reason ``spec`` is known to fail with the installed ``versions``, or ``None``.

    ``spec`` is the point spec as a dict (:meth:`sweeper.config.spec.PointSpec.to_dict`, or the flat keys a row
    needs); see :func:`match_known_incompatible` for how rows and versions are matched.
    """
    row = match_known_incompatible(spec, versions)
    return None if row is None else describe(row, versions)
