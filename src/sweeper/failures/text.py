"""Reading a library's error text: the rank prefix, the informative lines of a message, chained import errors.

Everything here works on plain strings and returns plain strings or numbers; nothing is ever interpreted as markup.
"""

from __future__ import annotations

import re

#: How many traceback lines are kept in ``Failure.details["traceback_tail"]``.
TRACEBACK_TAIL_LINES = 30

#: The prefix torch.distributed puts on every line a rank prints through its exception hook or its loggers
#: (``torch/distributed/distributed_c10d.py``: ``[rank3]: Traceback ...``; ``torch/_logging``: ``[rank3]:``).
_RANK_PREFIX = re.compile(r"^[ \t]*\[rank(\d+)\]:[ \t]?", re.MULTILINE)


def strip_rank_prefixes(text: str) -> str:
    """``text`` with the ``[rankN]:`` prefix removed from the start of every line (other text unchanged)."""
    return _RANK_PREFIX.sub("", text or "")


def rank_from_prefix(message: str, traceback_text: str = "") -> int | None:
    """The rank named by a ``[rankN]:`` line prefix (docs/cases.md#t13: ``[rank3]: torch.OutOfMemoryError: ...`` -> 3).

    Rule, first that applies: the first prefixed line of ``message``; in ``traceback_text`` (a rank's log, where
    several ranks' lines can be interleaved), the rank of the prefixed line that carries the message's first line;
    the one rank all prefixed lines of ``traceback_text`` name. Otherwise ``None`` (no prefix, or several ranks
    and none carrying the message).
    """
    m = _RANK_PREFIX.search(message or "")
    if m:
        return int(m.group(1))
    prefixed = [(int(m.group(1)), m.end()) for m in _RANK_PREFIX.finditer(traceback_text or "")]
    if not prefixed:
        return None
    head = first_line(strip_rank_prefixes(message), limit=10_000)
    if head:
        for rank, end in prefixed:
            if head in traceback_text[end:].split("\n", 1)[0]:
                return rank
    ranks = {rank for rank, _ in prefixed}
    return ranks.pop() if len(ranks) == 1 else None


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``...`` when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def first_line(message: str, limit: int = 200) -> str:
    """The first non-blank line of ``message`` (``[rankN]:`` prefix removed), at most ``limit`` characters."""
    for line in strip_rank_prefixes(message).splitlines():
        line = line.strip()
        if line:
            return clip(line, limit)
    return ""


#: A line that tells a person what to change: advice words, or a name that looks like a configuration key
#: (``training_args.foo``, ``--foo``, ``foo_bar``, ```foo```, ``foo=``).
_INFORMATIVE = re.compile(
    r"\b(?:use|set|try|instead|pass|install|specify|choose)\b"
    r"|\b[a-z]\w*\.[a-z_]\w*\b(?!\s*\()"
    r"|(?<![\w-])--[a-z][\w-]*"
    r"|\b[a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9]\b"
    r"|`[^`\n]+`"
    r"|\b\w+\s*=\s*\S",
    re.IGNORECASE,
)
_NOISE = re.compile(r'^(?:Traceback \(most recent call last\)|File "|\^+$|~+$)')
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`'\"(\[])")


def _units(message: str, unit_limit: int) -> list[str]:
    """The message's non-blank lines; a line longer than ``unit_limit`` is split into its sentences."""
    units: list[str] = []
    for line in strip_rank_prefixes(message).splitlines():
        line = line.strip()
        if not line or _NOISE.match(line):
            continue
        if len(line) > unit_limit:
            units.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
        else:
            units.append(line)
    return units


def informative_summary(message: str, limit: int = 300) -> str:
    """The part of a (multi-line) message a person needs, at most ``limit`` characters.

    The headline (first line) is kept, then every later line that names a configuration key or says what to do
    (``use ...``, ``set ...``, ``try ...``, ``... instead``, ``training_args.foo``, ``--foo``, ``foo_bar``, in
    backticks, ``foo=``): a ValueError whose third line says "use `eval_strategy` instead" keeps that line. Lines
    over 200 characters are split into sentences first. Adjacent kept lines are joined by a space, kept lines with
    dropped lines between them by `` ... ``. Text past ``limit`` is cut, ending in ``...``. ``[rankN]:`` prefixes
    are removed.
    """
    units = _units(message, unit_limit=200)
    if not units:
        return ""
    picked = [0] + [i for i in range(1, len(units)) if _INFORMATIVE.search(units[i])]
    if len(picked) == 1:
        return clip(units[0], limit)
    head_budget = max(limit // 2, limit - sum(len(units[i]) + 5 for i in picked[1:]))
    out = clip(units[0], head_budget)
    prev = 0
    for i in picked[1:]:
        sep = " " if i == prev + 1 else " ... "
        room = limit - len(out) - len(sep)
        if room < 20:
            return clip(out + " ...", limit)  # more informative lines than room: say so
        out += sep + clip(units[i], room)
        prev = i
    return clip(out, limit)


def traceback_tail(traceback_text: str, n: int = TRACEBACK_TAIL_LINES) -> str:
    """The last ``n`` lines of a traceback (as written, prefixes kept: it is evidence)."""
    lines = (traceback_text or "").rstrip().splitlines()
    return "\n".join(lines[-n:])


def short_type(exc_type: str) -> str:
    """``torch.cuda.OutOfMemoryError`` -> ``OutOfMemoryError``."""
    return (exc_type or "").strip().rsplit(".", 1)[-1]


#: Where a module is named as missing or not importable; also how transformers wraps a lazy import failure.
MODULE_MISSING = re.compile(r"No module named '([^']+)'|cannot import name '([^']+)'")
WRAPPED_IMPORT = re.compile(r"Failed to import ([\w.]+)")
_DIRECT_CAUSE = "The above exception was the direct cause of the following exception"
_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:\[rank\d+\]:[ \t]?)?(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError): (.+)$", re.MULTILINE
)


def import_failure(message: str, traceback_text: str = "") -> str | None:
    """The import error behind a failure, when there is one: the text that names the module, else ``None``.

    Found in the message itself (``No module named 'wandb'``, ``cannot import name ...``, transformers'
    ``Failed to import transformers.integrations.integration_utils because of the following error ...``), or in a
    traceback whose ``ModuleNotFoundError``/``ImportError`` is the *direct cause* of the exception raised (``raise
    ... from e``). An import error merely handled on the way ("During handling of the above exception") is not
    taken as the cause.
    """
    text = strip_rank_prefixes(message)
    if MODULE_MISSING.search(text) or WRAPPED_IMPORT.search(text):
        return text
    tb = traceback_text or ""
    cut = tb.rfind(_DIRECT_CAUSE)
    if cut < 0:
        return None
    causes = _IMPORT_LINE.findall(tb[:cut])
    return causes[-1].strip() if causes else None
