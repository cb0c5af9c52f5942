"""Inline markdown of the reports' text (headings, paragraphs, bullets, table cells, captions) as HTML.

Decisions:

- The markdown is read by a kept library, markdown-it-py (CommonMark), not by a converter of our own: links,
  emphasis, code and escapes in report.html are exactly what a CommonMark reader (GitHub) shows for
  report.md. Raw HTML in the text is escaped (``html: False``), so a cell can never inject markup.
- Only inline markup is read here; the blocks (headings, lists, tables, figures) are built by
  `llm_collapse.reporting.blocks` from the same objects as report.md, so the two cannot disagree.
- Links are kept as written: the study's links to its runs name their ``report.md``, which is committed,
  while a run's ``report.html`` is not (it embeds every figure; see .gitignore), so only the markdown is
  sure to be there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from markdown_it import MarkdownIt

__all__ = ["inline_html"]

_PARSER = MarkdownIt("commonmark", {"html": False})


def inline_html(text: str) -> str:
    """``text`` (inline markdown: ``**bold**``, ``*emphasis*``, ```code```, ``[text](href)``) as HTML."""
    return _PARSER.renderInline(text)


def codes(values: Iterable[object]) -> str:
    """``a``, ``b`` as inline code, comma-separated; "none" for no values."""
    return ", ".join(f"`{v}`" for v in values) or "none"


def compact(value: Any) -> str:
    """A run.json value in one line: ``k=v`` pairs sorted by key, lists in brackets, strings bare."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={compact(value[k])}" for k in sorted(value, key=str)) or "?"
    if isinstance(value, list):
        return "[" + ", ".join(compact(v) for v in value) + "]"
    return json.dumps(value) if not isinstance(value, str) else value
