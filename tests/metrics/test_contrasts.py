"""One procedure per outcome type (llm_collapse.metrics.contrasts), each against an independent computation:
scipy's and statsmodels' paired t-test, t interval and TOST, statsmodels' exact McNemar, a brute-force sign-flip
test, and Newcombe's interval at the TOST level."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.weightstats import DescrStatsW, ttost_paired

from llm_collapse.metrics.contrasts import (
    binary_interaction,
    mean_difference,
    paired_binary,
    paired_t,
    t_from_p,
)
from llm_collapse.metrics.proportions import newcombe_paired_interval


def _continuous(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 150))
    b = rng.normal(size=n)
    return b + rng.normal(loc=rng.normal(scale=0.02), scale=rng.uniform(0.005, 0.1), size=n), b


@pytest.mark.parametrize("seed", range(8))
def test_paired_t_equals_scipy_and_statsmodels(seed):
    a, b = _continuous(seed)
    got = paired_t(a, b)
    low, high = DescrStatsW(a - b).tconfint_mean(alpha=0.05)
    assert (got.estimate, got.low, got.high) == pytest.approx(((a - b).mean(), low, high), abs=1e-12)
    assert got.p == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-9)
    assert got.n == len(a) and got.test == "paired t"
    for margin in (0.005, 0.01, 0.05):
        assert got.equivalence_p(margin) == pytest.approx(ttost_paired(a, b, -margin, margin)[0], abs=1e-10)


@pytest.mark.parametrize("seed", range(8))
def test_a_stored_t_row_gives_back_the_t_interval_and_tost_whatever_interval_it_stored(seed):
    """Older runs stored a bootstrap interval beside the paired t-test's p: (estimate, p, n) fix the t-test's
    standard error, so the t interval and statsmodels' TOST come back exactly."""
    a, b = _continuous(seed)
    d = a - b
    bootstrap = (d.mean() - 0.3, d.mean() + 0.1)  # any stored interval: p decides
    got = t_from_p(float(d.mean()), float(sps.ttest_rel(a, b).pvalue), len(d), *bootstrap)
    low, high = DescrStatsW(d).tconfint_mean(alpha=0.05)
    assert (got.low, got.high) == pytest.approx((low, high), rel=1e-7, abs=1e-12)
    assert got.equivalence_p(0.01) == pytest.approx(ttost_paired(a, b, -0.01, 0.01)[0], abs=1e-8)
    # without a usable p the stored interval is taken as the t interval
    again = t_from_p(float(d.mean()), math.nan, len(d), low, high)
    assert (again.low, again.high) == pytest.approx((low, high), abs=1e-12)
    assert again.p == pytest.approx(sps.ttest_1samp(d, 0).pvalue, rel=1e-9)


def _table(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 300))
    kind = rng.choice(4, size=n, p=rng.dirichlet([6, 1, 1, 4]))
    return (kind < 2).astype(int), np.isin(kind, (0, 2)).astype(int)


@pytest.mark.parametrize("seed", range(12))
def test_paired_binary_is_newcombe_and_the_exact_mcnemar_and_its_tost_inverts_the_interval(seed):
    a, b = _table(seed)
    got = paired_binary(a, b)
    assert (got.estimate, got.low, got.high) == pytest.approx(newcombe_paired_interval(a, b), abs=1e-12)
    table = [[int(((a == 1) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum())],
             [int(((a == 0) & (b == 1)).sum()), int(((a == 0) & (b == 0)).sum())]]  # fmt: skip
    assert got.p == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-9)
    for margin in (0.05, 0.1, 0.2):
        p = got.equivalence_p(margin)
        for level in (0.01, 0.025, 0.05, 0.1, 0.25):
            _, low, high = newcombe_paired_interval(a, b, alpha=2 * level)
            inside = -margin < low and high < margin
            assert inside == (p <= level) or abs(p - level) < 1e-8, (margin, level)


def test_sign_flip_interaction_is_the_brute_force_permutation_test_with_a_t_interval():
    d = np.array([1, -1, 2, 0, 1, 1, 0, -2, 1, 1, 2, 1], dtype=float)
    got = binary_interaction(d)
    nonzero = d[d != 0]
    sums = [abs(np.dot(signs, nonzero)) for signs in itertools.product((1, -1), repeat=len(nonzero))]
    assert got.p == pytest.approx(np.mean(np.array(sums) >= abs(nonzero.sum()) - 1e-12), abs=1e-12)
    low, high = DescrStatsW(d).tconfint_mean()
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-12) and got.test == "sign-flip"
    x = d + 5.0
    assert got.equivalence_p(0.5) == pytest.approx(
        ttost_paired(x, np.full_like(x, 5.0), -0.5, 0.5)[0], abs=1e-10
    )


def test_edges_are_nan_or_exact_not_errors():
    assert math.isnan(mean_difference(np.array([0.3])).p)
    flat = mean_difference(np.zeros(5))
    assert (flat.p, flat.low, flat.high, flat.equivalence_p(0.01)) == (1.0, 0.0, 0.0, 0.0)
    assert mean_difference(np.full(5, 0.02)).equivalence_p(0.01) == 1.0
    assert math.isnan(paired_binary(np.array([]), np.array([])).p)
    same = paired_binary(np.ones(30), np.ones(30))
    assert same.p == 1.0 and same.equivalence_p(0.1) < 0.05  # 30 concordant items: equivalent within 0.1
    with pytest.raises(ValueError, match="1-D vectors of one length"):
        paired_t(np.zeros(3), np.zeros(4))


def test_set_level_leave_one_out_values_from_per_item_terms_equal_the_embeddings_jackknife():
    """items.parquet keeps each item's mean cosine to the others and its squared distance to the length's
    centroid; from them alone the delete-one values of the pairwise cosine and the spread, and so their jackknife,
    equal what the embeddings give."""
    from llm_collapse.metrics.collapse import mean_pairwise_cosine, normalize_rows
    from llm_collapse.metrics.contrasts import (
        jackknife_from_leave_one_out,
        pairwise_cosine_leave_one_out,
        spread_leave_one_out,
    )
    from llm_collapse.metrics.stats import jackknife_ci
    from llm_collapse.tasks.items import embedding_quantities

    rng = np.random.default_rng(3)
    X = rng.normal(size=(25, 12)) + 0.4
    U = normalize_rows(X)
    per_item = embedding_quantities(X, None)
    spread = lambda V: float(np.mean(np.sum((V - V.mean(axis=0)) ** 2, axis=1)))  # noqa: E731
    for (point, loo), statistic in (
        (pairwise_cosine_leave_one_out(per_item["pairwise_cosine"]), mean_pairwise_cosine),
        (spread_leave_one_out(per_item["within_length_sq_spread"]), spread),
    ):
        brute = np.array([statistic(np.delete(U, k, axis=0)) for k in range(len(U))])
        assert point == pytest.approx(statistic(U), abs=1e-12)
        assert loo == pytest.approx(brute, abs=1e-12)
        contrast = jackknife_from_leave_one_out(point, loo)
        assert (contrast.low, contrast.high) == pytest.approx(jackknife_ci(U, statistic)[1:], abs=1e-12)


def test_independent_sum_of_two_groups_is_welchs_t_test():
    from scipy.stats import ttest_ind

    from llm_collapse.metrics.contrasts import independent_sum

    rng = np.random.default_rng(2)
    a, b = rng.normal(0.3, 1.0, 11), rng.normal(0.0, 2.0, 17)
    c = independent_sum([a, -b])
    welch = ttest_ind(a, b, equal_var=False)
    assert c.estimate == pytest.approx(a.mean() - b.mean()) and c.n == 28 and c.test == "Welch t"
    assert c.p == pytest.approx(welch.pvalue, rel=1e-9) and c.df == pytest.approx(welch.df, rel=1e-9)
    assert (c.low, c.high) == (pytest.approx(welch.confidence_interval().low, rel=1e-9),
                               pytest.approx(welch.confidence_interval().high, rel=1e-9))  # fmt: skip
    assert math.isnan(independent_sum([a, b[:1]]).p)  # a group of one item has no spread
