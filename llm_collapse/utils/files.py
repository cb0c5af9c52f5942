"""Writing a file so that readers see the whole new file or the old one, never a half-written one.

`atomic_write` is the package's one way to do it (results, run.json, reports, the run marker, the embedding
cache's key file and shards): a temporary file in the target's folder, ``os.replace`` onto the target, and
on any failure the temporary file removed. ``durable=True`` also fsyncs the file and the folder (the cache's
shards, which other processes read while this one writes). A full disk is a one-line
`llm_collapse.errors.DiskFullError` naming the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from llm_collapse.errors import disk_full


def atomic_write(
    path: Path, write: Callable[[str], object], *, tmp: Path | None = None, durable: bool = False
) -> None:
    """Calls ``write(tmp)`` on a temporary file beside ``path`` and renames it onto ``path``.

    Args:
        path: The file to (re)place.
        write: Writes the content to the path it is given.
        tmp: The temporary file's path (the cache names its own, so stale ones can be traced to their
            writer); default: a fresh ``.<name>.*`` file beside ``path``.
        durable: fsync the file before the rename and the folder after it.

    The file gets the mode a plain ``open()`` would give it (the umask's), not mkstemp's 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tmp is None:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(handle)
        tmp = Path(name)
    try:
        write(str(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        if durable:
            _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        _discard(tmp)
        if isinstance(err, OSError) and (full := disk_full(err, path.parent, "the folder")) is not None:
            raise full from None
        raise
    if durable:
        _fsync_folder(path.parent)


def write_text(text: str, path: Path) -> None:
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(data: dict, path: Path) -> None:
    atomic_write(
        path, lambda tmp: Path(tmp).write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    )


def _fsync_file(path: Path) -> None:
    """The file's bytes on disk before the rename; a failure here fails the write."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Makes the rename durable on POSIX; a no-op where folders cannot be opened or synced (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _discard(tmp: Path) -> None:
    """Removes a temporary file after a failed write (a process that dies first leaves it to the cache's
    stale-temp cleanup)."""
    with contextlib.suppress(OSError):
        tmp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
