"""What every command line shares: logging setup, one-line user errors (exit 2) and one-line Ctrl-C (exit 130).

Library code raises `llm_collapse.errors.UserError` (or a subclass) for bad input and never prints; the
command lines call `run_command`, which turns those into ``error: <message>`` on stderr. Other exceptions
are bugs and keep their traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from llm_collapse.errors import OutputError, UserError

BAD_INPUT = 2
INTERRUPTED = 130
NOISY_LOGGERS = ("transformers", "huggingface_hub", "urllib3", "httpx", "matplotlib", "PIL", "filelock")


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: <message> (see <prog> --help)`` and exit 2, no usage dump."""

    def error(self, message: str):
        say(f"error: {message} (see {self.prog} --help)", error=True)
        raise SystemExit(BAD_INPUT)


def setup_logging(level: int, *, timestamps: bool = False) -> None:
    """Logs to stderr at ``level``; third-party chatter only from WARNING up."""
    logging.basicConfig(
        level=level,
        format=("%(asctime)s " if timestamps else "") + "%(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_command(body: Callable[[], int | None]) -> int:
    """Runs a command's body: `UserError` -> one line, exit 2; Ctrl-C -> one line, exit 130."""
    try:
        return body() or 0
    except UserError as err:
        say(f"error: {err}", error=True)
        return BAD_INPUT
    except KeyboardInterrupt:
        say("interrupted; rerun the same command to resume", error=True)
        return INTERRUPTED


def say(line: str, *, error: bool = False) -> None:
    """The command lines' only way to print."""
    print(line, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


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
