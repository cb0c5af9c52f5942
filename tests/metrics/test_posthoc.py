"""Post-hoc baselines against independent numpy computations on small random matrices (fast, CPU only)."""

from __future__ import annotations

import numpy as np
import pytest

from llm_collapse.metrics.posthoc import (
    all_but_the_top,
    apply_whitening,
    center_per_length,
    default_abtt_components,
    fit_whitening,
    split_halves,
)


def _X(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Unnormalised, anisotropic rows (distinct variances, so principal directions are well defined)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * np.linspace(3.0, 0.2, d) + rng.normal(size=d)


def _unit(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _top_eigenvectors(C: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenvalues (descending) and eigenvectors (columns) of the covariance of rows ``C``."""
    lam, V = np.linalg.eigh(np.cov(C, rowvar=False))
    order = np.argsort(lam)[::-1][:k]
    return lam[order], V[:, order]


# ---------------------------------------------------------------- centring per length


def test_center_per_length_equals_a_loop():
    X = _X(11, 5, seed=1)
    lengths = [128, 256, 128, 512, 256, 128, 512, 256, 256, 128, 512]
    out = center_per_length(X, lengths)
    U = _unit(X)
    expected = np.empty_like(U)
    for length in set(lengths):
        members = [i for i, v in enumerate(lengths) if v == length]
        mean = sum(U[i] for i in members) / len(members)
        for i in members:
            expected[i] = U[i] - mean
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-14)


def test_center_per_length_rejects_small_or_degenerate_lengths():
    X = _X(5, 4)
    with pytest.raises(ValueError, match=r"length 3 has 1"):
        center_per_length(X, [1, 1, 2, 2, 3])
    with pytest.raises(ValueError, match="one label per row"):
        center_per_length(X, [1, 1, 2, 2])
    same = np.vstack([X[:3], np.tile(X[3], (2, 1))])
    with pytest.raises(ValueError, match="zero row"):
        center_per_length(same, [1, 1, 1, 2, 2])


# ---------------------------------------------------------------- all-but-the-top


@pytest.mark.parametrize(("n", "d", "D"), [(40, 8, 2), (9, 20, 3), (30, 6, 0)])
def test_all_but_the_top_equals_a_loop_over_eigh_eigenvectors(n, d, D):
    X = _X(n, d, seed=n)
    C = _unit(X) - _unit(X).mean(axis=0)
    expected = C.copy()
    _, V = _top_eigenvectors(C, D)
    for j in range(D):
        u = V[:, j]
        for i in range(n):
            expected[i] -= (u @ C[i]) * u
    np.testing.assert_allclose(all_but_the_top(X, D), expected, rtol=0, atol=1e-12)


def test_all_but_the_top_default_and_range():
    assert [default_abtt_components(d) for d in (8, 384, 1024, 2304)] == [1, 4, 10, 23]
    X = _X(30, 120, seed=2)  # default D = 1
    C = _unit(X) - _unit(X).mean(axis=0)
    _, V = _top_eigenvectors(C, 1)
    np.testing.assert_allclose(all_but_the_top(X), C - np.outer(C @ V[:, 0], V[:, 0]), atol=1e-12)
    with pytest.raises(ValueError, match="n_components < min"):
        all_but_the_top(_X(5, 20), 4)  # 5 centred rows span 4 directions: removing all leaves 0
    with pytest.raises(ValueError, match="n_components < min"):
        all_but_the_top(_X(50, 6), 6)


# ---------------------------------------------------------------- whitening


def test_whitening_equals_zca_from_eigh_when_n_exceeds_d():
    fit, held = _X(60, 6, seed=3), _X(25, 6, seed=4)
    U = _unit(fit)
    lam, V = np.linalg.eigh(np.cov(U, rowvar=False))
    W = V @ np.diag(lam**-0.5) @ V.T
    expected = (_unit(held) - U.mean(axis=0)) @ W.T
    np.testing.assert_allclose(apply_whitening(fit_whitening(fit), held), expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize(("n", "d", "k"), [(12, 30, None), (12, 30, 5), (60, 6, None)])
def test_whitened_fit_rows_have_identity_covariance_on_the_retained_subspace(n, d, k):
    X = _X(n, d, seed=n + d)
    params = fit_whitening(X, n_components=k)
    keep = min(n - 1, d) if k is None else k
    assert params.components.shape == (keep, d)
    cov = np.cov(apply_whitening(params, X), rowvar=False)  # (d, d)
    B = params.components
    np.testing.assert_allclose(B @ cov @ B.T, np.eye(keep), atol=1e-8)
    np.testing.assert_allclose(cov, B.T @ B, atol=1e-8)  # nothing outside the subspace
    # the retained subspace is the top-k eigenspace of the covariance, found independently
    _, V = _top_eigenvectors(_unit(X), keep)
    np.testing.assert_allclose(V @ V.T, B.T @ B, atol=1e-8)


def test_whitening_on_the_eval_half_matches_pca_whitening_geometry():
    # n_fit <= d: ZCA output and PCA-whitened coordinates (top n_fit - 1 eigenvectors of the fit covariance)
    # have the same Gram matrix, hence the same cosines, distances and collapse metrics
    X = _X(40, 50, seed=7)
    ids = [f"doc{i}" for i in range(40)]
    in_fit = split_halves(ids, seed=11)
    fit, held = X[in_fit], X[~in_fit]
    U = _unit(fit)
    lam, V = _top_eigenvectors(U, len(U) - 1)
    Z = (_unit(held) - U.mean(axis=0)) @ V / np.sqrt(lam)
    out = apply_whitening(fit_whitening(fit), held)
    np.testing.assert_allclose(out @ out.T, Z @ Z.T, rtol=1e-7, atol=1e-7)


def test_whitening_rejects_too_few_fit_items_and_bad_dims():
    with pytest.raises(ValueError, match=">= 2 fit items"):
        fit_whitening(_X(1, 5))
    with pytest.raises(ValueError, match="n_components <= 9"):
        fit_whitening(_X(10, 30), n_components=10)
    with pytest.raises(ValueError, match="all identical"):
        fit_whitening(np.tile(_X(1, 5), (4, 1)))
    with pytest.raises(ValueError, match=">= 1 or None"):
        fit_whitening(_X(10, 3), n_components=0)
    with pytest.raises(ValueError, match="fitted in dim 5"):
        apply_whitening(fit_whitening(_X(10, 5)), _X(3, 6))


# ---------------------------------------------------------------- split by item id


def test_split_halves_is_by_id_balanced_and_order_free():
    ids = [f"doc{i}" for i in range(21)]
    mask = split_halves(ids, seed=3)
    assert mask.sum() == 10  # 21 // 2 fit, 11 eval
    perm = np.random.default_rng(0).permutation(21)
    np.testing.assert_array_equal(split_halves([ids[i] for i in perm], seed=3), mask[perm])
    # the same document at several lengths (prefix design) lands in one half everywhere
    repeated = ids * 3
    np.testing.assert_array_equal(split_halves(repeated, seed=3), np.tile(mask, 3))
    assert not np.array_equal(split_halves(ids, seed=4), mask)  # the seed matters


def test_split_halves_is_stable_across_processes():
    # a fixed expectation: Python's salted hash() would change this from run to run
    assert split_halves(list("abcdef"), seed=0).tolist() == [True, False, True, False, True, False]
    with pytest.raises(ValueError, match=">= 2 distinct item ids"):
        split_halves(["a", "a"], seed=0)
