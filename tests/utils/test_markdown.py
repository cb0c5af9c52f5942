"""`llm_collapse.utils.markdown.markdown_table`: the one table renderer (reports, bench.md, the estimate)."""

from __future__ import annotations

import pytest

from llm_collapse.utils.markdown import markdown_table


def test_rows_rule_and_alignment():
    text = markdown_table(["a", "b", "c"], [[1, 2.5, "x"]], "lrc")
    assert text.splitlines() == ["| a | b | c |", "| --- | ---: | :-: |", "| 1 | 2.5 | x |"]
    assert not text.endswith("\n")


def test_escaping_and_the_compact_rule():
    rows = [["a|b", "two\nlines"]]
    assert markdown_table(["h", "k"], rows).splitlines()[2] == "| a\\|b | two lines |"
    raw = markdown_table(["h", "k"], rows, ["", "r"], escape=False, compact_rule=True)
    assert raw == "| h | k |\n|---|---:|\n| a|b | two\nlines |"


def test_no_rows_and_a_wrong_alignment():
    assert markdown_table(["h"], []) == "| h |\n| --- |"
    with pytest.raises(ValueError, match="2 entries for 1 columns"):
        markdown_table(["h"], [], "rr")
