"""The one atomic writer: a reader sees the old file or the complete new one, never a partial file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary path in ``path``'s folder, fsync it, then rename it onto ``path``.

    Raises:
        whatever ``write`` or the filesystem raises (``OSError`` for a full disk); the temporary file is removed
        and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a result is as readable as any file the user writes
        write(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON to ``path`` atomically (see :func:`write_atomic`)."""

    def dump(tmp: Path) -> None:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True, default=str)
            f.write("\n")

    write_atomic(path, dump)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
