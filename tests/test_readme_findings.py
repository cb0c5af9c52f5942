"""The README's Findings are the study report's answers table, verbatim, in at most 40 lines (issue 44)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_readme_findings_are_the_reports_answers_in_at_most_40_lines():
    findings = _section((ROOT / "README.md").read_text(), "## Findings")
    answers = _section((ROOT / "reports" / "study" / "report.md").read_text(), "## Answers")
    assert len(findings.strip().splitlines()) <= 40
    assert _table(findings) == _table(answers) and len(_table(answers)) >= 3
    for line in findings.splitlines():
        if line.startswith("!["):
            assert (ROOT / line.rsplit("(", 1)[1].rstrip(")")).is_file(), line
