"""Known-answer tests for `llm_collapse.metrics` (fast, CPU only)."""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from llm_collapse.metrics import (
    METRIC_KEYS,
    attention_entropy,
    bootstrap_ci,
    centroid,
    centroid_cosine,
    centroid_distance,
    collapse_metrics,
    effective_rank,
    global_centroid_distance,
    high_frequency_energy_ratio,
    knn_label_accuracy,
    layerwise_high_frequency,
    mean_pairwise_cosine,
    pairwise_cosine_ci,
    retrieval_scores,
    spearman_trend,
)
from llm_collapse.metrics.collapse import effective_rank_leave_one_out
from llm_collapse.metrics.probes import _vote
from llm_collapse.metrics.stats import effective_rank_ci

RNG = np.random.default_rng(1234)


def _brute_pairwise(X: np.ndarray) -> float:
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    n = len(U)
    return float((S.sum() - np.trace(S)) / (n * (n - 1)))


# ---------------------------------------------------------------- collapse geometry


def test_identical_vectors_are_fully_collapsed():
    X = np.tile(RNG.normal(size=16), (10, 1)) * 3.0  # unnormalised on purpose
    assert mean_pairwise_cosine(X) == pytest.approx(1.0, abs=1e-12)
    assert centroid_distance(X) == pytest.approx(0.0, abs=1e-7)
    assert effective_rank(X) == pytest.approx(1.0, abs=1e-9)


def test_orthonormal_vectors():
    n, d = 6, 9
    X = np.eye(n, d)
    assert mean_pairwise_cosine(X) == pytest.approx(0.0, abs=1e-12)
    assert centroid_distance(X) == pytest.approx(math.sqrt(1 - 1 / n), abs=1e-12)
    assert effective_rank(X) == pytest.approx(n, rel=1e-12)


def test_two_antipodal_clusters(caplog):
    m = 5
    v = RNG.normal(size=8)
    X = np.vstack([np.tile(v, (m, 1)), np.tile(-v, (m, 1))])  # (2m, 8)
    assert mean_pairwise_cosine(X) == pytest.approx(-1 / (2 * m - 1), abs=1e-12)
    assert centroid_distance(X) == pytest.approx(1.0, abs=1e-12)
    assert effective_rank(X) == pytest.approx(1.0, abs=1e-9)
    assert np.allclose(centroid(X), 0.0, atol=1e-12)
    with caplog.at_level(logging.WARNING):
        assert math.isnan(centroid_cosine(centroid(X) * 0.0, v, label="antipodal"))
    assert "antipodal" in caplog.text


def test_pairwise_cosine_matches_brute_force_including_chunks():
    X = RNG.normal(size=(57, 20)) * RNG.uniform(0.1, 5.0, size=(57, 1)) + 0.3
    expected = _brute_pairwise(X)
    assert mean_pairwise_cosine(X) == pytest.approx(expected, abs=1e-10)
    for chunk in (1, 7, 56, 57, 1000):
        assert mean_pairwise_cosine(X, chunk_size=chunk) == pytest.approx(expected, abs=1e-10)
    # float32 input and a list input give the same answer
    assert mean_pairwise_cosine(X.astype(np.float32), chunk_size=10) == pytest.approx(
        _brute_pairwise(X.astype(np.float32).astype(np.float64)), abs=1e-10
    )
    assert mean_pairwise_cosine(X.tolist()) == pytest.approx(expected, abs=1e-10)


def test_global_centroid_and_centroid_cosine():
    X = np.array([[1.0, 0.0]])
    assert global_centroid_distance(X, np.array([0.0, 1.0])) == pytest.approx(math.sqrt(2))
    assert global_centroid_distance(X * 4, np.zeros(2)) == pytest.approx(1.0)
    assert centroid_cosine(np.array([1.0, 0.0]), np.array([2.0, 2.0])) == pytest.approx(1 / math.sqrt(2))
    with pytest.raises(ValueError):
        global_centroid_distance(X, np.zeros(3))


def test_collapse_metrics_keys_and_values():
    A = RNG.normal(size=(30, 12))
    B = RNG.normal(size=(20, 12)) + 2.0
    g = centroid(np.vstack([A, B]))
    out = collapse_metrics(A, global_centroid=g, label="bin0")
    assert list(out) == ["n", *METRIC_KEYS]
    assert out["n"] == 30
    assert out["pairwise_cosine"] == pytest.approx(_brute_pairwise(A), abs=1e-10)
    assert out["centroid_cosine"] == pytest.approx(centroid_cosine(centroid(A), g))
    assert out["global_centroid_distance"] == pytest.approx(global_centroid_distance(A, g))
    no_global = collapse_metrics(A)
    assert math.isnan(no_global["global_centroid_distance"]) and math.isnan(no_global["centroid_cosine"])


def test_below_minimum_size_is_nan_with_warning(caplog):
    X = RNG.normal(size=(1, 8))
    with caplog.at_level(logging.WARNING, logger="llm_collapse.metrics"):
        out = collapse_metrics(X, global_centroid=np.ones(8), label="tiny-bin")
    for key in ("pairwise_cosine", "centroid_distance", "effective_rank"):
        assert math.isnan(out[key]), key
        assert key in caplog.text
    assert "tiny-bin" in caplog.text
    assert np.isfinite(out["global_centroid_distance"]) and np.isfinite(out["centroid_cosine"])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert math.isnan(mean_pairwise_cosine(np.zeros((0, 4)), label="empty"))
    assert "pairwise_cosine" in caplog.text and "empty" in caplog.text


def test_zero_rows_are_rejected():
    with pytest.raises(ValueError, match="zero or non-finite"):
        centroid_distance(np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_effective_rank_centred_option():
    X = np.tile(RNG.normal(size=5), (4, 1))
    assert math.isnan(effective_rank(X, center=True))
    Y = RNG.normal(size=(40, 6))
    assert 1.0 < effective_rank(Y, center=True) <= 6.0


@pytest.mark.parametrize(("n", "d"), [(24, 64), (30, 8), (9, 9)])
@pytest.mark.parametrize("center", [False, True])
def test_effective_rank_leave_one_out_equals_a_loop(n, d, center):
    rng = np.random.default_rng(n + d)
    X = rng.normal(size=(n, d)) * np.linspace(2.0, 0.1, d) + 1.5
    X[3] = 2.0 * X[5]  # a duplicated direction: rank-deficient replicates
    loop = np.array([effective_rank(np.delete(X, i, axis=0), center=center) for i in range(n)])
    np.testing.assert_allclose(effective_rank_leave_one_out(X, center=center), loop, rtol=1e-10)
    same = np.tile(rng.normal(size=d), (5, 1))
    assert effective_rank_leave_one_out(same) == pytest.approx([1.0] * 5)
    assert np.isnan(effective_rank_leave_one_out(same, center=True)).all()
    assert np.isnan(effective_rank_leave_one_out(X[:2])).all()


def test_effective_rank_ci_is_the_delete_one_jackknife():
    X = np.random.default_rng(7).normal(size=(20, 48)) + 0.7
    n = len(X)
    loop = [effective_rank(np.delete(X, i, axis=0)) for i in range(n)]
    se = math.sqrt((n - 1) / n * sum((v - sum(loop) / n) ** 2 for v in loop))
    t = scipy_stats.t.ppf(0.975, n - 1)
    point = effective_rank(X)
    assert effective_rank_ci(X) == pytest.approx((point, point - t * se, point + t * se), rel=1e-9)
    assert all(math.isnan(v) for v in effective_rank_ci(X[:2])[1:])


def test_effective_rank_ci_covers_the_expected_rank_at_that_n():
    """Coverage on synthetic data whose target, E[effective rank of n rows], is known by Monte Carlo."""
    d, n = 32, 24
    scale = np.arange(1, d + 1) ** -0.5

    def draw(rng):
        X = rng.normal(size=(n, d)) * scale
        X[:, 0] += 1.0  # a common direction, as in embeddings
        return X

    rng = np.random.default_rng(0)
    truth = np.mean([effective_rank(draw(rng)) for _ in range(2000)])
    covered = [low <= truth <= high for _, low, high in (effective_rank_ci(draw(rng)) for _ in range(300))]
    assert 0.9 <= np.mean(covered) <= 0.99, np.mean(covered)  # nominal 0.95; 300 draws: SE 0.013
    # why not the row bootstrap: repeated rows add no rank, so its resamples sit far below the point
    boot = [bootstrap_ci(X, effective_rank, n_boot=100) for X in (draw(rng) for _ in range(10))]
    assert np.mean([low <= truth <= high for _, low, high in boot]) < 0.5


# ---------------------------------------------------------------- probes


def _two_clusters(n_per: int = 40, d: int = 16, noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    e = np.eye(d)[0]
    X = np.vstack([e + noise * RNG.normal(size=(n_per, d)), -e + noise * RNG.normal(size=(n_per, d))])
    return X, np.array(["a"] * n_per + ["b"] * n_per)


def test_knn_separated_clusters_and_random_labels():
    X, y = _two_clusters()
    assert knn_label_accuracy(X, y, k=5) == 1.0
    assert knn_label_accuracy(X, y, k=5, chunk_size=7) == 1.0
    Z = RNG.normal(size=(400, 32))
    y_rand = RNG.integers(0, 2, size=400)
    assert abs(knn_label_accuracy(Z, y_rand, k=10) - 0.5) < 0.1


def test_knn_vote_ties_go_to_nearest_class():
    neigh = np.array([[1, 0], [0, 1], [1, 1], [2, 0]])
    assert _vote(neigh, 3).tolist() == [1, 0, 1, 2]
    assert _vote(np.array([[0, 1, 1, 0]]), 2).tolist() == [0]


def test_knn_nan_cases(caplog):
    X, y = _two_clusters(n_per=3)
    with caplog.at_level(logging.WARNING):
        assert math.isnan(knn_label_accuracy(X, ["a"] * 6, k=2, label="one-class"))
        assert math.isnan(knn_label_accuracy(X, y, k=6))
    assert "one-class" in caplog.text


def test_retrieval_hand_built():
    docs = np.eye(3)
    queries = np.array([[1.0, 0.0, 0.0], [1.0, 0.5, 0.0], [0.0, 0.0, 1.0]])
    out = retrieval_scores(queries, docs, [{0}, {1}, {2, 0}])
    # ranks of relevant docs: q0 -> 1; q1 -> 2; q2 -> d2 at 1 and d0 at 2 (d0/d1 tie broken by index)
    assert out["acc@1"] == pytest.approx(2 / 3)
    assert out["ndcg@1"] == pytest.approx(2 / 3)
    assert out["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3) + 1) / 3)
    assert out["acc@10"] == 1.0
    assert out["mrr"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert out["n_queries"] == 3
    single = retrieval_scores(queries[:2], docs, [0, 1], ks=(1, 2))
    assert single["acc@1"] == single["ndcg@1"] == pytest.approx(0.5)
    assert single["ndcg@2"] == pytest.approx((1 + 1 / math.log2(3)) / 2)


def test_retrieval_ties_and_validation(caplog):
    docs = np.ones((3, 4))  # all equally similar to any query
    out = retrieval_scores(np.ones((1, 4)), docs, [2])
    assert out["acc@1"] == 0.0 and out["mrr"] == pytest.approx(1 / 3)
    with caplog.at_level(logging.WARNING):
        out = retrieval_scores(np.ones((2, 4)), docs, [set(), {0}])
    assert out["n_queries"] == 1 and out["acc@1"] == 1.0 and "dropping 1" in caplog.text
    with pytest.raises(ValueError):
        retrieval_scores(np.ones((1, 4)), docs, [3])


# ---------------------------------------------------------------- stats


def test_bootstrap_ci_contains_point_and_is_deterministic():
    values = RNG.normal(size=100)
    point, low, high = bootstrap_ci(values, np.mean, n_boot=500, seed=3)
    assert low <= point <= high and point == pytest.approx(values.mean())
    assert bootstrap_ci(values, np.mean, n_boot=500, seed=3) == (point, low, high)
    assert bootstrap_ci(values, np.mean, n_boot=500, seed=4) != (point, low, high)
    batched = bootstrap_ci(
        values, lambda s: s.mean(axis=-1), n_boot=500, seed=3, batched=True, max_batch_bytes=8000
    )
    assert batched == pytest.approx((point, low, high), abs=1e-12)


def test_bootstrap_of_pairwise_cosine_is_fast_and_nan_safe():
    X = RNG.normal(size=(200, 384)) + 0.1
    start = time.perf_counter()
    point, low, high = bootstrap_ci(X, mean_pairwise_cosine, n_boot=1000)
    assert time.perf_counter() - start < 2.0
    assert low < high and point == pytest.approx(_brute_pairwise(X), abs=1e-10)
    fast = pairwise_cosine_ci(X, n_boot=1000, seed=0)
    assert fast[0] == point and fast[1] <= point <= fast[2]
    assert pairwise_cosine_ci(X, n_boot=1000, seed=0) == fast
    nan3 = bootstrap_ci(X[:1], mean_pairwise_cosine)
    assert all(math.isnan(v) for v in nan3)
    assert all(math.isnan(v) for v in pairwise_cosine_ci(X[:1]))


def test_spearman_trend():
    out = spearman_trend([0.1, 0.2, 0.4, 0.9], [100, 200, 300, 400])
    assert out["rho"] == pytest.approx(1.0) and out["n_bins"] == 4
    out = spearman_trend([0.9, float("nan"), 0.5, 0.1], [1, 2, 3, 4])
    assert out["rho"] == pytest.approx(-1.0) and out["n_bins"] == 3
    assert math.isnan(spearman_trend([0.1, float("nan"), 0.3], [1, 2, 3])["rho"])
    assert math.isnan(spearman_trend([0.5, 0.5, 0.5], [1, 2, 3])["rho"])


# ---------------------------------------------------------------- hidden states / attention


def test_hf_ratio_identical_tokens_and_hand_computation():
    same = torch.randn(1, 1, 8).expand(2, 5, 8).to(torch.bfloat16)
    assert torch.allclose(high_frequency_energy_ratio(same), torch.zeros(2), atol=1e-6)

    hidden = torch.randn(2, 4, 3, dtype=torch.float64)
    hidden[0, 3] = float("nan")  # padding may hold anything
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    got = high_frequency_energy_ratio(hidden, mask, dtype=torch.float64)
    for b, n in ((0, 3), (1, 4)):
        X = hidden[b, :n].numpy()
        expected = ((X - X.mean(axis=0)) ** 2).sum() / (X**2).sum()
        assert got[b].item() == pytest.approx(expected, rel=1e-12)
    single = high_frequency_energy_ratio(hidden[1], mask[1])
    assert single.shape == (1,) and single[0].item() == pytest.approx(got[1].item(), rel=1e-5)


def test_hf_ratio_short_sequence_is_nan(caplog):
    with caplog.at_level(logging.WARNING):
        r = high_frequency_energy_ratio(torch.randn(2, 3, 4), torch.tensor([[1, 0, 0], [1, 1, 0]]))
    assert math.isnan(r[0].item()) and 0 < r[1].item() <= 1
    assert "high_frequency_energy_ratio" in caplog.text


def test_layerwise_high_frequency():
    layers = tuple(torch.randn(3, 5, 4) for _ in range(4))
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])
    out = layerwise_high_frequency(layers, mask)
    assert out.shape == (4, 3) and out.dtype == np.float64
    assert out[2] == pytest.approx(high_frequency_energy_ratio(layers[2], mask).numpy(), rel=1e-6)


def test_attention_entropy_uniform_and_one_hot():
    B, H, L = 2, 3, 6
    uniform = torch.full((B, H, L, L), 1.0 / L)
    assert torch.allclose(attention_entropy(uniform), torch.full((B, H), math.log(L)), atol=1e-6)
    assert torch.allclose(attention_entropy(uniform, normalized=True), torch.ones(B, H), atol=1e-6)
    one_hot = torch.zeros(B, H, L, L)
    one_hot[..., 0] = 1.0
    assert torch.allclose(attention_entropy(one_hot), torch.zeros(B, H), atol=1e-7)


def test_attention_entropy_padding_and_causal():
    L = 4
    mask = torch.tensor([[1, 1, 1, 0]])
    attn = torch.zeros(1, 2, L, L)
    attn[..., :3] = 1.0 / 3
    attn[:, :, 3] = float("nan")  # padding query row
    assert torch.allclose(attention_entropy(attn, mask), torch.full((1, 2), math.log(3)), atol=1e-6)
    assert torch.allclose(attention_entropy(attn, mask, normalized=True), torch.ones(1, 2), atol=1e-6)

    causal = torch.tril(torch.ones(L, L))
    causal = (causal / causal.sum(-1, keepdim=True)).expand(1, 1, L, L)  # row i uniform over i+1 keys
    expected = sum(math.log(i + 1) for i in range(L)) / L
    assert attention_entropy(causal).item() == pytest.approx(expected, rel=1e-6)
    assert attention_entropy(causal, normalized=True, causal=True).item() == pytest.approx(1.0, rel=1e-6)
    no_rows = attention_entropy(causal, torch.tensor([[1, 0, 0, 0]]), normalized=True, causal=True)
    assert math.isnan(no_rows.item())


def test_spearman_p_value_is_exact_for_few_bins():
    from llm_collapse.metrics.stats import spearman_trend

    trend = spearman_trend([0.1, 0.2, 0.3, 0.4, 0.5], [1, 2, 3, 4, 5])
    assert trend["rho"] == pytest.approx(1.0)
    assert trend["p_value"] == pytest.approx(2 / 120)  # only the two perfectly monotone orderings of 5 bins


def test_jackknife_interval_contains_the_centroid_distance_point():
    from llm_collapse.metrics.collapse import centroid_distance
    from llm_collapse.metrics.stats import bootstrap_ci, jackknife_ci

    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, 32)) + 0.5
    point, low, high = jackknife_ci(X, centroid_distance)
    assert low < point < high
    # the percentile bootstrap of this statistic is biased low by resampled duplicates
    assert bootstrap_ci(X, centroid_distance, seed=0)[2] < high


def test_mcnemar_exact_p_is_the_binomial_test_on_discordant_pairs():
    from math import comb

    from llm_collapse.metrics.stats import mcnemar_exact_p

    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.integers(0, 2, 30), rng.integers(0, 2, 30)
        n10, n01 = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
        n, k = n10 + n01, min(n10, n01)
        expected = min(
            1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n
        )  # symmetric: two-sided = 2 x tail
        assert mcnemar_exact_p(a, b) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact_p([1, 0, 1], [1, 0, 1]) == 1.0
    assert mcnemar_exact_p([1] * 8, [0] * 8) == pytest.approx(2 / 2**8)
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact_p([0.5], [1])


def test_holm_adjust_equals_the_step_down_procedure():
    from llm_collapse.metrics.stats import holm_adjust

    p = [0.01, 0.04, np.nan, 0.03, 0.005]
    finite = sorted((v, i) for i, v in enumerate(p) if not np.isnan(v))
    m, running, expected = len(finite), 0.0, [np.nan] * len(p)
    for rank, (value, index) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * value))
        expected[index] = running
    assert np.allclose(holm_adjust(p), expected, equal_nan=True)
    assert np.allclose(holm_adjust([0.5, 0.9]), [1.0, 1.0])
