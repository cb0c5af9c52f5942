"""Log records held back while a command checks its inputs, so that a refusal is one line.

Checking inputs logs warnings of its own (a length bin left empty, a partly filled bin) that are noise when
the same inputs are then refused: the user should see the one ``error:`` line. `held_logs` collects the
package's records for the duration of a block and, when the block raises a `UserError`, drops them; when it
succeeds (or fails with a bug, whose records may explain it) they are passed on in order, as if never held.

`tallied_warnings` is for a long run, whose measurements warn per bin, metric and method (a metric that is NaN
for too few texts, hubness without skew): a warning is passed on the first time; the same warning again (the
same logger, words and values) is counted, not printed, and the end of the block logs each repeated one once
with its count and where it came from (``where``, which the run sets to the cell it is in).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from llm_collapse.errors import UserError

PACKAGE_LOGGER = "llm_collapse"


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def held_logs(name: str = PACKAGE_LOGGER) -> Iterator[None]:
    """Holds the records of logger ``name`` (and its children) until the block ends; see the module docstring."""
    logger = logging.getLogger(name)
    collector, propagate = _Collector(), logger.propagate
    logger.addHandler(collector)
    logger.propagate = False
    refused = False
    try:
        yield
    except UserError:
        refused = True
        raise
    finally:
        logger.removeHandler(collector)
        logger.propagate = propagate
        if not refused:
            for record in collector.records:
                _pass_on(logger, record)


def _pass_on(logger: logging.Logger, record: logging.LogRecord) -> None:
    """What `Logger.handle` would have done with ``record`` at ``logger`` had nothing held it: its handlers,
    then its ancestors' while propagation allows."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        current = current.parent if current.propagate else None


@dataclass
class WarningTally:
    """The warnings `tallied_warnings` has seen: ``(logger, message) -> [count, places]``; ``where`` is the
    place a warning logged now is counted at (the run sets it; empty: no place is named)."""

    where: str = ""
    seen: dict[tuple[str, str], list] = field(default_factory=dict)

    def count(self, record: logging.LogRecord) -> bool:
        """Counts ``record``; True the first time its logger and message are seen."""
        key = (record.name, record.getMessage())
        entry = self.seen.setdefault(key, [0, []])
        entry[0] += 1
        if self.where and self.where not in entry[1]:
            entry[1].append(self.where)
        return entry[0] == 1

    def repeated(self) -> list[tuple[str, str]]:
        """``(logger, line)`` per warning seen more than once: its words, its count and its places."""
        lines = []
        for (name, message), (count, places) in self.seen.items():
            if count > 1:
                at = f"; in {', '.join(places)}" if places else ""
                lines.append((name, f"{message} ({count} times in all, shown once{at})"))
        return lines


class _Tally(logging.Handler):
    """Stands in for the package logger's propagation (switched off meanwhile): passes each record on as
    that would have, but for the repeats of a warning."""

    def __init__(self, logger: logging.Logger, tally: WarningTally, propagate: bool) -> None:
        super().__init__(level=logging.NOTSET)
        self.logger, self.tally, self.propagate = logger, tally, propagate

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.WARNING and not self.tally.count(record):
            return
        for handler in self.logger.handlers:
            if handler is not self and record.levelno >= handler.level:
                handler.handle(record)
        if self.propagate and self.logger.parent is not None:
            _pass_on(self.logger.parent, record)


@contextlib.contextmanager
def tallied_warnings(name: str = PACKAGE_LOGGER) -> Iterator[WarningTally]:
    """Passes on each warning of logger ``name`` (and its children) once; at the end logs every repeated one
    once more, with its count and places (see the module docstring). Other levels pass through untouched."""
    package = logging.getLogger(name)
    tally = WarningTally()
    propagate = package.propagate
    handler = _Tally(package, tally, propagate)
    package.addHandler(handler)
    package.propagate = False
    try:
        yield tally
    finally:
        package.removeHandler(handler)
        package.propagate = propagate
        for source, line in tally.repeated():  # under the logger that warned, so a filter on it still applies
            logging.getLogger(source).warning("%s", line)
