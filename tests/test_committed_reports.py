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
