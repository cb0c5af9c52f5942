"""A report as a list of blocks (heading, paragraph, bullet list, table, figure), rendered twice, to markdown
and to one self-contained HTML page, so the two always say the same; inline markup (bold, code, links) is read by
markdown-it-py (`llm_collapse.reporting.markup`). The run reports and the study report use the same blocks.

Decisions: PNGs are embedded as ``data:image/png;base64,`` URIs and the CSS is inline (nothing is fetched);
every table sits in a ``<div class="scroll">`` that scrolls sideways, so a wide table never widens the page.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llm_collapse.reporting.markup import inline_html
from llm_collapse.reporting.tables import Table

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
line-height:1.45;color:#222}
h1,h2,h3{line-height:1.2}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.scroll{overflow-x:auto;margin:.8em 0}table{border-collapse:collapse;font-size:.85em}
th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}th{background:#f3f3f3}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}img{max-width:100%;height:auto}figcaption{font-size:.9em;color:#555}
code{background:#f4f4f4;padding:0 .2em;border-radius:3px}
""".strip()


@dataclass(frozen=True)
class Heading:
    """A heading of ``level`` (1-3)."""

    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of inline markup."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bullet list of inline-markup items."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Image:
    """A figure: PNG on disk, referenced by ``rel`` from the report folder."""

    path: Path
    rel: str
    alt: str
    caption: str


Block = Heading | Paragraph | Bullets | Table | Image


def anchor(heading: str) -> str:
    """A heading's in-page id as GitHub names it: lowercase, punctuation dropped, spaces to hyphens (the HTML
    gives its headings the same ids, so one contents list links in both)."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def render_markdown(blocks: Sequence[Block]) -> str:
    """The blocks as markdown (ends with one newline)."""
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            parts.append(block.text)
        elif isinstance(block, Bullets):
            parts.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            parts.append(block.to_markdown())
        elif isinstance(block, Image):
            parts.append(f"![{block.alt}]({block.rel})\n\n*{block.caption}*")
    return "\n\n".join(parts) + "\n"


def render_html(blocks: Sequence[Block], title: str, *, embed_images: bool = True) -> str:
    """The blocks as one HTML page: images inlined as base64 (self-contained), or linked by their ``rel`` path."""
    body = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(
                f'<h{block.level} id="{anchor(block.text)}">{inline_html(block.text)}</h{block.level}>'
            )
        elif isinstance(block, Paragraph):
            body.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            body.append("<ul>\n" + "\n".join(f"<li>{inline_html(i)}</li>" for i in block.items) + "\n</ul>")
        elif isinstance(block, Table):
            body.append(f'<div class="scroll">\n{block.to_html()}\n</div>')
        elif isinstance(block, Image):
            if embed_images:
                src = "data:image/png;base64," + base64.b64encode(block.path.read_bytes()).decode("ascii")
            else:
                src = html.escape(block.rel)
            body.append(
                f'<figure><img src="{src}" alt="{html.escape(block.alt)}">'
                f"<figcaption>{inline_html(block.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
