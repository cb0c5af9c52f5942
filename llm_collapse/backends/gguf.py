"""GGUF checkpoints: dequantize once with transformers, keep a safetensors copy in the cache.

transformers dequantizes GGUF to full precision on every load (about 30 s for Gemma 3 270M, plus 15 s for
the tokenizer), and ``save_pretrained`` refuses a GGUF-loaded model. So the first load copies the
dequantized state dict into a fresh model of the same class and saves it (with the tokenizer) under
``<cache>/converted/<sha256 of the file>[:32]/``; later loads read that folder in about a second.

Decisions (several processes share one cache, e.g. every rank of ``torchrun`` on a fresh cache):

- A folder counts as converted when it has ``config.json``. A target without one (half-written by an old
  version) is removed and converted again.
- Conversion writes into ``converted/.tmp-<sha[:32]>-<host>-<pid>-<random>/``, then renames it onto the
  target, so an interrupted conversion never leaves a half-written target.
- Conversions of one file are serialized by an exclusive lock on ``converted/<sha[:32]>.lock``
  (``fcntl.flock``; ``msvcrt.locking`` on Windows; no lock where neither exists). A second process logs
  that it waits, then finds the finished folder and converts nothing.
- The holder removes the lock file in a ``finally`` (success or failure) while it still holds the lock, so no
  ``.lock`` is left in the cache. A process that was waiting then holds the lock of a removed file: after
  locking, it checks that the path still names the file it locked (same inode) and otherwise locks the new
  one, so removal never lets two processes convert at once. (On Windows an open file cannot be removed; the
  lock file stays there, harmlessly.)
- A file that does not start with the GGUF magic bytes (``GGUF``) is refused (`NotGGUFError`) before anything
  is written to the cache.
- Safety net for when locking is unavailable (or ignored, e.g. by an old version): if the final rename
  fails because the target now exists with ``config.json``, the loser removes its temp folder and returns
  the winner's folder.
- Under the lock, stale temp folders (a killed conversion leaves about 1 GB) are removed: any temp folder of
  the same file (the lock proves nobody converts it now); on this host, one whose PID is not alive; one from
  another host, or with a name that does not parse (older versions used ``.tmp-<random>``), when nothing in
  it changed for `STALE_AFTER_S`. A temp folder of a live process on this host is never removed (a PID
  reused by an unrelated process keeps a stale folder until that process exits, or until the same file is
  converted again). Hostnames are compared as written into the name, so two containers that share a cache
  folder and a hostname but not a PID namespace should not convert at the same time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from llm_collapse.errors import UserError
from llm_collapse.utils.paths import cache_root
from llm_collapse.utils.procs import host_tag, pid_state, remove_path

logger = logging.getLogger(__name__)

TEMP_PREFIX = ".tmp-"
LOCK_SUFFIX = ".lock"
STALE_AFTER_S = 3600.0
SHA_DIGITS = 32
GGUF_MAGIC = b"GGUF"


class NotGGUFError(UserError, ValueError):
    """A ``.gguf`` path whose content is not GGUF (wrong magic bytes)."""


def is_gguf(path: str | Path) -> bool:
    """Whether ``path`` is a readable file starting with the GGUF magic bytes (the name alone proves nothing)."""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(len(GGUF_MAGIC)) == GGUF_MAGIC
    except OSError:
        return False


def check_gguf(path: str | Path, *, what: str) -> None:
    """Raises `NotGGUFError` (one line; ``what`` names the path as the user gave it) unless ``path`` is GGUF."""
    if not is_gguf(path):
        raise NotGGUFError(
            f"{what} is not a GGUF file (GGUF files start with the bytes b'GGUF'); "
            "give a real .gguf file or a model folder with config.json"
        )


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """The file's SHA-256, read once per process for each (file, size, modification time): a run resolves a
    model's weights several times (its checks, plan, progress line and load), and a GGUF given as a path is
    hundreds of MB."""
    stat = Path(path).stat()
    return _sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, chunk)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int, chunk: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def converted_gguf_dir(gguf_path: str | Path, *, sha256: str | None = None) -> Path:
    """Returns a safetensors folder for ``gguf_path``, converting it on first use (safe across processes)."""
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    check_gguf(gguf_path, what=str(gguf_path))
    sha256 = sha256 or file_sha256(gguf_path)
    target = _target(sha256)
    if is_converted(target):
        return target
    digest, parent = target.name, target.parent
    parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(parent / f"{digest}{LOCK_SUFFIX}", what=gguf_path.name) as locked:
        if is_converted(target):  # another process finished it while this one waited
            logger.info("Using %s, converted by another process", target)
            return target
        remove_stale_temp_dirs(parent, digest=digest if locked else None)
        if target.exists() or target.is_symlink():
            logger.warning("Removing %s: it has no config.json (an unfinished conversion)", target)
            remove_path(target)
        logger.info(
            "Converting %s to safetensors in %s (once per cache; its time is logged when it is done)",
            gguf_path.name,
            target,
        )
        clock = time.perf_counter()
        tmp = parent / f"{TEMP_PREFIX}{digest}-{host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            _convert_into(tmp, gguf_path, sha256)
            published = _publish(tmp, target)
        except BaseException:
            remove_path(tmp)
            raise
        logger.info(
            "Converted %s in %.0f s; later loads read %s in about a second",
            gguf_path.name,
            time.perf_counter() - clock,
            published,
        )
        return published


def find_converted(gguf_path: str | Path, *, sha256: str | None = None) -> Path | None:
    """The finished safetensors copy of ``gguf_path`` if one exists already; never converts."""
    target = _target(sha256 or file_sha256(Path(gguf_path)))
    return target if is_converted(target) else None


def is_converted(directory: Path) -> bool:
    """True when ``directory`` is a finished conversion (it has ``config.json``)."""
    return (directory / "config.json").is_file()


def remove_stale_temp_dirs(parent: Path, *, digest: str | None = None) -> list[Path]:
    """Removes the temp folders in ``parent`` whose conversion is over (see the module docstring).

    ``digest``: the file whose lock the caller holds; its temp folders are stale whoever wrote them.
    Returns the folders removed.
    """
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for path in entries:
        if not path.name.startswith(TEMP_PREFIX) or path.is_symlink() or not path.is_dir():
            continue
        reason = _stale_reason(path, digest)
        if reason is None:
            continue
        logger.warning("Removing stale conversion folder %s (%s)", path, reason)
        remove_path(path)
        removed.append(path)
    return removed


# ------------------------------------------------------------------------------------------ helpers


def _target(sha256: str) -> Path:
    return cache_root() / "converted" / sha256[:SHA_DIGITS]


def _convert_into(tmp: Path, gguf_path: Path, sha256: str) -> None:
    """Dequantizes ``gguf_path`` and saves model, tokenizer and a ``SOURCE`` note into the folder ``tmp``."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    with _quiet_tensor_bar():
        loaded = AutoModel.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    config = loaded.config
    # The copy must not look GGUF-quantized, or from_pretrained would route it back through the GGUF loader.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "SOURCE").write_text(f"{gguf_path.name}\nsha256 {sha256}\n")


@contextlib.contextmanager
def _quiet_tensor_bar() -> Iterator[None]:
    """transformers draws its GGUF tensor bar with plain ``tqdm.auto`` (not its switchable one): drawn only where
    a per-batch bar would be (a terminal, no run display open), so redirected logs get no carriage returns."""
    from functools import partial

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from llm_collapse.utils.progress import batch_bars

    bar = gguf_utils.tqdm
    gguf_utils.tqdm = partial(bar, disable=not batch_bars())
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def _publish(tmp: Path, target: Path) -> Path:
    """Renames ``tmp`` onto ``target``; if another process got there first, keeps its folder instead."""
    for attempt in range(2):
        try:
            os.replace(tmp, target)
            return target
        except OSError as err:
            if is_converted(target):
                logger.info("%s was converted by another process meanwhile; using it (%s)", target, err)
                remove_path(tmp)
                return target
            if attempt or not (target.exists() or target.is_symlink()):
                raise
            logger.warning("Removing %s: it has no config.json (an unfinished conversion)", target)
            remove_path(target)
    raise AssertionError("unreachable")


def _stale_reason(path: Path, digest: str | None) -> str | None:
    """Why the temp folder ``path`` is stale, or None when its writer may still be running."""
    parsed = re.fullmatch(
        rf"{re.escape(TEMP_PREFIX)}(?P<digest>[0-9A-Fa-f]+)-(?P<host>[^-]+)-(?P<pid>\d+)-[0-9a-f]+", path.name
    )
    if parsed is not None and digest is not None and parsed["digest"] == digest:
        return "this process holds its file's conversion lock"
    if parsed is not None and parsed["host"] == host_tag():
        pid = int(parsed["pid"])
        state = "alive" if pid == os.getpid() else pid_state(pid)
        if state == "dead":
            return f"process {pid} is gone"
        if state == "alive":
            return None
    idle = time.time() - _last_change(path)
    if idle > STALE_AFTER_S:
        return f"unchanged for {idle / 3600:.1f} h"
    return None


def _last_change(path: Path) -> float:
    """Newest mtime of ``path`` and the entries directly in it (a live writer keeps touching them)."""
    newest = 0.0
    with contextlib.suppress(OSError):
        newest = path.stat().st_mtime
        for entry in os.scandir(path):
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return newest


@contextlib.contextmanager
def _exclusive_lock(path: Path, *, what: str) -> Iterator[bool]:
    """Holds an exclusive lock on the file ``path`` (created if needed); yields whether it is really locked.

    Tries without blocking first, so that a process that has to wait says so (INFO) before it waits. Where
    locking fails (no fcntl or msvcrt, or a file system without locks) it yields False and does not wait. The
    lock file is removed on exit, whatever happened inside, before the lock is released (module docstring).
    """
    handle, unlock = _acquire(path, what)
    try:
        yield unlock is not None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # still locked: a waiter that gets this file's lock sees it gone and retries
        if unlock is not None:
            with contextlib.suppress(OSError):
                unlock()
        handle.close()


def _acquire(path: Path, what: str) -> tuple[BinaryIO, Callable[[], None] | None]:
    """Opens and locks ``path``, again if the file locked was removed meanwhile by the previous holder."""
    while True:
        handle = open(path, "a+b")  # closed by the caller, or below
        try:
            unlock = _lock(handle, path, what)
            if unlock is None or _still_at(handle, path):
                return handle, unlock
            with contextlib.suppress(OSError):
                unlock()
        except BaseException:
            handle.close()
            raise
        handle.close()


def _still_at(handle: BinaryIO, path: Path) -> bool:
    """Whether ``path`` still names the open file ``handle`` (not removed or replaced since it was opened)."""
    try:
        mine, there = os.fstat(handle.fileno()), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _lock(handle: BinaryIO, path: Path, what: str) -> Callable[[], None] | None:
    """Locks ``handle`` exclusively, waiting if needed; returns the unlock function, or None if impossible."""
    try:
        import fcntl
    except ImportError:
        fcntl = None  # type: ignore[assignment]
    fd = handle.fileno()
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.info("Waiting for another process converting %s (lock %s)", what, path)
                fcntl.flock(fd, fcntl.LOCK_EX)
            return lambda: fcntl.flock(fd, fcntl.LOCK_UN)
        import msvcrt  # Windows

        handle.seek(0)
        waited = False
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                break
            except OSError:
                if not waited:
                    logger.info("Waiting for another process converting %s (lock %s)", what, path)
                    waited = True
                time.sleep(0.5)

        def unlock() -> None:
            handle.seek(0)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

        return unlock
    except (ImportError, OSError) as err:
        logger.warning("Cannot lock %s (%s); relying on the rename check instead", path, err)
        return None
