"""Combinations known to fail with some versions of a library, as data (consulted by the gate before launch and
when classifying a failure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KnownIncompatible:
    """One combination known to fail with some versions of one library.

    Attributes:
        description: what fails and why, in a sentence.
        condition: flat spec keys (``zero``, ``gc``, ``fsdp``, ``use_reentrant``, ``precision``, ``frozen_params``)
            and the value each must have; a tuple means "any of these". A missing spec key counts as ``None``,
            except ``frozen_params`` which defaults to ``False``.
        library: the distribution name whose version decides (``deepspeed``, ``torch``, ``transformers``).
        affected: a PEP 440 specifier (``packaging.specifiers.SpecifierSet``) of the failing versions.
        source: where it was reported, e.g. ``"huggingface/transformers#47254"``.
        workaround: what to run instead.
    """

    description: str
    condition: dict[str, Any]
    library: str
    affected: str
    source: str
    workaround: str = ""

    def matches_spec(self, spec: dict[str, Any]) -> bool:
        for key, wanted in self.condition.items():
            default = False if key == "frozen_params" else None
            value = normalise_value(spec.get(key, default))
            allowed = wanted if isinstance(wanted, tuple) else (wanted,)
            if value not in allowed:
                return False
        return True

    def affects(self, version: str | None) -> bool:
        """True when ``version`` is in :attr:`affected`; False when unknown or unparsable."""
        if not version:
            return False
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return SpecifierSet(self.affected).contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False


#: Combinations known to fail, by library version. Consulted before launch (:func:`known_incompatible`) and when
#: classifying a failure (an ``incompatible`` error then carries the row's reason and the versions).
KNOWN_INCOMPATIBLE: list[KnownIncompatible] = [
    KnownIncompatible(
        description=(
            "DeepSpeed ZeRO-3 + gradient checkpointing (non-reentrant) + frozen parameters (e.g. LoRA): ZeRO-3 "
            "repartitions a frozen parameter before the checkpoint recompute, so the recomputed tensor has size 0 "
            "and torch.utils.checkpoint raises CheckpointError. Fixed in DeepSpeed 0.19.3 (deepspeedai/DeepSpeed"
            "#8148); the first affected release is not known (reports since 2024, huggingface/trl#2514), so every "
            "earlier release is treated as affected"
        ),
        condition={"zero": 3, "gc": True, "frozen_params": True, "use_reentrant": (False, None)},
        library="deepspeed",
        affected="<0.19.3",
        source="huggingface/transformers#47254",
        workaround="use_reentrant=true, or zero=2, or deepspeed>=0.19.3",
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


def match_known_incompatible(spec: dict[str, Any], versions: dict[str, str]) -> KnownIncompatible | None:
    """The first :data:`KNOWN_INCOMPATIBLE` row whose condition ``spec`` meets, for the installed ``versions``.

    ``versions`` maps distribution names to version strings (``{"deepspeed": "0.19.2"}``); a library missing from
    it, or with an unparsable version, does not match (nothing is claimed about a version we cannot see).
    """
    for row in KNOWN_INCOMPATIBLE:
        if row.matches_spec(spec) and row.affects(_version_of(versions, row.library)):
            return row
    return None


def known_incompatible(spec: dict[str, Any], versions: dict[str, str]) -> str | None:
    """The reason ``spec`` is known to fail with the installed ``versions``, or ``None``.

    ``spec`` is the flat point spec (keys ``zero``, ``gc``, ``fsdp``, ``use_reentrant``, ``precision``,
    ``frozen_params``); see :func:`match_known_incompatible` for how rows and versions are matched.
    """
    row = match_known_incompatible(spec, versions)
    if row is None:
        return None
    version = _version_of(versions, row.library)
    text = f"{row.description} [{row.library} {version} is in the affected range {row.affected}; {row.source}]"
    return f"{text}. Workaround: {row.workaround}." if row.workaround else text + "."
