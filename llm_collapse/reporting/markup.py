"""Inline markdown of the reports' text (headings, paragraphs, bullets, table cells, captions) as HTML.

Decisions:

- The markdown is read by a kept library, markdown-it-py (CommonMark), not by a converter of our own: links,
  emphasis, code and escapes in report.html are exactly what a CommonMark reader (GitHub) shows for
  report.md. Raw HTML in the text is escaped (``html: False``), so a cell can never inject markup.
- Only inline markup is read here; the blocks (headings, lists, tables, figures) are built by
  `llm_collapse.reporting.build` from the same objects as report.md, so the two cannot disagree.
- Links are kept as written: the study's links to its runs name their ``report.md``, which is committed,
  while a run's ``report.html`` is not (it embeds every figure; see .gitignore), so only the markdown is
  sure to be there.
"""

from __future__ import annotations

from markdown_it import MarkdownIt

__all__ = ["inline_html"]

_PARSER = MarkdownIt("commonmark", {"html": False})


def inline_html(text: str) -> str:
    """``text`` (inline markdown: ``**bold**``, ``*emphasis*``, ```code```, ``[text](href)``) as HTML."""
    return _PARSER.renderInline(text)
