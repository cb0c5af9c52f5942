"""Exact McNemar power against a simulation with the test itself (`mcnemar_exact_p`) and a brute-force sum."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from llm_collapse.metrics.power import detectable_difference, holm_level, mcnemar_power, queries_needed
from llm_collapse.metrics.stats import mcnemar_exact_p


@pytest.mark.parametrize(("n", "d", "psi"), [(24, 0.25, 0.35), (40, 0.15, 0.2), (30, 0.0, 0.3)])
def test_power_equals_the_rejection_rate_of_simulated_paired_queries(n, d, psi):
    rng = np.random.default_rng(0)
    draws, rejections = 4000, 0
    p10, p01 = (psi + d) / 2, (psi - d) / 2
    for _ in range(draws):
        kind = rng.choice(3, size=n, p=[p10, p01, 1 - psi])  # 0: a right b wrong, 1: a wrong b right, 2: tie
        a = np.where(kind == 0, 1, np.where(kind == 1, 0, 1))
        b = np.where(kind == 0, 0, np.where(kind == 1, 1, 1))
        rejections += mcnemar_exact_p(a, b) <= 0.05
    assert mcnemar_power(n, d, psi) == pytest.approx(rejections / draws, abs=0.025)


def test_sizes_and_detectable_differences_are_consistent():
    n = queries_needed(0.3, 0.35)
    assert mcnemar_power(n, 0.3, 0.35) >= 0.8 > mcnemar_power(n // 2, 0.3, 0.35)
    d = detectable_difference(24)
    assert mcnemar_power(24, d, d) >= 0.8 > mcnemar_power(24, d - 0.005, d - 0.005)
    assert mcnemar_power(24, 0.0, 0.3) <= 0.05  # the exact test keeps its level under H0
    with pytest.raises(ValueError, match="discordance"):
        mcnemar_power(24, 0.3, 0.2)


def _brute_force_power(n, d, alpha):
    """Power with psi = |d| (every discordant query one way): sum over k discordant and n10 of them,
    scipy's exact binomial test called on each (k, n10) directly."""
    power = 0.0
    for k in range(1, n + 1):
        for n10 in range(k + 1):
            if sps.binomtest(n10, k, 0.5).pvalue <= alpha:
                power += sps.binom.pmf(k, n, d) * sps.binom.pmf(n10, k, 1.0)
    return power


def test_holm_level_and_the_detectable_difference_at_it():
    assert holm_level(0.05, 8) == 0.05 / 8 and holm_level(0.05, 1) == 0.05
    for bad in [(0.05, 0), (0.05, 2.0), (0.05, True), (0.0, 3), (1.0, 3)]:
        with pytest.raises(ValueError):
            holm_level(*bad)
    # the README's "20 queries detect only differences of about 0.37" and issue 43's 0.52 at 0.05 / 8
    assert detectable_difference(20) == 0.37
    assert detectable_difference(20, family_size=8) == detectable_difference(20, alpha=0.05 / 8) == 0.52
    for d, alpha in [(0.37, 0.05), (0.52, 0.05 / 8)]:
        assert _brute_force_power(20, d, alpha) >= 0.8 > _brute_force_power(20, d - 0.005, alpha)
