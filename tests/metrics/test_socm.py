"""SOCM (`llm_collapse.metrics.socm`) against independent float64 computations that share none of its code: the
eigenvalues of Sigma_x Sigma_y, numpy's covariance, the closed-form values of the authors' tests (anchors §12.2),
its invariances, its bound by the concentrations, and the streamed moments of a 32k-token text."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_collapse.metrics.socm import (
    MeanTooSmall,
    TextCloud,
    TokenMoments,
    bures_wasserstein_sq,
    cloud_terms,
    concentration,
    pair_terms,
)


def _reference(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float, float]:
    """(d_mu, d_sigma, SOCM, c_x, c_y) the plain way: numpy's population covariance of the unit-mean tokens, and
    tr((A^1/2 B A^1/2)^1/2) as the summed square roots of the eigenvalues of A B (the two are similar)."""

    def cloud(z):
        z = np.asarray(z, dtype=np.float64)
        scale = np.linalg.norm(z.mean(axis=0))
        unit = z / scale
        return unit.mean(axis=0), np.cov(unit, rowvar=False, bias=True)

    (mu_x, a), (mu_y, b) = cloud(x), cloud(y)
    root_trace = np.sqrt(np.clip(np.linalg.eigvals(a @ b).real, 0, None)).sum()
    bw = max(0.0, np.trace(a) + np.trace(b) - 2 * root_trace)
    d_mu = np.sum((mu_x - mu_y) ** 2) / 4
    return d_mu, bw / 4, (1 - d_mu) * bw / 4, np.trace(a), np.trace(b)


def _clouds(rng, n_x: int, n_y: int, d: int, shift: float = 1.0):
    x = rng.normal(size=(n_x, d)) + shift * rng.normal(size=d)
    y = rng.normal(size=(n_y, d)) * rng.uniform(0.5, 2.0, size=d) + shift * rng.normal(size=d)
    return x, y


@pytest.mark.parametrize(("n_x", "n_y", "d"), [(5, 9, 16), (40, 70, 12), (7, 60, 20), (3, 3, 8)])
def test_pair_terms_and_concentration_equal_an_independent_computation(n_x, n_y, d):
    rng = np.random.default_rng(n_x * 100 + n_y)
    for _ in range(3):
        x, y = _clouds(rng, n_x, n_y, d)
        d_mu, d_sigma, socm, c_x, c_y = _reference(x, y)
        terms = pair_terms(x, y)
        assert terms.d_mu == pytest.approx(d_mu, rel=1e-10, abs=1e-12)
        assert terms.d_sigma == pytest.approx(d_sigma, rel=1e-7, abs=1e-10)
        assert terms.socm == pytest.approx(socm, rel=1e-7, abs=1e-10)
        assert concentration(x) == pytest.approx(c_x, rel=1e-10)
        assert concentration(y) == pytest.approx(c_y, rel=1e-10)
        assert terms.socm <= (c_x + c_y) / 4 + 1e-12  # BW^2 <= tr A + tr B


def test_the_cross_gram_route_equals_the_eigh_route():
    """n < d: the nuclear norm of the n_x x n_y cross-Gram; forced through eigh it gives the same numbers, to the
    eigh route's own rounding on a rank-deficient Sigma (its ~1e-16 eigenvalues pass through a square root)."""
    rng = np.random.default_rng(1)
    x, y = _clouds(rng, 6, 11, 30)
    fast = cloud_terms(TextCloud.of(x), TextCloud.of(y))
    assert TextCloud.of(x).tokens is not None and TextCloud.of(y).tokens is not None
    slow = cloud_terms(*(TextCloud.of_moments(TokenMoments(30).add(z)) for z in (x, y)))
    np.testing.assert_allclose(fast, slow, rtol=1e-6, atol=1e-12)


def test_closed_form_bures_wasserstein_values():
    """The authors' test values (tests/test_distance.py at 81dc47e), and the diagonal case."""
    cases = [
        ([[2, 1], [1, 3]], [[5, 2], [2, 2]], 12 - 2 * math.sqrt(20 + 2 * math.sqrt(30))),
        ([[3, 1], [1, 2]], [[2, 1], [1, 5]], 12 - 2 * math.sqrt(15) - 2 * math.sqrt(3)),
        (np.diag([4, 9]), np.diag([1, 16]), 2.0),
    ]
    for a, b, expected in cases:
        assert bures_wasserstein_sq(np.array(a, float), np.array(b, float)) == pytest.approx(expected, rel=1e-12)
    a, b = np.array([0.3, 2.0, 5.0]), np.array([1.1, 0.2, 5.0])
    expected = float(np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    assert bures_wasserstein_sq(np.diag(a), np.diag(b)) == pytest.approx(expected, rel=1e-12)


def test_invariances():
    rng = np.random.default_rng(2)
    x, y = _clouds(rng, 50, 80, 10)
    assert pair_terms(x, x) == pytest.approx((0.0, 0.0, 0.0), abs=1e-10)  # a text against itself
    np.testing.assert_allclose(pair_terms(x, y), pair_terms(y, x), rtol=1e-9)  # symmetric
    np.testing.assert_allclose(pair_terms(3.7 * x, y), pair_terms(x, y), rtol=1e-9)  # a text's tokens scaled
    rotation, _ = np.linalg.qr(rng.normal(size=(10, 10)))
    np.testing.assert_allclose(pair_terms(x @ rotation, y @ rotation), pair_terms(x, y), rtol=1e-8)
    np.testing.assert_allclose(pair_terms(x[::-1], rng.permutation(y)), pair_terms(x, y), rtol=1e-9)
    assert concentration(2.5 * x) == pytest.approx(concentration(x), rel=1e-12)


def test_chunks_and_empty_chunks_give_the_same_moments():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(37, 6)) + 5.0
    whole = TokenMoments(6).add(x)
    chunked = TokenMoments(6)
    for part in (x[:1], x[1:1], x[1:20], x[20:]):
        chunked.add(part)
    assert chunked.n == 37
    np.testing.assert_allclose(chunked.mean, whole.mean, rtol=1e-14)
    np.testing.assert_allclose(chunked.covariance, whole.covariance, rtol=1e-12)


def test_a_32k_token_text_streams_to_the_two_pass_covariance():
    """32768 x 640 states around a large offset (where the one-pass M2 - mu mu^T loses digits), streamed in
    chunks of 4096: the covariance equals the two-pass one to 1e-9 relative."""
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(32768, 640)) * 0.05 + 40.0).astype(np.float32)
    moments = TokenMoments(640)
    for start in range(0, len(x), 4096):
        moments.add(x[start : start + 4096])
    two_pass = np.cov(x.astype(np.float64), rowvar=False, bias=True)
    assert np.max(np.abs(moments.covariance - two_pass)) <= 1e-9 * np.max(np.abs(two_pass))


def test_a_single_token_and_a_zero_mean_text():
    assert concentration(np.ones((1, 4))) == 0.0  # n = 1: Sigma = 0
    tokens = np.array([[1.0, 2.0], [-1.0, -2.0]])  # the mean token is 0: no unit-mean scale
    with pytest.raises(MeanTooSmall, match="no unit-mean scale"):
        concentration(tokens)
    with pytest.raises(ValueError, match="shape"):
        TokenMoments(3).add(np.ones((2, 4)))
