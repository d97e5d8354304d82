"""Values derived once from a frozen dataclass (:class:`Memoised`), and the copy of plain data they are handed out as
(:func:`plain_copy`): a 1,000-point submission asks each point's spec and target for their plain data several times."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
#: The instance attribute (not a dataclass field) holding :meth:`Memoised.memoised`'s values.
MEMO = "_memo"


class Memoised:
    """Mixin of a frozen dataclass whose fields are never changed in place (dict fields included)."""

    def memoised(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per instance and ``key``: a value derived from the fields alone. The values live beside
        the fields, never in them: not in equality, ``asdict``, :func:`dataclasses.replace`, copies or pickles (a
        SLURM payload)."""
        memo = self.__dict__.get(MEMO)
        if memo is None:
            memo = {}
            object.__setattr__(self, MEMO, memo)
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def __getstate__(self) -> dict[str, Any]:
        """The fields only (a pickled or copied instance carries none of :meth:`memoised`'s values)."""
        return {k: v for k, v in self.__dict__.items() if k != MEMO}


def plain_copy(data: Any) -> Any:
    """A copy of plain data (dicts, lists, tuples of JSON-like leaves), each container new: what ``copy.deepcopy``
    gives for such data, without its memo (several times faster)."""
    if isinstance(data, dict):
        return {k: plain_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain_copy(v) for v in data]
    if isinstance(data, tuple):
        return tuple(plain_copy(v) for v in data)
    return data
