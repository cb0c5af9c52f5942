"""Exact McNemar power against a simulation with the test itself (`mcnemar_exact_p`)."""

from __future__ import annotations

import numpy as np
import pytest

from llm_collapse.metrics.power import detectable_difference, mcnemar_power, queries_needed
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
