"""Where llm_collapse keeps generated files (converted weights, embedding caches), and whether an output
location can be written before any work starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from llm_collapse.errors import OutputError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the ``llm_collapse`` package: a checkout's root (experiments/, ``../shared``) in a
clone or an editable install. Defaults that point into the checkout are anchored here, never at the working
directory, and every such default can be overridden."""


def display_path(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies below it (as a user would type it), else whole."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return resolved.as_posix()


def cache_root() -> Path:
    """``$LLM_COLLAPSE_CACHE`` if set, else ``$XDG_CACHE_HOME/llm_collapse`` or ``~/.cache/llm_collapse``."""
    if env := os.environ.get("LLM_COLLAPSE_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "llm_collapse"


def check_writable_dir(path: str | Path, *, what: str) -> Path:
    """Raises `OutputError` unless ``path`` is (or can be created as) a folder this process may write in.

    Leaves nothing behind: a missing folder is judged by its nearest existing parent, and writability by
    creating and removing a temporary file (``os.access`` would say yes to root on a read-only folder).
    """
    path = Path(path).expanduser()
    try:
        if path.exists() and not path.is_dir():
            raise OutputError(f"{what} {path} is a file, not a folder; choose a folder path")
        probe = path
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
    except PermissionError as err:
        raise OutputError(
            f"{what} {path} is not reachable ({err.strerror}); choose another location"
        ) from None
    if not probe.is_dir():
        raise OutputError(f"{what} {path} cannot be created: {probe} is a file; choose another path")
    try:
        handle, name = tempfile.mkstemp(prefix=".llm_collapse-probe-", dir=probe)
        os.close(handle)
        os.unlink(name)
    except OSError as err:
        raise OutputError(
            f"{what} {path} is not writable ({probe}: {err.strerror}); choose a writable location"
        ) from None
    return path


def check_writable_file(path: str | Path, *, what: str) -> Path:
    """Raises `OutputError` unless a file can be written at ``path`` (a writable folder, not a folder itself)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder; give a file path")
    if path.exists() and not _can_open_for_append(path):
        raise OutputError(f"{what} {path} is not writable; choose a writable location")
    check_writable_dir(path.parent, what=f"{what} {path}: its folder")
    return path


def _can_open_for_append(path: Path) -> bool:
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False


RUN_FILES = ("run.json", "results.parquet", "results.csv", "items.parquet", "embeddings.npz", "report.md",
             "report.html", "answers.csv")  # fmt: skip
"""The files a run, its report or a recompute replaces in a run folder (``figures/`` is the one folder)."""
_FS_IOC_GETFLAGS = 0x80086601  # linux/fs.h, the flags lsattr shows
_LOCKED_FLAGS = 0x10 | 0x20  # FS_IMMUTABLE_FL, FS_APPEND_FL: no rename or unlink, even as root


def check_replaceable(folder: str | Path, *, what: str, names: tuple[str, ...] = RUN_FILES) -> None:
    """Raises `OutputError` when a file a run or report replaces in ``folder`` cannot be replaced, before any work:
    one of `RUN_FILES` that is a folder, ``figures`` that is a file, either marked immutable or append-only
    (``chattr +i``/``+a``), or a ``figures`` folder this process may not move (it is moved aside, which needs
    write permission on it). ``names``: the files the command replaces (a report: `llm_collapse.records.results.REPORT_FILES`)."""
    folder = Path(folder)
    for name in (*names, "figures"):
        path = folder / name
        if not path.exists() or path.is_symlink():
            continue
        expects_folder = name == "figures"
        if path.is_dir() != expects_folder:
            kind = "a file" if expects_folder else "a folder"
            raise OutputError(f"{what}: {path} is {kind}, which the run cannot replace; remove it and rerun")
        if _locked(path) or (expects_folder and not os.access(path, os.W_OK | os.X_OK)):
            raise OutputError(
                f"{what}: {path} cannot be replaced (it is read-only, immutable or append-only); "
                f"make it writable (chmod u+w, chattr -i -a) or remove it, then rerun"
            )


def _locked(path: Path) -> bool:
    """Whether the file system marks ``path`` immutable or append-only (False where it cannot say)."""
    import fcntl
    import struct

    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        flags = struct.unpack("l", fcntl.ioctl(handle, _FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
    except OSError:
        return False
    finally:
        os.close(handle)
    return bool(flags & _LOCKED_FLAGS)
