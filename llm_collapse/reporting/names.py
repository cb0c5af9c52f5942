"""One name per method for the reader: as ``--methods`` wrote it (``tempscale:0.8``), not its slug.

Decisions:

* Rows, items, cache keys, figure files and questions.yaml keep the slug (``tempscale-0.8``): a stable key that
  is safe in a file name. Only what a reader sees is renamed, where it is written: table cells, legends, panel
  titles and captions (`shown`, `method_cell`).
* The names come from the runs' configs (run.json ``config.methods``, each parsed to its slug); a slug no config
  names (a run from before run.json kept its methods) is shown as it is.
* A report sets them for the block that builds it (`showing`, a context variable), so the dozens of table and
  figure helpers need no extra argument; outside one every slug is shown as it is.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping

_NAMES: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "method_names", default=None
)


def method_names(methods: Iterable[str]) -> dict[str, str]:
    """Slug -> the method as written, for the ``--methods`` entries ``methods`` (the first text of a slug wins;
    an entry that no longer parses keeps no name)."""
    from llm_collapse.interventions import InterventionError, parse_method

    names: dict[str, str] = {}
    for text in methods:
        try:
            names.setdefault(parse_method(text).slug, text)
        except InterventionError:
            continue
    return names


@contextlib.contextmanager
def showing(names: Mapping[str, str]) -> Iterator[None]:
    """Within the block, `shown` names each slug of ``names`` as written."""
    token = _NAMES.set(dict(names))
    try:
        yield
    finally:
        _NAMES.reset(token)


def shown(method: str) -> str:
    """The method's name for the reader (its slug where no run named it)."""
    return (_NAMES.get() or {}).get(method, method)


def method_cell(method: str) -> str:
    """The method as a table cell: its shown name in code style."""
    return f"`{shown(method)}`"


def method_cells(methods: Iterable[str]) -> str:
    """The methods in code style, comma-separated ("none" for none): `markup.codes` with the shown names."""
    return ", ".join(map(method_cell, methods)) or "none"
