"""Reports from run directories: tidy results -> figures, tables, report.md and self-contained report.html.

Public API::

    from llm_collapse.reporting import build_report, load_runs
    files = build_report([Path("reports/run-1")], Path("reports/run-1"))  # {"report.md": Path, ...}

Command line: ``python -m llm_collapse.report RUN_DIR [RUN_DIR ...] [--out DIR]``.

Decision: `build_report`/`write_report` are imported lazily (module ``__getattr__``) because they pull in
matplotlib and seaborn; loading and validating results (`frames`) needs only pandas and pyarrow, so the CLI
can reject bad input before the plotting stack is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_collapse.reporting.frames import (
    METRICS,
    RESULT_COLUMNS,
    MetricInfo,
    ReportData,
    SchemaError,
    load_run,
    load_runs,
)

if TYPE_CHECKING:
    from llm_collapse.reporting.build import build_report, write_report

__all__ = [
    "METRICS",
    "RESULT_COLUMNS",
    "MetricInfo",
    "ReportData",
    "SchemaError",
    "build_report",
    "load_run",
    "load_runs",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name in ("build_report", "write_report"):
        from llm_collapse.reporting import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
