"""`tallied_warnings`: a repeated warning is passed on once and logged once more at the end with its count and
places; other records and levels pass untouched; propagation is restored."""

from __future__ import annotations

import logging

import pytest

from llm_collapse.utils.logs import held_logs, tallied_warnings


@pytest.fixture
def records():
    """Every record that reaches the root logger's handlers (what a command's log shows)."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep(level=logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    package = logging.getLogger("llm_collapse")
    level = package.level
    package.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        root.removeHandler(handler)
        package.setLevel(level)


def test_repeated_warning_is_shown_once_then_counted_with_its_places(records):
    metric = logging.getLogger("llm_collapse.metrics.hubness")
    other = logging.getLogger("llm_collapse.metrics.collapse")
    package = logging.getLogger("llm_collapse")
    with tallied_warnings() as tally:
        assert package.propagate is False
        for where in ("m x base", "m x base", "m x ntk"):
            tally.where = where
            metric.warning("hubness: skewness is NaN")
            other.info("a line at INFO, %d", 1)
        other.warning("%s needs n >= %d; NaN", "effective_rank", 3)
        other.error("an error")
        other.error("an error")
    assert package.propagate is True
    said = [(r.name, r.levelname, r.getMessage()) for r in records]
    assert said == [
        ("llm_collapse.metrics.hubness", "WARNING", "hubness: skewness is NaN"),
        ("llm_collapse.metrics.collapse", "INFO", "a line at INFO, 1"),
        ("llm_collapse.metrics.collapse", "INFO", "a line at INFO, 1"),
        ("llm_collapse.metrics.collapse", "INFO", "a line at INFO, 1"),
        (
            "llm_collapse.metrics.collapse",
            "WARNING",
            "effective_rank needs n >= 3; NaN",
        ),  # once: not repeated
        ("llm_collapse.metrics.collapse", "ERROR", "an error"),  # errors are never held back
        ("llm_collapse.metrics.collapse", "ERROR", "an error"),
        (
            "llm_collapse.metrics.hubness",  # the summary comes from the logger that warned
            "WARNING",
            "hubness: skewness is NaN (3 times in all, shown once; in m x base, m x ntk)",
        ),
    ]


def test_warnings_with_other_values_are_not_merged(records):
    metric = logging.getLogger("llm_collapse.metrics.collapse")
    with tallied_warnings():
        for label in ("[64,70)", "[128,140)", "[64,70)"):
            metric.warning("effective_rank: group %r has n = %d", label, 2)
    said = [r.getMessage() for r in records]
    assert said == [
        "effective_rank: group '[64,70)' has n = 2",
        "effective_rank: group '[128,140)' has n = 2",
        "effective_rank: group '[64,70)' has n = 2 (2 times in all, shown once)",  # no place was set
    ]


def test_after_the_block_warnings_pass_as_before(records):
    metric = logging.getLogger("llm_collapse.metrics.drift")
    with tallied_warnings():
        metric.warning("once")
    metric.warning("once")
    metric.warning("once")
    assert [r.getMessage() for r in records] == ["once"] * 3


def test_records_held_before_the_tally_are_passed_on_once(records):
    """`held_logs` (inputs checked before the run) and the tally (the run) in sequence, as a run uses them."""
    metric = logging.getLogger("llm_collapse.data.bins")
    with held_logs():
        metric.warning("bin short")
    with tallied_warnings():
        metric.warning("bin short")
    assert [r.getMessage() for r in records] == ["bin short", "bin short"]
