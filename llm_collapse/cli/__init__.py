"""The command lines: ``llm-collapse COMMAND ...`` (console script) or ``python -m llm_collapse.COMMAND ...``.

Each command is a thin module here (the benchmark's is `llm_collapse.bench.cli`): it parses arguments, sets up
logging (`llm_collapse.utils.commands.setup_logging`) and runs its body under `run_command`, which turns a `llm_collapse.errors.UserError` into one line on stderr with
exit code 2 and Ctrl-C into one line with exit code 130. The work itself is library code (`llm_collapse.run`,
`llm_collapse.reporting`, `llm_collapse.bench`).

Decision: ``--help`` of every command, ``list`` and ``--version`` import neither torch nor transformers (about
0.2-0.8 s instead of 7-10 s): command modules import model code inside their bodies, and the packages they
read for help (`llm_collapse`, `llm_collapse.interventions`, `llm_collapse.bench`) load their heavy names on first
use. ``tests/cli/test_cli_imports.py`` checks ``sys.modules``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from llm_collapse.utils.commands import BAD_INPUT, run_command, say

COMMANDS: dict[str, str] = {
    "compare": "models x interventions x tasks x lengths -> results and a report",
    "report": "rebuild or merge the report of run folders",
    "study": "question-by-question report over several runs",
    "estimate": "expected GPU time and memory of a comparison, by counting",
    "bench": "throughput, FLOP/s and long-document time/memory benchmark",
    "list": "the models, methods, tasks or corpora a run accepts, one line each",
}

_MODULES = {
    "list": "llm_collapse.cli.catalog",  # a module named `list` would shadow the builtin in this namespace
    "bench": "llm_collapse.bench.cli",  # the benchmark's command lives with it, so bench/ imports nothing of cli/
}

PROG = "llm-collapse"


def main(argv: Sequence[str] | None = None) -> int:
    """``llm-collapse COMMAND [ARGS...]``; ``llm-collapse COMMAND --help`` for a command's options.

    Each command gets ``prog="llm-collapse COMMAND"``, so its usage, errors and recorded command name the
    program as it was invoked (``python -m llm_collapse.COMMAND`` when run that way). No command at all is bad
    input like any other: one line on stderr, exit 2; ``--help`` lists the commands on stdout.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help", "-V", "--version"):
        return run_command(lambda: _about(argv[0]))  # `--version | true`: no traceback when the reader leaves
    if not argv:
        say(
            f"error: no command given; usage: {PROG} COMMAND [ARGS...] with COMMAND one of {', '.join(COMMANDS)} "
            f"(see {PROG} --help)",
            error=True,
        )
        return BAD_INPUT
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        say(
            f"error: unknown command {command!r}; available: {', '.join(COMMANDS)} (see {PROG} --help)",
            error=True,
        )
        return BAD_INPUT
    return importlib.import_module(command_module(command)).main(rest, prog=f"{PROG} {command}")


def command_module(command: str) -> str:
    """The module of ``llm-collapse COMMAND``, whose ``main(argv, prog=...)`` runs it."""
    return _MODULES.get(command, f"llm_collapse.cli.{command}")


def _about(flag: str) -> int:
    """``--help``: the commands; ``--version``: the installed distribution's version."""
    if flag in ("-h", "--help"):
        say(f"usage: {PROG} COMMAND [ARGS...]\n\ncommands:")
        for name, what in COMMANDS.items():
            say(f"  {name:<9} {what}")
        return 0
    from importlib.metadata import version

    say(f"{PROG} {version('llm-collapse')}")
    return 0
