"""What a run writes to a redirected log: one progress display (no carriage-return bars) and each repeated
warning once, with its count at the end."""

from __future__ import annotations

import logging
import random

import pytest

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("private_cache")]

WORDS = "river stone light paper window garden silver morning letter forest harbour candle".split()


@pytest.fixture
def folder_corpus(tmp_path):
    rng = random.Random(0)
    root = tmp_path / "corpus"
    root.mkdir()
    for doc in range(8):
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(60)) + "." for _ in range(5)]
        folder = root / ("odd" if doc % 2 else "even")  # the label the knn task reads
        folder.mkdir(exist_ok=True)
        (folder / f"doc{doc}.txt").write_text("\n\n".join(paragraphs) + "\n")
    return root


class _Count(logging.Filter):
    """Counts the records a logger creates (a logger's filter sees each one before any handler)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.messages.append(record.getMessage())
        return True


def test_redirected_run_logs_progress_lines_and_each_repeated_warning_once(
    run_compare, tmp_path, folder_corpus, caplog, capsys
):
    counted = _Count()
    hubness = logging.getLogger("llm_collapse.metrics.hubness")
    hubness.addFilter(counted)
    caplog.set_level(logging.INFO, logger="llm_collapse")
    try:
        code = run_compare(
            tmp_path / "run",
            tiny="gemma3-270m",
            methods="base,tempscale:0.8",
            tasks="collapse,knn",
            corpus=f"folder:{folder_corpus}",
            label="folder",
            lengths=[32, 64],
            max_per_bin=6,
            batch_size=2,
            dtype="fp32",
            no_report=True,
        )
    finally:
        hubness.removeFilter(counted)
    assert code == 0
    err = capsys.readouterr().err
    assert "\r" not in err  # stderr is not a terminal here: no bar, neither the run's nor a batch's
    assert "text/s" not in err  # the embedder's per-batch bar stayed hidden
    texts = 2 * 6  # per cell: the prefix design's 6 documents at 2 lengths
    assert f"run finished: {2 * texts}/{2 * texts} texts in " in caplog.text
    assert "run at model 1/1 gemma3-270m, method " in caplog.text
    # the cache says what it served once per cell, however many times the tasks asked it
    cache_lines = [r.getMessage() for r in caplog.records if "from the cache" in r.getMessage()]
    assert cache_lines == [
        f"gemma3-270m x {method}: 0 texts from the cache, {texts} embedded"
        for method in ("base", "tempscale:0.8")
    ]
    assert not [
        r for r in caplog.records if r.getMessage().startswith("cache: ") and r.levelno >= logging.INFO
    ]
    # every hubness warning the run made, however often, is in the log once, then once with its count
    assert len(counted.messages) > 1
    for message in set(counted.messages):
        times = counted.messages.count(message)
        logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith(message)]
        if times == 1:
            assert logged == [message]
        else:
            assert logged[0] == message and len(logged) == 2
            assert logged[1].startswith(f"{message} ({times} times in all, shown once; in gemma3-270m x base")
            assert caplog.records[-1].name.startswith("llm_collapse")
