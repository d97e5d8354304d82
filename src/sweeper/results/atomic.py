"""The one atomic writer: a reader sees the old file or the complete new one, never a partial file."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sweeper.redact import scrub


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


#: ``errno`` values that mean "the filesystem is full" (no space, or the user's quota is spent).
DISK_FULL_ERRNOS: frozenset[int] = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Threads of :func:`write_json_atomic_many` (they wait on fsync, not on a CPU).
WRITERS = 16


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` saying the filesystem is full (:data:`DISK_FULL_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def write_error_text(exc: OSError) -> str:
    """A one-line description of a failed write that names the folder: ``no space left on device in /a/b``
    (the file's folder, from ``exc.filename``; :func:`write_atomic` sets it to the target path)."""
    what = (exc.strerror or str(exc) or type(exc).__name__).strip()
    what = what[:1].lower() + what[1:]
    where = Path(str(exc.filename)).parent if exc.filename else None
    return f"{what} in {where}" if where is not None else what


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary path in ``path``'s folder (what it returns is ignored), fsync it, then
    rename it onto ``path``.

    Raises:
        whatever ``write`` or the filesystem raises (``OSError`` for a full disk, its ``filename`` set to ``path``
        when it named no file or the temporary one); the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a result is as readable as any file the user writes
        write(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass  # already gone, or the folder is unreadable: the original error is the one to report
        if isinstance(e, OSError) and (e.filename is None or str(e.filename) == tmp):
            e.filename = str(path)  # "No space left on device" alone does not say where
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON to ``path`` atomically (see :func:`write_atomic`). A secret
    value still known from the environment is replaced (:func:`sweeper.redact.scrub`: the last guard, should a
    library's message echo one)."""
    text = scrub(json.dumps(data, indent=2, sort_keys=True, default=str)) + "\n"
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic_many(items: Sequence[tuple[Path, Any]]) -> None:
    """:func:`write_json_atomic` for each ``(path, data)``, concurrently (a few threads: the filesystem commits many
    fsyncs together, ~10x faster than one after the other for 1,000 small files on ext4); each file is as atomic.

    Raises:
        the first error in ``items``' order (as :func:`write_json_atomic` raises it), after every write has ended.
    """
    if len(items) <= 1:
        for path, data in items:
            write_json_atomic(path, data)
        return
    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        futures = [pool.submit(write_json_atomic, path, data) for path, data in items]
    for f in futures:
        f.result()


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`write_atomic`), secrets scrubbed as in
    :func:`write_json_atomic`."""
    text = scrub(text)
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def unusable_folder(path: Path) -> str | None:
    """Why ``path`` cannot be an output folder (a sweep's or a run's), or None when it can: it is created (with its
    parents) and an empty file is made and removed in it; the folders the probe created are removed again, so a
    command refused after the probe leaves no empty folder that looks like a sweep. A full disk is not "unusable"
    (None): that is reported per file as the sweep writes (:func:`is_disk_full`), so that nothing already recorded
    is lost.

    Returns:
        A one-line reason naming what is in the way (``/etc/hostname is a file, not a folder``), or None.
    """
    path = Path(path)
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    made = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".sweeper-probe.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if is_disk_full(e):
            return None
        what = (e.strerror or type(e).__name__).strip()
        return f"{what[:1].lower() + what[1:]}: {e.filename or path}"
    finally:
        for folder in made:
            try:
                folder.rmdir()  # only an empty folder: one something else wrote into meanwhile stays
            except OSError:
                break
    return None
