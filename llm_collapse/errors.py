"""`UserError`: the one base class of every error a user can fix by changing the command or its inputs.

Command lines catch exactly this class (`llm_collapse.utils.commands.run_command`) and print its message as one
line with exit code 2; anything else is a bug and keeps its traceback. Subclasses also derive from the
builtin their callers historically caught (``ValueError``, ``KeyError``...), so library users are unaffected.
"""

from __future__ import annotations

import errno


class UserError(Exception):
    """Bad input: ``str(err)`` is one line saying what was wrong, what is allowed and how to fix it."""

    def __str__(self) -> str:
        text = str(self.args[0]) if self.args else self.__class__.__name__
        return " ".join(text.split("\n"))


class ConfigError(UserError, ValueError):
    """A configuration value that is not allowed (a run's or a task's option); the message is one line."""


class PreflightError(UserError, ValueError):
    """Something a run needs is missing or unusable (a package, a file, a corpus label); the message says what and
    how to fix it."""


class OutputError(UserError, OSError):
    """An output location that cannot be written (a file where a folder is needed, no permission...)."""


class MissingDependencyError(UserError, ImportError):
    """An optional package that the requested model, backend or output needs is not installed."""


class DiskFullError(UserError, OSError):
    """A folder the run writes (``--out``, the cache) is on a full file system; rerunning resumes the run."""


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})  # disk or quota full


def disk_full(err: OSError, folder: object, what: str) -> DiskFullError | None:
    """A `DiskFullError` naming ``folder`` when ``err`` says the disk (or quota) is full, else None."""
    if err.errno not in DISK_FULL_ERRNOS:
        return None
    full = DiskFullError(
        f"{what} {folder} is on a full file system ({err.strerror}); free space there (or choose another "
        "folder), then rerun the same command: it resumes from the embedding cache"
    )
    full.errno, full.strerror = (
        err.errno,
        err.strerror,
    )  # so a caller that knows the folder better can reword it
    return full
