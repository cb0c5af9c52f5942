"""Power of the exact McNemar test: how many paired queries a retrieval run needs, and what a run can detect.

Paired 0/1 outcomes of two methods on the same n queries: a query is discordant with probability ``psi``
(one method right, the other wrong), and the Acc@1 difference is ``d = p10 - p01`` with ``p10 + p01 = psi``.
The test (`llm_collapse.metrics.stats.mcnemar_exact_p`) conditions on the k discordant queries: n10 ~
Binomial(k, p10 / psi), two-sided exact binomial test against 1/2. Power is summed exactly over k ~
Binomial(n, psi) and n10, no normal approximation (the counts are small).

Decisions: ``psi`` is a planning assumption, not a measurement: at least |d| (all discordant queries one
way, the most favourable case); the sizing script (`experiments/study/retrieval_power.py`) tabulates several.
``alpha`` is per test; Holm's correction across a table makes the first-ranked test run at alpha / m
(`holm_level`): no row of an m-row table can survive unless its smallest p-value clears alpha / m, so the
difference a table can detect at all is ``detectable_difference(n, family_size=m)`` (20 queries: 0.37 at
0.05, 0.52 at 0.05 / 8, best case psi = |d|).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import stats as sps


@functools.lru_cache(maxsize=4096)
def _rejecting_counts(k: int, alpha: float) -> np.ndarray:
    """The n10 in 0..k for which the exact two-sided binomial test of n10 of k against 1/2 rejects at alpha."""
    counts = np.arange(k + 1)
    p = np.minimum(1.0, 2 * np.minimum(sps.binom.cdf(counts, k, 0.5), sps.binom.sf(counts - 1, k, 0.5)))
    return counts[p <= alpha]


def mcnemar_power(n: int, difference: float, discordance: float, alpha: float = 0.05) -> float:
    """Probability that the exact McNemar test on n paired queries rejects at ``alpha``.

    Args:
        n: Paired queries.
        difference: True Acc@1 difference d (either sign).
        discordance: Probability psi that a query is discordant; must be >= |d|.
        alpha: Two-sided level of the one test.
    """
    d, psi = abs(float(difference)), float(discordance)
    if not 0 <= d <= psi <= 1:
        raise ValueError(f"need 0 <= |difference| <= discordance <= 1, got d={difference}, psi={discordance}")
    if psi == 0:
        return 0.0
    share = (psi + d) / (2 * psi)  # P(n10 | discordant)
    power = 0.0
    for k in range(1, n + 1):
        rejecting = _rejecting_counts(k, alpha)
        if len(rejecting):
            power += sps.binom.pmf(k, n, psi) * sps.binom.pmf(rejecting, k, share).sum()
    return float(power)


def holm_level(alpha: float, m: int) -> float:
    """The level of the first-ranked of m Holm tests, alpha / m (Holm 1979): the smallest p must clear it."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be an integer >= 1 (tests in the Holm family), got {m!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return float(alpha) / int(m)


def detectable_difference(
    n: int,
    discordance: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    step: float = 0.005,
    family_size: int = 1,
) -> float:
    """Smallest |d| (on a grid of ``step``) that n paired queries detect with ``power``.

    ``discordance=None`` takes psi = |d| (every discordant query one way: the best case); otherwise
    psi = max(discordance, |d|). ``family_size=m`` tests at the Holm level ``holm_level(alpha, m)`` of
    the first-ranked of m tests (1: alpha itself). NaN when no difference up to 1 reaches the power.
    """
    alpha = holm_level(alpha, family_size)
    for d in np.arange(step, 1 + step / 2, step):
        psi = d if discordance is None else max(discordance, d)
        if mcnemar_power(n, d, min(psi, 1.0), alpha) >= power:
            return float(round(d, 6))
    return float("nan")


def queries_needed(
    difference: float, discordance: float, alpha: float = 0.05, power: float = 0.8, limit: int = 2000
) -> int | None:
    """Smallest n whose exact McNemar test detects ``difference`` with ``power`` (None above ``limit``).

    Power is not monotone in n for an exact test (the attainable levels jump), so this is the first n that
    reaches it and every n above it is checked up to ``n + 10`` too.
    """
    for n in range(2, limit + 1):
        if all(mcnemar_power(m, difference, discordance, alpha) >= power for m in range(n, n + 11)):
            return n
    return None
