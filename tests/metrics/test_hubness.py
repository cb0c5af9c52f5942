"""`llm_collapse.metrics.hubness` and `probes.knn_neighbours`: every quantity against pure-Python loops
(cosines, neighbour sets, occurrence counts, a hand-written skewness, the bootstrap replayed draw by draw),
plus a geometry whose hub is known."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats as scipy_stats

import llm_collapse.metrics.hubness as hub_mod
from llm_collapse.metrics.hubness import (
    chance_longer_share,
    hubness,
    hubness_ci,
    k_occurrence,
    length_neighbour_summary,
    longer_neighbour_share,
    neighbour_lengths,
)
from llm_collapse.metrics.probes import _vote, knn_correct, knn_neighbours


def _cos(a, b) -> float:
    dot = sum(float(x) * float(y) for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(float(x) ** 2 for x in a)) * math.sqrt(sum(float(y) ** 2 for y in b)))


def _brute_neighbours(X, k, groups=None):
    """Other-group rows sorted by (-cosine, index), first k: nested loops, no numpy algebra."""
    n = len(X)
    groups = list(range(n)) if groups is None else list(groups)
    out = []
    for i in range(n):
        others = [j for j in range(n) if groups[j] != groups[i]]
        others.sort(key=lambda j: (-_cos(X[i], X[j]), j))
        out.append(others[:k])
    return np.array(out)


def _brute_k_occurrence(neighbours, n):
    counts = Counter(int(j) for row in neighbours for j in row)
    return [counts.get(j, 0) for j in range(n)]


def _brute_skew(values) -> float:
    """Population skewness by hand: (1/n) sum (x - mean)^3 / ((1/n) sum (x - mean)^2)^(3/2)."""
    n = len(values)
    mean = sum(values) / n
    m2 = sum((v - mean) ** 2 for v in values) / n
    m3 = sum((v - mean) ** 3 for v in values) / n
    return m3 / m2**1.5


def _percentile_interval(point, boot, alpha=0.05):
    low, high = np.percentile(np.asarray(boot, dtype=float), [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return (point, low, high)


def _tied_data(seed, n=36):
    """Rows +-1 in 16 dims, scaled by 1, 2 or 4, drawn from 12 sign patterns: unit rows have entries
    +-1/4, so every cosine is a multiple of 1/8 computed exactly in any summation order (exact ties, also
    through BLAS). Integer lengths with repeats (length ties) and groups."""
    rng = np.random.default_rng(seed)
    base = rng.choice([-1.0, 1.0], size=(12, 16))
    X = base[rng.integers(0, 12, size=n)] * rng.choice([1.0, 2.0, 4.0], size=(n, 1))
    lengths = rng.choice([16, 32, 64, 128], size=n)
    groups = rng.integers(0, 8, size=n)
    return X, lengths, groups


def _spokes(m):
    """m orthogonal unit 'spokes' e_1..e_m plus their centroid direction c at index 0.

    cos(e_i, c) = 1/sqrt(m) > 0 = cos(e_i, e_j), so with k = 1 every spoke's neighbour is c (k-occurrence
    m = n - 1); c's own neighbours are all tied at 1/sqrt(m) and go to the lowest index, spoke 1."""
    X = np.zeros((m + 1, m))
    X[0] = 1.0
    X[1:] = np.eye(m)
    return X


# --- knn_neighbours ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 3, 5])
def test_knn_neighbours_matches_brute_force_with_ties_and_groups(seed, k):
    X, _, groups = _tied_data(seed)
    np.testing.assert_array_equal(knn_neighbours(X, k), _brute_neighbours(X, k))
    expected = _brute_neighbours(X, k, groups)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    sims = np.sort(np.where(groups[:, None] == groups[None, :], -np.inf, U @ U.T), axis=1)[:, ::-1]
    assert (sims[:, k - 1] == sims[:, k]).any()  # the k-th place is tied for some item: ties matter
    np.testing.assert_array_equal(knn_neighbours(X, k, groups=groups), expected)
    np.testing.assert_array_equal(knn_neighbours(X, k, groups=groups, chunk_size=5), expected)
    assert not (groups[expected] == groups[:, None]).any()  # own group excluded


def test_knn_neighbours_random_continuous_data():
    X = np.random.default_rng(7).normal(size=(50, 8))
    np.testing.assert_array_equal(knn_neighbours(X, 5, chunk_size=9), _brute_neighbours(X, 5))


@pytest.mark.parametrize("seed", range(3))
def test_knn_correct_votes_on_knn_neighbours(seed):
    X, _, groups = _tied_data(seed)
    labels = np.random.default_rng(seed).integers(0, 3, size=len(X))
    order = knn_neighbours(X, 4, groups=groups)
    expected = (_vote(labels[order], 3) == labels).astype(int)
    np.testing.assert_array_equal(knn_correct(X, labels, k=4, groups=groups), expected)


def test_knn_neighbours_bad_arguments_raise_one_line():
    X = np.random.default_rng(0).normal(size=(6, 3))
    for call in (
        lambda: knn_neighbours(X, 0),
        lambda: knn_neighbours(X, 6),  # n <= k: only 5 candidates
        lambda: knn_neighbours(X, 3, groups=[0, 0, 0, 0, 1, 1]),  # group 0 items see only 2 rows
        lambda: knn_neighbours(X, 2, groups=[0, 1]),
        lambda: knn_neighbours(X, 2, chunk_size=0),
    ):
        with pytest.raises(ValueError) as err:
            call()
        assert "\n" not in str(err.value)


# --- per-item quantities -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_longer_share_and_neighbour_lengths_match_loops(seed):
    X, lengths, groups = _tied_data(seed)
    nb = knn_neighbours(X, 5, groups=groups)
    expected_lengths = [[int(lengths[j]) for j in row] for row in nb]
    np.testing.assert_array_equal(neighbour_lengths(nb, lengths), expected_lengths)
    expected_share = [sum(lengths[j] > lengths[i] for j in row) / 5 for i, row in enumerate(nb)]
    np.testing.assert_allclose(longer_neighbour_share(nb, lengths), expected_share)


def test_equal_length_is_not_longer():
    nb = np.array([[1, 2], [0, 2], [0, 1]])
    np.testing.assert_allclose(longer_neighbour_share(nb, [5, 5, 9]), [0.5, 0.5, 0.0])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("use_groups", [False, True])
def test_chance_longer_share_matches_pair_loop(seed, use_groups):
    rng = np.random.default_rng(seed)
    n = 30
    lengths = rng.choice([8.0, 16.0, 16.0, 32.5, 64.0], size=n)
    groups = rng.integers(0, 6, size=n) if use_groups else None
    g = list(range(n)) if groups is None else list(groups)
    expected = []
    for i in range(n):
        cands = [j for j in range(n) if g[j] != g[i]]
        expected.append(sum(lengths[j] > lengths[i] for j in cands) / len(cands))
    np.testing.assert_allclose(chance_longer_share(lengths, groups), expected)


def test_chance_longer_share_without_candidates_is_nan():
    share = chance_longer_share([1, 2, 3], groups=["a", "a", "a"])
    assert np.isnan(share).all()


@pytest.mark.parametrize("seed", range(4))
def test_k_occurrence_and_hubness_match_loops(seed):
    X, _, groups = _tied_data(seed)
    k = 5
    nb = knn_neighbours(X, k, groups=groups)
    occ = k_occurrence(nb, len(X))
    expected = _brute_k_occurrence(nb, len(X))
    np.testing.assert_array_equal(occ, expected)
    h = hubness(occ, k)
    assert h["skewness"] == pytest.approx(_brute_skew(expected), rel=1e-12)
    assert h["skewness"] == pytest.approx(scipy_stats.skew(expected, bias=True), rel=1e-12)
    assert h["top_hub_share"] == pytest.approx(max(expected) / (len(X) * k))


def test_known_hub_at_the_centre_of_orthogonal_spokes():
    m = 9
    X = _spokes(m)
    n = m + 1
    nb = knn_neighbours(X, 1)
    assert nb[1:, 0].tolist() == [0] * m  # every spoke's nearest neighbour is the centre
    assert nb[0, 0] == 1  # the centre's neighbours all tie; lowest index wins
    occ = k_occurrence(nb, n)
    assert occ.tolist() == [m, 1] + [0] * (m - 1)
    h = hubness(occ, 1)
    assert h["top_hub_share"] == pytest.approx((n - 1) / n)
    assert h["skewness"] == pytest.approx(_brute_skew([m, 1] + [0] * (m - 1)))
    assert h["skewness"] > 2  # strongly right-skewed
    lengths = np.array([512] + [32] * m)  # the centre is the longest text
    np.testing.assert_allclose(longer_neighbour_share(nb, lengths), [0.0] + [1.0] * m)


def test_no_hubs_gives_nan_skewness(caplog):
    nb = np.array([[1], [2], [0]])  # a 3-cycle: everyone occurs once
    h = hubness(k_occurrence(nb, 3), 1)
    assert "skewness is NaN" in caplog.text
    assert math.isnan(h["skewness"])
    assert h["top_hub_share"] == pytest.approx(1 / 3)


# --- intervals -----------------------------------------------------------------------------------------


def _brute_hubness_boot(nb, n, k, n_boot, seed):
    """Replay the documented draws: resampled query rows, k-occurrence recounted with a Counter."""
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    occ = _brute_k_occurrence(nb, n)
    top = occ.index(max(occ))
    skews, shares = [], []
    for rows in idx:
        counts = _brute_k_occurrence([nb[r] for r in rows], n)
        skews.append(_brute_skew(counts))
        shares.append(counts[top] / (n * k))
    return skews, shares


@pytest.mark.parametrize("max_elements", [1 << 22, 97])  # one chunk, and many uneven chunks
def test_hubness_ci_replays_the_bootstrap_by_hand(monkeypatch, max_elements):
    monkeypatch.setattr(hub_mod, "_MAX_BOOT_ELEMENTS", max_elements)
    X = np.random.default_rng(3).normal(size=(25, 4))
    k, n_boot = 3, 60
    nb = knn_neighbours(X, k)
    out = hubness_ci(nb, 25, k, n_boot=n_boot, seed=11)
    skews, shares = _brute_hubness_boot(nb, 25, k, n_boot, 11)
    occ = _brute_k_occurrence(nb, 25)
    point = _brute_skew(occ)
    bias = sum(skews) / n_boot - point  # bias-corrected percentile interval: shift every resample by it
    expected = _percentile_interval(point, [v - bias for v in skews])
    np.testing.assert_allclose(out["skewness"], expected, rtol=1e-12)
    np.testing.assert_allclose(out["top_hub_share"], _percentile_interval(max(occ) / 75, shares), rtol=1e-12)


def test_hubness_ci_contains_point_and_is_reproducible():
    X = np.random.default_rng(5).normal(size=(200, 16))
    nb = knn_neighbours(X, 5)
    a = hubness_ci(nb, 200, 5, n_boot=300, seed=1)
    assert a == hubness_ci(nb, 200, 5, n_boot=300, seed=1)
    assert a != hubness_ci(nb, 200, 5, n_boot=300, seed=2)
    for point, low, high in a.values():
        assert low <= point <= high and low < high


def test_hubness_ci_without_hubs_is_nan():
    out = hubness_ci(np.array([[1], [2], [0]]), 3, 1, n_boot=20)
    assert all(math.isnan(v) for v in out["skewness"])


@pytest.mark.parametrize("use_groups", [False, True])
def test_length_summary_matches_loops(use_groups):
    X, lengths, groups = _tied_data(4, n=40)
    groups = groups if use_groups else None
    k, n_boot, seed = 3, 50, 9
    nb = knn_neighbours(X, k, groups=groups)
    out = length_neighbour_summary(nb, lengths, groups=groups, n_boot=n_boot, seed=seed)
    assert list(out) == sorted(set(int(v) for v in lengths)) and all(type(key) is int for key in out)
    n = len(X)
    share = [sum(lengths[j] > lengths[i] for j in row) / k for i, row in enumerate(nb)]
    occ = _brute_k_occurrence(nb, n)
    chance = chance_longer_share(lengths, groups)  # itself checked against a pair loop above
    for length, row in out.items():
        items = [i for i in range(n) if lengths[i] == length]
        assert row["n"] == len(items)
        # both intervals resample this length's items: the draws of stats.bootstrap_ci, replayed
        draws = np.random.default_rng(seed).integers(0, len(items), size=(n_boot, len(items)))
        for key, per_item in (("longer_share", share), ("mean_k_occurrence", occ)):
            vals = [per_item[i] for i in items]
            boot = [sum(vals[d] for d in draw) / len(items) for draw in draws]
            np.testing.assert_allclose(row[key], _percentile_interval(sum(vals) / len(items), boot))
        assert row["chance_longer_share"] == pytest.approx(sum(chance[i] for i in items) / len(items))
    total = sum(row["n"] * row["mean_k_occurrence"][0] for row in out.values())
    assert total == pytest.approx(n * k)  # k-occurrences sum to n k


def test_length_summary_on_the_known_hub():
    X = _spokes(9)
    lengths = np.array([512] + [32] * 9)
    out = length_neighbour_summary(knn_neighbours(X, 1), lengths, n_boot=100)
    assert out[32]["longer_share"] == (1.0, 1.0, 1.0)
    assert out[32]["chance_longer_share"] == pytest.approx(1 / 9)
    assert out[512]["mean_k_occurrence"][0] == 9.0
    assert out[512]["longer_share"][0] == 0.0


# --- bad input -----------------------------------------------------------------------------------------


def test_bad_input_raises_one_line():
    nb = np.array([[1, 2], [0, 2], [0, 1]])
    calls = [
        lambda: hubness([2, 2, 2], 0),  # k < 1
        lambda: hubness([2, 2, 2], 1),  # sum != n k
        lambda: hubness([], 1),
        lambda: k_occurrence(nb, 2),  # index 2 outside a pool of 2
        lambda: k_occurrence(nb, 0),
        lambda: k_occurrence(np.zeros((3, 0), dtype=int), 3),  # k = 0
        lambda: k_occurrence(nb.astype(float), 3),
        lambda: longer_neighbour_share(nb, [1, 2]),  # shape mismatch
        lambda: longer_neighbour_share(nb, [1, 2, float("nan")]),
        lambda: neighbour_lengths(nb, [[1, 2, 3]]),
        lambda: chance_longer_share([1, 2, 3], groups=[0, 1]),
        lambda: hubness_ci(nb, 3, 1),  # k does not match the columns
        lambda: hubness_ci(nb[:2], 3, 2),  # not every pool item is a query
        lambda: hubness_ci(nb, 3, 2, alpha=1.5),
        lambda: hubness_ci(nb, 3, 2, n_boot=0),
        lambda: length_neighbour_summary(nb, [1, 2, 3, 4]),
    ]
    for call in calls:
        with pytest.raises(ValueError) as err:
            call()
        assert "\n" not in str(err.value)
