"""The package's one markdown-table renderer (reports, ``bench.md``, the GPU estimate); no dependencies.

Decisions and gotchas:

- Rows are ``| a | b |``: one space around every cell, a pipe at each end.
- ``align`` is one letter per column: ``""`` or ``"l"`` default (``---``), ``"r"`` right (``---:``),
  ``"c"`` centred (``:-:``); a string such as ``"llrr"`` works too.
- ``escape=True`` (the report tables) writes ``|`` in a cell as ``\\|`` and a newline as a space, so a cell
  can never break the table. ``bench.md`` and the estimate pass ``escape=False`` and ``compact_rule=True``,
  which keeps their files byte for byte as they have always been written (cells as given; rule row
  ``|---|---:|`` instead of ``| --- | ---: |``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["markdown_table"]

_RULES = {"": "---", "l": "---", "r": "---:", "c": ":-:"}


def markdown_table(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    align: Sequence[str] | None = None,
    *,
    escape: bool = True,
    compact_rule: bool = False,
) -> str:
    """A GitHub-flavoured markdown table, no trailing newline.

    Args:
        header: Column headers.
        rows: Rows of cells (anything; written with ``str``), each as long as ``header``.
        align: Per column ``""``/``"l"``, ``"r"`` or ``"c"`` (see the module docstring); None: all default.
        escape: Write ``|`` as ``\\|`` and newlines as spaces inside cells.
        compact_rule: Rule row without spaces (``|---|---:|``).

    Returns:
        The header row, the rule row and one line per row, joined by newlines.
    """
    align = [""] * len(header) if align is None else list(align)
    if len(align) != len(header):
        raise ValueError(f"align has {len(align)} entries for {len(header)} columns")
    rules = [_RULES[a] for a in align]
    lines = [_row(header, escape), "|" + "|".join(rules) + "|" if compact_rule else _row(rules, False)]
    lines += [_row(row, escape) for row in rows]
    return "\n".join(lines)


def _row(cells: Sequence[object], escape: bool) -> str:
    text = [str(c) for c in cells]
    if escape:
        text = [c.replace("|", "\\|").replace("\n", " ") for c in text]
    return "| " + " | ".join(text) + " |"
