"""Every committed run under reports/ rebuilds into the same report.md (tables and text) with today's code: a
refactor that changes a committed table fails here. Figures are not compared (matplotlib versions move them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPORTS = Path(__file__).resolve().parents[1] / "reports"
RUNS = sorted(p.parent for p in REPORTS.glob("*/*/results.parquet"))


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_committed_run_report_rebuilds_identically(run, tmp_path):
    pytest.importorskip("seaborn")
    from llm_collapse.cli.report import main

    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("figures", "report.*"))
    assert main([str(copy)]) == 0
    assert (copy / "report.md").read_text() == (run / "report.md").read_text()


def test_committed_study_report_rebuilds_identically(tmp_path):
    """reports/study/report.{md,html} are what `python -m llm_collapse.study reports/study` makes from the
    committed runs and experiments/study/questions.yaml, and every figure the HTML links is committed."""
    import re

    from llm_collapse.reporting.study import build_study

    study = REPORTS / "study"
    copy = tmp_path / "study"
    shutil.copytree(study, copy, ignore=shutil.ignore_patterns("report.md", "report.html"))
    out = build_study(copy, REPORTS.parent / "experiments" / "study" / "questions.yaml")

    def rebuilt(kind: str) -> str:  # the report names its root in the rebuild command
        return out[kind].read_text().replace(copy.as_posix(), "reports/study")

    assert rebuilt("md") == (study / "report.md").read_text()
    page = (study / "report.html").read_text()
    assert rebuilt("html") == page
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs and all((study / src).is_file() for src in srcs)
