"""One run-level progress display: model i/N, method j/M, texts done/total, elapsed time and ETA.

Decisions:

* One display for the whole run (`RunProgress`, opened by `llm_collapse.run.runner`). While it is open the
  embedder's per-batch bars are hidden (`batch_bars`) and its batches advance this one instead (`advance`);
  transformers' own bars (loading weights) are switched off.
* On a terminal (``stream.isatty()``) it is one tqdm bar redrawn in place, with log records written above it
  (`tqdm.contrib.logging.logging_redirect_tqdm`). Anywhere else (a log redirected to a file) nothing writes a
  carriage return: it logs a plain INFO line when ``every_pct`` percent of the texts or ``every_s`` seconds
  have passed since the last line, whichever comes first, and one line at the end.
* Texts: each (model, method) cell counts the run's distinct texts (``per_cell``). Inside a cell the count
  follows the texts embedded and stops at the cell's total; when the cell ends all of them count (texts served
  by the cache, a method that does not apply), but not when it raises: an interrupted run's bar and its last
  log line (a warning) show where it stopped, never 100%.
* The ETA counts work, not texts: with ``costs`` (each model's forward FLOPs of a text from its characters,
  `llm_collapse.run.work`) it divides the work left by the rate of work actually embedded, so a slow model
  after a fast one, or long texts after short ones, do not make it off by hours; without, every text weighs
  one. Texts served by the cache count as done but not toward the rate; it is "?" until something is embedded.
* The cache's hits and misses (`served`) make one line per cell, not one per call of the cache.
* Silent (but still hiding the per-batch bars) where the package does not log at INFO.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TextIO

logger = logging.getLogger(__name__)

_CURRENT: contextvars.ContextVar[RunProgress | None] = contextvars.ContextVar("run_progress", default=None)


def advance(n: int, chars: Sequence[int] | None = None) -> None:
    """Counts ``n`` texts embedded (of ``chars`` characters each, where known) toward the open run's display
    (nothing without one)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.advance(n, chars)


def served(hits: Mapping[str, int], to_embed: Sequence[str]) -> bool:
    """Tells the open run's display that the cache served ``hits`` (text hash -> characters) and left the
    texts ``to_embed`` (hashes) to embed; False where no display is open (the caller logs it itself)."""
    progress = _CURRENT.get()
    if progress is None:
        return False
    progress.served(hits, to_embed)
    return True


def batch_bars(stream: TextIO | None = None) -> bool:
    """Whether a per-batch bar may be drawn on ``stream`` (default stderr): only on a terminal, and not while a
    run-level display is open."""
    return _CURRENT.get() is None and is_terminal(stream or sys.stderr)


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def clock_text(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour)."""
    whole = max(int(round(seconds)), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class RunProgress:
    """The display of one run over ``models`` x ``methods``, ``per_cell`` texts in each cell; a context manager.

    Args:
        models: The models in run order.
        methods: The methods, in the order each model runs them.
        per_cell: Texts one (model, method) cell embeds.
        chars: The characters of each of those texts (with ``costs``: the ETA's work).
        costs: Model -> the cost of a text of so many characters (`llm_collapse.run.work.text_costs`); None:
            every text costs one.
        stream: Where a terminal bar is drawn (default stderr); a stream that is not a terminal gets no bar
            (the lines go to the log).
        every_s: Most seconds between two log lines (not on a terminal).
        every_pct: Most percent of the texts between two log lines (not on a terminal).
        clock: Seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        models: list[str],
        methods: list[str],
        per_cell: int,
        *,
        chars: Sequence[int] | None = None,
        costs: Mapping[str, Callable[[int], float]] | None = None,
        stream: TextIO | None = None,
        every_s: float = 60.0,
        every_pct: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.models, self.methods, self.per_cell = list(models), list(methods), max(int(per_cell), 0)
        self.total = len(self.models) * len(self.methods) * self.per_cell
        self.stream = stream or sys.stderr
        self.every_s, self.every_pct, self.clock = every_s, every_pct, clock
        self.done = 0  # texts counted, cells before this one included
        self.embedded = 0  # texts embedded
        self._costs = costs if chars is not None else None
        self.cell_work = {model: self._work(model, chars, self.per_cell) for model in self.models}
        self.total_work = sum(self.cell_work.values()) * len(self.methods)
        self.work_done = self.work_embedded = 0.0  # the ETA's work: counted, embedded (the rate)
        self.model = self.method = None
        self._cell_start, self._cell_done, self._cell_work_done = 0, 0, 0.0
        self._cache = [0, 0]  # the cell's texts from the cache and texts embedded (`served`)
        self._cache_seen: set[str] = set()
        self._started = self._last_time = 0.0
        self._last_done = 0
        self._bar = None
        self._held = contextlib.ExitStack()
        self._token = None
        self.visible = logging.getLogger("llm_collapse").isEnabledFor(logging.INFO)
        self.terminal = self.visible and is_terminal(self.stream)

    def __enter__(self) -> RunProgress:
        self._started = self._last_time = self.clock()
        self._token = _CURRENT.set(self)
        self._held.enter_context(_no_transformers_bars())
        if self.terminal:
            from tqdm.auto import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._held.enter_context(logging_redirect_tqdm())
            self._bar = self._held.enter_context(
                tqdm(
                    total=self.total,
                    desc=self._where(),
                    file=self.stream,
                    unit="text",
                    bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} texts{postfix}",  # tqdm puts ", " first,
                )
            )
            self._draw()
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.visible and exc[0] is None and not self.terminal:
                logger.info(
                    "run finished: %d/%d texts in %s", self.done, self.total, clock_text(self._elapsed())
                )
            elif self.visible and exc[0] is not None:  # the bar and the log say where it stopped, never 100%
                what = "interrupted" if issubclass(exc[0], KeyboardInterrupt) else "stopped"
                if self._bar is not None:
                    self._bar.set_postfix_str(f"{self._times()}, {what}", refresh=True)
                logger.warning("run %s at %s", what, self.describe())
        finally:
            self._held.close()
            self._bar = None
            if self._token is not None:
                _CURRENT.reset(self._token)
                self._token = None

    @contextlib.contextmanager
    def cell(self, model: str, method: str) -> Iterator[None]:
        """The block that runs one (model, method) cell: its texts all count when it ends, not when it raises."""
        self.model, self.method = model, method
        self._cell_start, self._cell_done, self._cell_work_done = self.done, 0, 0.0
        self._cache, self._cache_seen = [0, 0], set()
        self._draw()
        yield  # an exception (Ctrl-C) leaves the count where the work stopped
        if self.visible and any(self._cache):
            logger.info("%s x %s: %d texts from the cache, %d embedded", model, method, *self._cache)
        self._count(self.per_cell - self._cell_done, self.cell_work.get(model, 0.0) - self._cell_work_done)

    def advance(self, n: int, chars: Sequence[int] | None = None) -> None:
        """``n`` texts embedded (``chars``: their characters, where known): counted up to the cell's total,
        and toward the rate in full."""
        n = max(int(n), 0)
        work = self._work(self.model, chars, n)
        self.embedded += n
        self.work_embedded += work
        self._count(n, work)

    def served(self, hits: Mapping[str, int], to_embed: Sequence[str]) -> None:
        """The cache served ``hits`` (hash -> characters: done, not toward the rate) and left ``to_embed``
        (hashes) to embed. A text a task of this cell embedded before is not "from the cache" again."""
        new = {h: chars for h, chars in hits.items() if h not in self._cache_seen}
        self._cache[0] += len(new)
        self._cache[1] += len(set(to_embed) - self._cache_seen)
        self._cache_seen.update(hits, to_embed)
        self._count(len(new), self._work(self.model, list(new.values()), len(new)))

    def describe(self) -> str:
        """Where the run is, in words: model i/N, method j/M, texts, elapsed, ETA."""
        return f"{self._where()}: {self.done}/{self.total} texts ({self._percent():.0f}%), {self._times()}"

    # ------------------------------------------------------------------------------------------ internals

    def _work(self, model: str | None, chars: Sequence[int] | None, n: int) -> float:
        """The work of ``n`` texts of ``chars`` characters on ``model``: their costs; without costs (or
        characters) ``n``, in the run's unit (one text, or a cell's mean cost)."""
        if self._costs is None or model not in self._costs:
            return float(n)
        if chars is None:
            return n * self.cell_work[model] / max(self.per_cell, 1)
        return float(sum(self._costs[model](c) for c in chars))

    def _count(self, n: int, work: float) -> None:
        """Counts ``n`` texts and ``work`` done, each up to what is left of the cell."""
        left_work = self.cell_work.get(self.model, 0.0) - self._cell_work_done if self.model else work
        work = min(max(work, 0.0), max(left_work, 0.0))
        self._cell_work_done += work
        self.work_done += work
        n = min(n, self.per_cell - self._cell_done) if self.model else n
        if n <= 0:
            return
        self._cell_done += n
        self.done += n
        if self._bar is not None:
            self._draw(refresh=False)
            self._bar.update(n)  # redraws at most every tqdm's mininterval
        elif self.visible and self._due():
            logger.info("run at %s", self.describe())

    def _where(self) -> str:
        if self.model is None:
            return "starting"
        i = self.models.index(self.model) + 1 if self.model in self.models else 0
        j = self.methods.index(self.method) + 1 if self.method in self.methods else 0
        return f"model {i}/{len(self.models)} {self.model}, method {j}/{len(self.methods)} {self.method}"

    def _elapsed(self) -> float:
        return self.clock() - self._started

    def _times(self) -> str:
        elapsed = self._elapsed()
        left = self.total_work - self.work_done
        if self.total - self.done <= 0 or left <= 0:
            eta = "0:00"
        elif self.work_embedded and elapsed > 0:
            eta = clock_text(left / (self.work_embedded / elapsed))
        else:
            eta = "?"
        return f"elapsed {clock_text(elapsed)}, ETA {eta}"

    def _percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 100.0

    def _due(self) -> bool:
        now = self.clock()
        step = self.total * self.every_pct / 100.0
        if now - self._last_time >= self.every_s or self.done - self._last_done >= step:
            self._last_time, self._last_done = now, self.done
            return True
        return False

    def _draw(self, refresh: bool = True) -> None:
        if self._bar is not None:
            self._bar.set_description_str(self._where(), refresh=False)
            self._bar.set_postfix_str(self._times(), refresh=refresh)


@contextlib.contextmanager
def _no_transformers_bars() -> Iterator[None]:
    """transformers' progress bars (loading weights) off for the block, as they were after it."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency of every run
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
