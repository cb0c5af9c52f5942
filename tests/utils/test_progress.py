"""The run-level progress display: its counts, its ETA, and no carriage return outside a terminal."""

from __future__ import annotations

import io
import logging

import pytest

from llm_collapse.utils import progress
from llm_collapse.utils.progress import RunProgress, clock_text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def logged():
    """The package's log records as text, at INFO, in a stream of their own (as a redirected log file)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    package = logging.getLogger("llm_collapse")
    level = package.level
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        package.removeHandler(handler)
        package.setLevel(level)


def _run(display: RunProgress, clock: Clock, *, embedded: dict) -> None:
    """Two models x two methods; ``embedded[(model, method)]``: texts the cell embeds (the rest is cached)."""
    with display:
        for model in display.models:
            for method in display.methods:
                with display.cell(model, method):
                    for _ in range(embedded.get((model, method), 0)):
                        clock.now += 1.0
                        progress.advance(1)


def test_redirected_log_has_no_carriage_return_and_counts_every_cell(logged):
    clock, stream = Clock(), io.StringIO()  # a stream that is not a terminal
    display = RunProgress(["a", "b"], ["base", "ntk:4e6"], 10, stream=stream, every_pct=25, clock=clock)
    assert not display.terminal
    _run(display, clock, embedded={("a", "base"): 10, ("b", "ntk:4e6"): 10})
    text = logged.getvalue()
    assert "\r" not in text and stream.getvalue() == ""  # nothing drawn: lines went to the log
    lines = [line for line in text.splitlines() if line.startswith("run at ")]
    assert 1 <= len(lines) <= 4  # at most one per 25 %, the clock moving 1 s per text (< every_s)
    assert lines[0] == "run at model 1/2 a, method 1/2 base: 10/40 texts (25%), elapsed 0:10, ETA 0:30"
    # cached cells count when they end; the ETA is from the texts embedded: 20 texts in 20 s, none left
    assert text.splitlines()[-1] == "run finished: 40/40 texts in 0:20"


def test_time_passing_logs_a_line_before_the_next_percent_step(logged):
    clock = Clock()
    display = RunProgress(["a"], ["base"], 100, stream=io.StringIO(), every_s=60, every_pct=50, clock=clock)
    with display, display.cell("a", "base"):
        clock.now += 61
        display.advance(1)  # 1 % only, but a minute has passed
    assert (
        "run at model 1/1 a, method 1/1 base: 1/100 texts (1%), elapsed 1:01, ETA 1:40:39"
        in logged.getvalue()
    )


def test_a_cell_counts_at_most_its_texts_and_eta_is_unknown_until_something_is_embedded(logged):
    clock = Clock()
    display = RunProgress(["a"], ["base", "x"], 5, stream=io.StringIO(), clock=clock)
    with display:
        assert display.describe().endswith("0/10 texts (0%), elapsed 0:00, ETA ?")
        with display.cell("a", "base"):
            clock.now += 10
            display.advance(8)  # a task embedding more than the cell's texts (quantization variants)
            assert display.done == 5 and display.embedded == 8
        with display.cell("a", "x"):
            pass  # not applicable, or every text cached
        assert display.done == 10
        assert display.describe() == "model 1/1 a, method 2/2 x: 10/10 texts (100%), elapsed 0:10, ETA 0:00"


def test_per_batch_bars_hidden_under_a_run_and_off_a_terminal():
    terminal = Terminal()
    assert progress.batch_bars(terminal) and not progress.batch_bars(io.StringIO())
    with RunProgress(["a"], ["base"], 1, stream=io.StringIO()):
        assert not progress.batch_bars(terminal)
    assert progress.batch_bars(terminal)
    progress.advance(3)  # no display open: nothing to count, no error


def test_terminal_gets_one_bar_with_model_method_texts_and_eta(logged):
    clock, terminal = Clock(), Terminal()
    display = RunProgress(["a", "b"], ["base"], 4, stream=terminal, clock=clock)
    assert display.terminal
    _run(display, clock, embedded={("a", "base"): 4, ("b", "base"): 4})
    drawn = terminal.getvalue()
    assert "\r" in drawn  # redrawn in place on a terminal
    assert "model 2/2 b, method 1/1 base: 100%" in drawn and "8/8 texts, elapsed 0:08, ETA 0:00" in drawn
    assert "run at" not in logged.getvalue()  # no log lines beside the bar


def test_silent_below_info_but_still_hides_the_batch_bars():
    package = logging.getLogger("llm_collapse")
    level = package.level
    package.setLevel(logging.WARNING)
    try:
        terminal = Terminal()
        with RunProgress(["a"], ["base"], 3, stream=terminal) as display:
            assert not display.visible and not progress.batch_bars(terminal)
            with display.cell("a", "base"):
                display.advance(3)
        assert terminal.getvalue() == ""
    finally:
        package.setLevel(level)


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (59.6, "1:00"), (61, "1:01"), (3600 + 62, "1:01:02")])
def test_clock_text(seconds, text):
    assert clock_text(seconds) == text


@pytest.mark.parametrize("stream", [io.StringIO(), Terminal()], ids=["log", "terminal"])
def test_ctrl_c_shows_where_the_run_stopped_not_100_percent(logged, stream):
    """Issue 64: an interrupted cell's texts do not all count, so neither the bar nor the log reads finished."""
    clock = Clock()
    display = RunProgress(["a"], ["base", "x"], 10, stream=stream, clock=clock)
    with pytest.raises(KeyboardInterrupt), display, display.cell("a", "base"):
        clock.now += 3
        display.advance(3)
        raise KeyboardInterrupt
    assert display.done == 3
    text = logged.getvalue()
    assert "run interrupted at model 1/1 a, method 1/2 base: 3/20 texts (15%)" in text
    assert "run finished" not in text and "100%" not in stream.getvalue() + text
    if isinstance(stream, Terminal):
        assert "3/20 texts" in stream.getvalue() and "interrupted" in stream.getvalue()


def test_eta_counts_work_so_a_slow_model_after_a_fast_one_is_not_hidden(logged):
    """Issue 64: model b costs 10x a's per character; after a's cell (2 texts, 2 s) a text-counting ETA said
    2 s for b's cell, the work says 20 s."""
    clock = Clock()
    costs = {"a": lambda chars: 1.0 * chars, "b": lambda chars: 10.0 * chars}
    display = RunProgress(
        ["a", "b"], ["base"], 2, chars=[1, 1], costs=costs, stream=io.StringIO(), clock=clock
    )
    assert display.cell_work == {"a": 2.0, "b": 20.0} and display.total_work == 22.0
    with display:
        with display.cell("a", "base"):
            clock.now += 2
            progress.advance(2, [1, 1])
        assert display.describe().endswith("2/4 texts (50%), elapsed 0:02, ETA 0:20")
        with display.cell("b", "base"):
            clock.now += 10
            progress.advance(1, [1])  # 10 work units in 10 s: the rate stays 1 per second
            assert display.describe().endswith("3/4 texts (75%), elapsed 0:12, ETA 0:10")


def test_the_cache_makes_one_line_per_cell_and_its_texts_count_as_done_not_toward_the_rate(logged):
    clock = Clock()
    display = RunProgress(
        ["a"], ["base"], 4, chars=[1, 1, 1, 1], costs={"a": float}, stream=io.StringIO(), clock=clock
    )
    with display, display.cell("a", "base"):
        assert progress.served({"h1": 1}, ["h4"])  # the first task: one hit, one text to embed
        assert display.done == 1 and display.work_done == 1.0 and display.work_embedded == 0.0
        assert display.describe().endswith("ETA ?")  # nothing embedded yet: no rate
        clock.now += 5
        progress.advance(1, [1])
        assert progress.served({"h1": 1, "h2": 1, "h3": 1}, [])  # a second task of the cell asks again
        assert progress.served({"h4": 1}, [])  # what the first task embedded is not "from the cache"
        assert display.describe().endswith("4/4 texts (100%), elapsed 0:05, ETA 0:00")
    lines = [line for line in logged.getvalue().splitlines() if "from the cache" in line]
    assert lines == ["a x base: 3 texts from the cache, 1 embedded"]
    assert not progress.served({"h1": 1}, [])  # no display open: the cache logs its own line
