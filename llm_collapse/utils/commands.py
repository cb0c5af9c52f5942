"""What every command line shares: logging setup, one-line user errors (exit 2) and one-line Ctrl-C (exit 130).

Library code raises `llm_collapse.errors.UserError` (or a subclass) for bad input and never prints; the
command lines call `run_command`, which turns those into ``error: <message>`` on stderr. Other exceptions
are bugs and keep their traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import TextIO

from llm_collapse.errors import UserError

BAD_INPUT = 2
INTERRUPTED = 130
NOISY_LOGGERS = ("transformers", "huggingface_hub", "urllib3", "httpx", "matplotlib", "PIL", "filelock")


class HelpFormatter(argparse.HelpFormatter):
    """Wraps help at spaces only, so a flag or name (--max-per-bin, llm-collapse, longembed-qmsum) stays whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(re.sub(r"\s+", " ", text).strip(), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Each blank-line separated block filled, except one whose lines are indented (an example command),
        kept line for line."""
        blocks = []
        for block in text.split("\n\n"):
            if block.startswith(" "):
                blocks.append("\n".join(indent + line for line in block.splitlines()))
                continue
            filled = textwrap.fill(re.sub(r"\s+", " ", block).strip(), width, initial_indent=indent,
                                   subsequent_indent=indent, break_on_hyphens=False)  # fmt: skip
            blocks.append(filled)
        return "\n\n".join(blocks)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: <message> (see <prog> --help)`` and exit 2, no usage dump; help
    wrapped by `HelpFormatter`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        say(f"error: {message} (see {self.prog} --help)", error=True)
        raise SystemExit(BAD_INPUT)

    def _print_message(self, message: str, file=None) -> None:
        """``--help | head -1``: the reader left; argparse's help and version lines end without a traceback."""
        try:
            super()._print_message(message, file)
        except BrokenPipeError:
            reader_left()


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
    except BrokenPipeError:  # `llm-collapse list methods | head`: the reader left; no traceback
        reader_left()
        return 1


def reader_left() -> None:
    """stdout's reader is gone (``| head``): point stdout at /dev/null so the exit-time flush is silent."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(line: str, *, error: bool = False) -> None:
    """The command lines' only way to print."""
    print(line, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


@contextlib.contextmanager
def status_line(stream: TextIO | None = None) -> Iterator[Callable[[str], None]]:
    """A callback showing what a command is doing as one line redrawn in place on a terminal, and cleared when
    the block ends, so a refusal that follows is still the only line left; nothing where ``stream`` (default
    stderr) is not a terminal (a log, a pipe, a test)."""
    from llm_collapse.utils.progress import is_terminal

    stream = stream or sys.stderr
    if not is_terminal(stream):
        yield lambda text: None
        return

    def show(text: str) -> None:
        stream.write(f"\r\x1b[K{text}")
        stream.flush()

    try:
        yield show
    finally:
        stream.write("\r\x1b[K")
        stream.flush()
