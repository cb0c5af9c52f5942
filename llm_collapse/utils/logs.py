"""Log records held back while a command checks its inputs, so that a refusal is one line.

Checking inputs logs warnings of its own (a length bin left empty, a partly filled bin) that are noise when
the same inputs are then refused: the user should see the one ``error:`` line. `held_logs` collects the
package's records for the duration of a block and, when the block raises a `UserError`, drops them; when it
succeeds (or fails with a bug, whose records may explain it) they are passed on in order, as if never held.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

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
