"""The study report reads in five minutes (issue 44): each reading is at most six short bullets, and no
paragraph or bullet of reports/study/report.md is over 600 characters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llm_collapse.reporting.study import (
    READING_MAX_BULLETS,
    READING_MAX_CHARS,
    StudyError,
    build_study,
    load_questions,
)
from llm_collapse.reporting.synthetic_runs import write_synthetic_run

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "study" / "report.md"
QUESTIONS_FILE = ROOT / "experiments" / "study" / "questions.yaml"

# Paragraphs the study's code writes around the questions file's wording that are still over the limit: the
# command with its run-report links (`study._question_blocks`) and the tests legend under a table
# (`significance.table_legend`). The strict test below fails on them until they are shortened (issue 44).


def _blocks(markdown: str) -> list[tuple[int, str, str]]:
    """``(line, kind, text)`` per paragraph (a run of non-empty, non-table, non-heading lines, joined by spaces)
    and per bullet (its text without the ``- `` marker, with any lines that continue it)."""
    blocks: list[tuple[int, str, str]] = []
    current: list[str] = []
    kind, start = "", 0

    def flush() -> None:
        if current:
            blocks.append((start, kind, " ".join(current)))
        current.clear()

    for number, line in enumerate(markdown.splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("|") or text.startswith("#"):
            flush()
        elif text.startswith("- "):
            flush()
            kind, start = "bullet", number
            current.append(text[2:])
        else:
            if not current:
                kind, start = "paragraph", number
            current.append(text)
    flush()
    return blocks


def _over(blocks, limit: int = READING_MAX_CHARS) -> list[str]:
    return [f"line {line}: {kind} of {len(text)} characters: {text[:80]}..." for line, kind, text in blocks
            if len(text) > limit]  # fmt: skip


def test_block_parser_joins_paragraph_lines_and_splits_bullets():
    markdown = "# T\n\nab\ncd\n\n- one\n- two\n  more\n\n| a | b |\n| --- | --- |\n\nend\n"
    assert _blocks(markdown) == [
        (3, "paragraph", "ab cd"),
        (6, "bullet", "one"),
        (7, "bullet", "two more"),
        (13, "paragraph", "end"),
    ]


def test_committed_report_has_no_paragraph_over_600_characters():
    over = _over(_blocks(REPORT.read_text()))
    assert not over, "\n".join(over)


def test_committed_report_readings_are_at_most_six_bullets():
    """Each question section has a reading of 1 to 6 bullets, each at most 600 characters."""
    sections = REPORT.read_text().split("\n## Q")[1:]
    assert len(sections) == len(load_questions(QUESTIONS_FILE)[2])
    for section in sections:
        lines = section.split("\n**Reading.**\n", 1)
        assert len(lines) == 2, section[:80]
        bullets = []
        for line in lines[1].lstrip("\n").splitlines():
            if not line.startswith("- "):
                break
            bullets.append(line[2:])
        assert 1 <= len(bullets) <= READING_MAX_BULLETS, section[:80]
        assert all(len(b) <= READING_MAX_CHARS for b in bullets), section[:80]


def test_committed_readings_quote_no_result_numbers():
    """The questions file's rule: every number in the report is read from the results. Method and length
    names (tau 0.7, theta 1e7, 32k) are allowed; estimates (two or more decimals), signed values, p-values and
    percentages are not."""
    title, intro, questions = load_questions(QUESTIONS_FILE)
    assert isinstance(intro, tuple) and 1 <= len(intro) <= READING_MAX_BULLETS
    for q in questions:
        assert isinstance(q.reading, tuple), q.id
        for bullet in q.reading:
            found = re.findall(r"\d\.\d{2,}|(?<![\w-])[+-]\d|\bp\s*[=<]|\d\s*%", bullet)
            assert not found, (q.id, found, bullet)


# --------------------------------------------------------------------------- validation of the wording

QUESTION = "questions:\n  - id: q1\n    title: T\n    run: sweep\n    command: c\n    metrics: [collapse/x]\n"


def _yaml_list(items) -> str:
    return "".join(f"      - {item}\n" for item in items)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "    reading:\n" + _yaml_list([f"b{i}" for i in range(7)]),
            "question 1 value reading: 7 bullets, over 6",
        ),
        (
            "    reading:\n" + _yaml_list(["ok", "x" * 601]),
            "value reading bullet 2: 601 characters, over 600",
        ),
        (
            "    reading:\n" + _yaml_list(["ok", "5"]),
            "value reading bullet 2: 5 (int) must be a non-empty string",
        ),
        (
            "    reading:\n" + _yaml_list(["ok", "[a, b]"]),
            "value reading bullet 2: ['a', 'b'] (list) must be",
        ),
        ("    reading:\n" + _yaml_list(["ok", "''"]), "value reading bullet 2: '' (str) must be a non-empty"),
        ("    reading: " + "y" * 601 + "\n", "value reading: a paragraph of 601 characters, over 600"),
        ("    reading: {a: 1}\n", "value reading: {'a': 1} (dict) must be a string or a list of strings"),
    ],
)
def test_bad_reading_is_one_line(tmp_path, extra, message):
    questions = tmp_path / "questions.yaml"
    questions.write_text(QUESTION + extra)
    with pytest.raises(StudyError, match=re.escape(message)) as error:
        load_questions(questions)
    assert "\n" not in str(error.value)


def test_bad_intro_is_one_line(tmp_path):
    questions = tmp_path / "questions.yaml"
    questions.write_text("intro:\n" + "".join(f"  - b{i}\n" for i in range(7)) + QUESTION)
    with pytest.raises(StudyError, match="value intro: 7 bullets, over 6") as error:
        load_questions(questions)
    assert "\n" not in str(error.value) and str(questions) in str(error.value)


def test_wording_at_the_limits_is_allowed(tmp_path):
    """Six bullets of 600 characters, a 600-character paragraph; folded lines read as one line."""
    questions = tmp_path / "questions.yaml"
    bullets = [chr(ord("a") + i) * READING_MAX_CHARS for i in range(READING_MAX_BULLETS)]
    questions.write_text(
        "intro: |\n  one\n  two\n" + QUESTION + "    reading:\n" + _yaml_list(bullets)
        + "  - id: q2\n    title: T\n    run: sweep\n    command: c\n    metrics: [collapse/x]\n"
        + "    reading: " + "z" * READING_MAX_CHARS + "\n"
    )  # fmt: skip
    _, intro, (first, second) = load_questions(questions)
    assert intro == "one two"
    assert first.reading == tuple(bullets)
    assert second.reading == "z" * READING_MAX_CHARS


def test_bullets_render_as_a_list_under_the_reading(tmp_path):
    """A list reading or intro renders as bullets (markdown and HTML); a string as one paragraph."""
    write_synthetic_run(tmp_path / "sweep")
    questions = tmp_path / "questions.yaml"
    questions.write_text(
        "title: S\nintro:\n  - First intro point.\n  - Second intro point.\nquestions:\n"
        "  - id: q1\n    title: Listed\n    run: sweep\n    command: c\n    metrics: [collapse/pairwise_cosine]\n"
        "    reading:\n      - One `code` point.\n      - Two.\n"
        "  - id: q2\n    title: Plain\n    run: sweep\n    command: c\n    metrics: [collapse/pairwise_cosine]\n"
        "    reading: >-\n      A folded\n      paragraph.\n"
    )
    out = build_study(tmp_path, questions)
    text = out["md"].read_text()
    assert "# S\n\n- First intro point.\n- Second intro point.\n" in text
    assert "\n**Reading.**\n\n- One `code` point.\n- Two.\n\n*collapse:" in text
    assert "\n**Reading.**\n\nA folded paragraph.\n\n*collapse:" in text
    page = out["html"].read_text()
    assert "<ul>\n<li>One <code>code</code> point.</li>\n<li>Two.</li>\n</ul>" in page
    assert "<p>A folded paragraph.</p>" in page
