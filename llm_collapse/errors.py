"""`UserError`: the one base class of every error a user can fix by changing the command or its inputs.

Command lines catch exactly this class (`llm_collapse.cli.common.run_command`) and print its message as one
line with exit code 2; anything else is a bug and keeps its traceback. Subclasses also derive from the
builtin their callers historically caught (``ValueError``, ``KeyError``...), so library users are unaffected.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input: ``str(err)`` is one line saying what was wrong, what is allowed and how to fix it."""

    def __str__(self) -> str:
        text = str(self.args[0]) if self.args else self.__class__.__name__
        return " ".join(text.split("\n"))


class OutputError(UserError, OSError):
    """An output location that cannot be written (a file where a folder is needed, no permission...)."""


class MissingDependencyError(UserError, ImportError):
    """An optional package that the requested model, backend or output needs is not installed."""
