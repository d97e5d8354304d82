"""The gate: every rule a point must pass before any rank starts, for every launcher.

A rule is data (:class:`Rule`): an id, the keys it concerns, a one-line statement, its source, the status it gives
(``invalid`` for a configuration that cannot work, ``unsupported`` for hardware that cannot run the label) and a
check. :func:`check` runs them in order and raises :class:`InvalidPoint` for the first that refuses; every message
names every key involved and says what to use instead. ``docs/gate.md`` lists every rule (a test keeps the two
equal). The rules live in :mod:`sweeper.point.rules`; this module is the machinery.

Single point: a refusal exits 2 before any directory is made. Grid: the point is recorded with the refusal's
status and the grid goes on (:mod:`sweeper.point.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target


class InvalidPoint(ValueError):
    """A grid point refused before launch.

    Attributes:
        keys: every config key involved, e.g. ``("fsdp", "fsdp_config.reshard_after_forward")``.
        status: ``invalid`` (the configuration cannot work as labelled), ``unsupported`` (this hardware cannot
            run it truthfully) or ``pruned`` (``prune=true`` and predicted not to fit, rule C01).
        kind: a finer family where one helps (``incompatible`` for a known library bug), else None.
        rule: the id of the rule that refused (``docs/gate.md``), or None.
    """

    def __init__(
        self,
        message: str,
        keys: tuple[str, ...],
        status: str = "invalid",
        kind: str | None = None,
        rule: str | None = None,
    ) -> None:
        super().__init__(message)
        self.keys = tuple(keys)
        self.status = status
        self.kind = kind
        self.rule = rule


#: A rule's check: None when the point passes, else (message, keys involved).
Check = Callable[[PointSpec, Target], "tuple[str, tuple[str, ...]] | None"]


@dataclass(frozen=True)
class Rule:
    """One gate rule (a row of ``docs/gate.md``).

    Attributes:
        id: stable id, ``G01``...
        keys: the keys the rule concerns (documentation; a refusal names the keys actually involved).
        statement: the rule in one line.
        source: where the rule comes from (case id, issue thread, library doc).
        check: see :data:`Check`.
        status: ``invalid``, ``unsupported`` or ``pruned``.
        kind: optional finer family (``incompatible``).
    """

    id: str
    keys: tuple[str, ...]
    statement: str
    source: str
    check: Check
    status: str = "invalid"
    kind: str | None = None


RULES: list[Rule] = []


def rule(
    id: str, keys: tuple[str, ...], statement: str, source: str, status: str = "invalid", kind: str | None = None
) -> Callable[[Check], Check]:
    """Decorator registering a check function as a :class:`Rule` in :data:`RULES` (in definition order).

    Raises:
        ValueError: a duplicate rule id.
    """

    def register(fn: Check) -> Check:
        if any(r.id == id for r in RULES):
            raise ValueError(f"duplicate gate rule id {id}")
        RULES.append(Rule(id, keys, statement, source, fn, status, kind))
        return fn

    return register


def ordered_rules() -> list[Rule]:
    """Every registered rule, in the order they run (:data:`sweeper.point.rules.ORDER`, then definition order)."""
    from sweeper.point.rules import ORDER

    modules = [m.__name__ for m in ORDER]
    return sorted(RULES, key=lambda r: modules.index(r.check.__module__))


def check(spec: PointSpec, target: Target) -> None:
    """Run every rule on ``spec`` for ``target``, in order.

    Raises:
        InvalidPoint: from the first rule that refuses, with its message, the keys involved, status, kind, rule id.
    """
    for r in ordered_rules():
        found = r.check(spec, target)
        if found is not None:
            message, keys = found
            raise InvalidPoint(message, keys, status=r.status, kind=r.kind, rule=r.id)
