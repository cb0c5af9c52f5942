"""The README's Findings are the study report's answers table, verbatim, in at most 40 lines (issue 44)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_readme_findings_are_the_reports_takeaway_and_verdicts_in_at_most_40_lines():
    """The study report's takeaway and its table of verdicts per family, verbatim, with the verdict legend."""
    findings = _section((ROOT / "README.md").read_text(), "## Findings")
    report = (ROOT / "reports" / "study" / "report.md").read_text()
    answers = _section(report, "## Answers")
    assert len(findings.strip().splitlines()) <= 40
    families = report.split("**Verdicts per family**", 1)[1].split("\n\n")[1]
    assert _table(findings) == _table(families) and len(_table(families)) >= 3
    takeaway = answers.strip().split("\n\n", 1)[0]
    assert not takeaway.startswith("|") and " ".join(takeaway.split()) in " ".join(findings.split())
    for words in (
        "no, the opposite",
        "no, equivalent",
        "inconclusive",
        "exploratory",
        "family",
        "unadjusted",
    ):
        assert words in findings, words
    for line in findings.splitlines():
        if line.startswith("!["):
            assert (ROOT / line.rsplit("(", 1)[1].rstrip(")")).is_file(), line
