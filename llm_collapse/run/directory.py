"""A comparison's output folder: its claim (``.llm_collapse_run.lock``) and its marker (``.llm_collapse_run.json``).

The claim: a run holds an exclusive ``flock`` on the lock file from before it builds its inputs until it ends
(`claim_run_dir`), so two runs started on one ``--out`` a second apart cannot both write it: the second is
refused in one line naming the first's process. The kernel drops the lock when its process dies (even by
SIGKILL), so a stale lock file never blocks anything; it is removed on a clean exit. ``flock`` does not
reach across hosts on every network file system; the marker's host field covers that case below.

The marker says which run the folder holds (``run_id``, the resolved config) and in which state:

- ``running``: written once every input check has passed and the inputs are built (with pid and host);
- ``complete``: results, run.json and the report are in place;
- ``failed`` / ``interrupted``: the run died; the folder never blocks the corrected command.

Rules (`check_run_dir`, which writes nothing, so ``--dry-run`` gives the real run's answer):

- the same run (same ``run_id``) may always continue: that is how a killed run resumes;
- a different, complete run (or a marker written before states existed) needs ``--overwrite``;
- a different run that failed, was interrupted, or whose process is gone (SIGKILL) is replaced silently;
- a different run whose process is alive on this host is never clobbered, even with ``--overwrite``
  (one still running on another host sharing the folder needs ``--overwrite``: its process cannot be checked);
- a non-empty folder without a marker needs ``--overwrite`` (the lock file alone does not count).

`claim_run_dir` removes the folder again when it created it and the run left nothing in it, and `open_run_dir` removes the folder again when a run that found it absent or empty dies before writing
anything but the marker, so a failed first attempt leaves ``--out`` as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from llm_collapse.errors import UserError
from llm_collapse.utils.files import write_json
from llm_collapse.utils.paths import check_writable_dir
from llm_collapse.utils.procs import host_tag, pid_state

logger = logging.getLogger(__name__)

MARKER = ".llm_collapse_run.json"
LOCK = ".llm_collapse_run.lock"
RUNNING, COMPLETE, FAILED, INTERRUPTED = "running", "complete", "failed", "interrupted"


class RunDirectoryError(UserError, ValueError):
    """The output folder holds a different run (or cannot be used)."""


def read_marker(out: Path) -> dict | None:
    """The marker's content; None without a marker; ``{"state": "failed"}`` for an unreadable one."""
    path = Path(out) / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a mapping")
    except (OSError, ValueError) as err:
        logger.warning("%s is unreadable (%s); treating it as a failed run", path, err)
        return {"state": FAILED}
    return data


def check_run_dir(out: str | Path, run_id: str, *, overwrite: bool) -> Path:
    """Raises `RunDirectoryError`/`OutputError` when ``out`` cannot take run ``run_id``; writes nothing."""
    out = check_writable_dir(out, what="--out")
    holder = _lock_holder(out)
    if holder is not None:
        raise _busy(out, holder)
    return _check_marker(out, run_id, overwrite=overwrite)


def _check_marker(out: Path, run_id: str, *, overwrite: bool) -> Path:
    """`check_run_dir`'s rules on the marker alone (the caller knows who holds the lock)."""
    marker = read_marker(out)
    if marker is None:
        if out.is_dir() and _contents(out) and not overwrite:
            raise RunDirectoryError(
                f"{out} is not empty and holds no llm_collapse run; pass --overwrite or choose another --out"
            )
        return out
    previous, state = marker.get("run_id"), marker.get("state", COMPLETE)
    if previous == run_id:
        return out
    alive = state == RUNNING and _alive(marker)
    if alive is True:
        raise RunDirectoryError(
            f"{out} is being written by another run ({previous}, process {marker.get('pid')}); "
            "wait for it to finish or choose another --out"
        )
    if (state == COMPLETE or alive is None) and not overwrite:
        raise RunDirectoryError(
            f"{out} holds a different run ({previous}); choose another --out, remove the folder to run from the "
            "embedding cache, or pass --overwrite to replace it and recompute every embedding"
        )
    if state != COMPLETE:
        logger.info("%s: replacing run %s, which did not finish (%s)", out, previous, state)
    return out


@contextlib.contextmanager
def claim_run_dir(out: str | Path, run_id: str, *, overwrite: bool) -> Iterator[Path]:
    """Holds ``out`` for run ``run_id`` while the block runs: an exclusive lock, taken before any work.

    Raises `RunDirectoryError` naming the holder's process when another live run holds it, and re-checks
    `check_run_dir` under the lock (the folder may have changed since preflight). Creates ``out`` if needed
    and removes it again when the block leaves nothing in it.
    """
    out = Path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    handle = None
    try:
        handle = _take_lock(out / LOCK)
        if handle is None:
            raise _busy(out, _read_holder(out / LOCK))
        with contextlib.suppress(OSError):  # who holds it, for the refusal; the lock works without it
            os.ftruncate(handle, 0)
            os.write(handle, json.dumps({"run_id": run_id, "pid": os.getpid(), "host": host_tag()}).encode())
        _check_marker(out, run_id, overwrite=overwrite)  # under the lock: the folder may have changed since
        yield out
    finally:
        if handle is not None:
            with contextlib.suppress(OSError):
                (out / LOCK).unlink()
            os.close(handle)  # after the unlink: a waiting run then finds the path gone and retries
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty


def _take_lock(path: Path) -> int | None:
    """An fd holding ``flock(LOCK_EX)`` on ``path`` (created if absent), or None when a live process holds it.

    The path is re-checked after locking: a holder that unlinked it on exit leaves our lock on a dead inode.
    """
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(handle).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return handle
        os.close(handle)


def _lock_holder(out: Path) -> dict | None:
    """What the live holder of ``out``'s lock wrote (pid, run_id), or None when nobody holds it; writes nothing."""
    try:
        handle = os.open(out / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(out / LOCK)
    finally:
        os.close(handle)  # also releases the probe's shared lock
    return None


def _read_holder(path: Path) -> dict:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _busy(out: Path, holder: dict) -> RunDirectoryError:
    return RunDirectoryError(
        f"{out} is being written by another run ({holder.get('run_id', '?')}, process {holder.get('pid', '?')}); "
        "wait for it to finish or choose another --out"
    )


def _contents(out: Path) -> list[str]:
    """The folder's entries, without the lock file (which a SIGKILLed run leaves behind)."""
    return [p.name for p in out.iterdir() if p.name != LOCK]


@contextlib.contextmanager
def open_run_dir(out: str | Path, run_id: str, config: dict) -> Iterator[Path]:
    """Marks ``out`` as holding run ``run_id`` while the block runs; ``complete`` or failed afterwards."""
    out = Path(out)
    fresh = not out.exists() or not _contents(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run_id, "config": config, "pid": os.getpid(), "host": host_tag()}
    write_json({**record, "state": RUNNING}, out / MARKER)
    try:
        yield out
    except BaseException as err:
        if fresh and set(_contents(out)) <= {MARKER}:
            (out / MARKER).unlink(missing_ok=True)
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()
        else:
            state = INTERRUPTED if isinstance(err, KeyboardInterrupt) else FAILED
            with contextlib.suppress(OSError):
                write_json({**record, "state": state, "error": type(err).__name__}, out / MARKER)
        raise
    write_json({**record, "state": COMPLETE}, out / MARKER)


def _alive(marker: dict) -> bool | None:
    """Whether the marker's process still runs; None when it ran on another host (cannot be checked)."""
    pid = marker.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    if marker.get("host") != host_tag():
        return None
    return pid_state(pid) != "dead"
