"""`centroid_decomposition` against plain loops over the rows (fast, CPU only)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from llm_collapse.metrics.collapse import centroid, global_centroid_distance
from llm_collapse.metrics.decomposition import DECOMPOSITION_KEYS, centroid_decomposition


def _groups(seed: int = 0, sizes=(5, 9, 14), d: int = 12) -> list[np.ndarray]:
    """Unnormalised groups with different means, so offsets are not ~0."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0) + 2.0 * rng.normal(size=d) for n in sizes]


def _unit(row: np.ndarray) -> list[float]:
    norm = math.sqrt(sum(float(v) ** 2 for v in row))
    return [float(v) / norm for v in row]


def _sq(a, b) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def test_the_identity_holds_to_1e_12():
    groups = _groups()
    g = centroid(np.concatenate(groups))
    for X in groups:
        s = centroid_decomposition(X, g).summary()
        assert set(s) == set(DECOMPOSITION_KEYS)
        total = s["within_length_sq_spread"] + s["length_centroid_offset_sq"]
        assert abs(s["global_centroid_sq_distance"] - total) <= 1e-12
        assert s["length_centroid_offset_sq"] > 1e-3  # the groups really are offset: both terms matter
    # and for any reference point, not only the pooled centroid
    other = np.random.default_rng(5).normal(size=12)
    s = centroid_decomposition(groups[0], other).summary()
    total = s["within_length_sq_spread"] + s["length_centroid_offset_sq"]
    assert abs(s["global_centroid_sq_distance"] - total) <= 1e-12


def test_per_item_and_offset_values_equal_loops():
    groups = _groups(seed=1)
    pooled = [_unit(r) for X in groups for r in X]
    d = len(pooled[0])
    g = [sum(r[k] for r in pooled) / len(pooled) for k in range(d)]  # unit rows' mean, not re-normalised
    for X in groups:
        rows = [_unit(r) for r in X]
        c = [sum(r[k] for r in rows) / len(rows) for k in range(d)]
        dec = centroid_decomposition(X, np.array(g))
        np.testing.assert_allclose(dec.global_sq, [_sq(r, g) for r in rows], rtol=0, atol=1e-13)
        np.testing.assert_allclose(dec.within_sq, [_sq(r, c) for r in rows], rtol=0, atol=1e-13)
        assert dec.offset_sq == pytest.approx(_sq(c, g), abs=1e-13)
        s = dec.summary()
        assert s["global_centroid_sq_distance"] == pytest.approx(
            np.mean([_sq(r, g) for r in rows]), abs=1e-13
        )
        assert s["within_length_sq_spread"] == pytest.approx(np.mean([_sq(r, c) for r in rows]), abs=1e-13)


def test_agrees_with_the_papers_metric_and_pairwise_cosine():
    X = _groups(seed=2)[2]
    g = centroid(np.concatenate(_groups(seed=2)))
    dec = centroid_decomposition(X, g)
    # the paper's metric is the mean of the square roots of the per-item values (same rows, same g)
    assert np.sqrt(dec.global_sq).mean() == pytest.approx(global_centroid_distance(X, g), abs=1e-13)
    # within spread of unit rows = (n-1)/n (1 - mean off-diagonal cosine), brute force
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    n = len(U)
    S = U @ U.T
    pairwise = (S.sum() - np.trace(S)) / (n * (n - 1))
    assert dec.summary()["within_length_sq_spread"] == pytest.approx((n - 1) / n * (1 - pairwise), abs=1e-13)


def test_pooled_law_of_total_variance():
    groups = _groups(seed=3, sizes=(3, 7, 20, 4))
    U = np.concatenate([X / np.linalg.norm(X, axis=1, keepdims=True) for X in groups])
    g = U.mean(axis=0)
    pooled = 0.0
    for X in groups:
        s = centroid_decomposition(X, g).summary()
        pooled += len(X) * (s["within_length_sq_spread"] + s["length_centroid_offset_sq"])
    assert pooled == pytest.approx(sum(float((u - g) @ (u - g)) for u in U), abs=1e-11)
    assert pooled == pytest.approx(len(U) * (1 - g @ g), abs=1e-11)


def test_rows_are_normalised_and_g_is_used_as_given():
    X = _groups(seed=4)[1]
    g = np.random.default_rng(4).normal(size=12) * 0.3
    scaled = X * np.arange(1, len(X) + 1)[:, None]
    a, b = centroid_decomposition(X, g), centroid_decomposition(scaled, g)
    np.testing.assert_allclose(a.global_sq, b.global_sq, atol=1e-13)
    # g is not normalised: a rescaled g changes the values
    assert not np.allclose(centroid_decomposition(X, 2 * g).global_sq, a.global_sq)


def test_one_item_gives_nan_spread_and_offset_with_a_warning(caplog):
    X = np.random.default_rng(6).normal(size=(1, 4))
    g = np.array([0.5, 0.0, 0.0, 0.0])
    with caplog.at_level(logging.WARNING):
        dec = centroid_decomposition(X, g, label="m/base/128")
    s = dec.summary()
    assert math.isnan(s["within_length_sq_spread"]) and math.isnan(s["length_centroid_offset_sq"])
    assert np.isnan(dec.within_sq).all()
    u = X[0] / np.linalg.norm(X[0])
    assert s["global_centroid_sq_distance"] == pytest.approx(float((u - g) @ (u - g)), abs=1e-14)
    assert "m/base/128" in caplog.text


def test_dimension_mismatch_raises():
    with pytest.raises(ValueError, match="dim 3 but the embeddings have dim 4"):
        centroid_decomposition(np.ones((3, 4)), np.ones(3))
