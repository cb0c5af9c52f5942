"""Paired contrasts: one documented procedure per outcome type, each with its interval, test and equivalence test.

Every reading of the reports (a change "survives", is "equivalent within ±m", or is "inconclusive") rests on a
`Contrast`. Which procedure gives it depends only on what the items are:

=========================  ==========================  =======================  ==============================
outcome                    estimate, 95% interval      difference test          equivalence within ±m (TOST)
=========================  ==========================  =======================  ==============================
continuous, per item       mean of the per-item        paired t (n - 1 df)      two one-sided t-tests
(distances, per-layer      differences, t interval                              (statsmodels ``ttost_paired``)
statistics)
paired 0/1 (correct or     difference of accuracies,   exact McNemar            Newcombe inversion: the least
not)                       Newcombe's method 10                                 alpha whose (1 - 2 alpha)
                                                                                interval lies inside (-m, m)
0/1 difference of          mean of d in {-2..2},       exact sign-flip          two one-sided t-tests on d
differences (interaction)  t interval
difference of independent  sum of the groups' means,   Welch t (Welch-          two one-sided t-tests
groups of per-item values  Welch t interval             Satterthwaite df)        (same df)
(bins design interaction)
set-level (pairwise        delete-one jackknife,       t = estimate / se        two one-sided t-tests
cosine, spread, offset,    estimate +- t se            (n - 1 df: jackknife t)  (n - 1 df)
SOCM's pair means)
stored row, no per-item    its stored interval         its stored p, else       two one-sided z-tests from the
data (older runs)                                      Wald from the interval   interval's half-widths
                                                       (set-level: jackknife t  (set-level: t, n - 1 df)
                                                       on its se)
=========================  ==========================  =======================  ==============================

Decisions:

- Per-item data give exact small-sample procedures; a bootstrap is never the basis of a verdict on per-item
  contrasts (its percentile limits move with the seed: a verdict read at Holm p = 0.037 from one seed held for
  about one seed in eight). Set-level statistics (one number per set of items) use the deterministic jackknife,
  so no verdict depends on a random seed; `llm_collapse.metrics.stats` keeps the bootstraps for describing
  one length's value.
- The Newcombe TOST p-value is the inversion of the interval family (its intervals nest as alpha grows, checked
  over 1,500 random tables), so ``p <= alpha`` exactly when the (1 - 2 alpha) interval lies inside the margins:
  the interval-inclusion test of `llm_collapse.metrics.proportions.tost_paired_proportions`, with a p-value
  that Holm's correction can use. Its level is approximate, as the interval's coverage is (that module's gotcha).
- A one-sided test at Holm level alpha/2 on each side is what "survives in the asked direction" means: the
  two-sided p and the sign of the estimate, read together (`llm_collapse.reporting.significance`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from llm_collapse.metrics.proportions import newcombe_from_counts, paired_counts, tost_newcombe_p

_Z = float(sps.norm.ppf(0.975))

EXACT_SIGN_FLIPS = 16
"""Up to this many nonzero items the sign-flip test enumerates every assignment; beyond, 20,000 seeded draws."""


@dataclass(frozen=True)
class Contrast:
    """A paired contrast (module docstring): estimate, unadjusted 95% interval, items, difference test.

    ``test`` is the short name of the difference test (``paired t``, ``McNemar``, ``sign-flip``, ``Welch t``,
    ``jackknife t``: set-level rows; ``paired Wald``: a stored interval without a p-value); ``se`` and ``df``
    give the equivalence test's scale (``df`` infinite: z), ``counts``
    the paired 0/1 table (e, f, g, h) for Newcombe's. Without ``se`` or ``counts`` the equivalence test uses
    the interval's half-widths.
    """

    estimate: float
    low: float
    high: float
    n: int
    test: str
    p: float
    se: float = math.nan
    df: float = math.inf
    counts: tuple[int, int, int, int] | None = None

    def equivalence_p(self, margin: float) -> float:
        """TOST p-value of the estimate against ±``margin`` (NaN where the contrast has no interval)."""
        if self.counts is not None:
            return tost_newcombe_p(self.counts, margin)
        if math.isfinite(self.se):
            return two_one_sided_p(self.estimate, self.se, self.df, margin)
        return interval_tost_p(self.estimate, self.low, self.high, margin)


def paired_t(a: np.ndarray, b: np.ndarray) -> Contrast:
    """Continuous per-item values of the same items: mean(a - b), its t interval and the paired t-test."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired values need two 1-D vectors of one length, got {a.shape} and {b.shape}")
    return mean_difference(a - b)


def mean_difference(d: np.ndarray, test: str = "paired t", p: float | None = None) -> Contrast:
    """mean(d) of per-item differences: t interval (n - 1 df) and the one-sample t-test of mean 0 (``p``
    replaces it, e.g. the sign-flip p of 0/1 differences, named by ``test``). Fewer than 2 items: NaN interval
    and test; zero spread: the interval is the point and p is 1 at 0, else 0."""
    d = np.asarray(d, dtype=np.float64)
    n = int(d.size)
    estimate = float(d.mean()) if n else math.nan
    if n < 2:
        return Contrast(estimate, math.nan, math.nan, n, test, math.nan if p is None else p)
    se = float(d.std(ddof=1) / math.sqrt(n))
    df = n - 1
    if se == 0:
        t_p = 1.0 if estimate == 0 else 0.0
        return Contrast(estimate, estimate, estimate, n, test, t_p if p is None else p, 0.0, df)
    half = float(sps.t.ppf(0.975, df)) * se
    t_p = float(2 * sps.t.sf(abs(estimate) / se, df))
    return Contrast(estimate, estimate - half, estimate + half, n, test, t_p if p is None else p, se, df)


def independent_sum(parts: list[np.ndarray]) -> Contrast:
    """The sum of the means of independent groups of per-item values (each group other items: the length bins
    of ``--design bins``), e.g. ``mean(d_L) - mean(d_S)`` with ``parts = [d_L, -d_S]``: a Welch t interval
    (Welch-Satterthwaite df) and test; ``n`` counts every item. Two groups give Welch's two-sample t-test of
    ``d_L`` against ``d_S``. A group of fewer than 2 items: NaN interval and test."""
    parts = [np.asarray(part, dtype=np.float64) for part in parts]
    estimate = float(sum(part.mean() for part in parts)) if all(part.size for part in parts) else math.nan
    n = int(sum(part.size for part in parts))
    if any(part.size < 2 for part in parts):
        return Contrast(estimate, math.nan, math.nan, n, "Welch t", math.nan)
    shares = [part.var(ddof=1) / part.size for part in parts]
    se = math.sqrt(sum(shares))
    if se == 0:
        return Contrast(estimate, estimate, estimate, n, "Welch t", 1.0 if estimate == 0 else 0.0, 0.0, n - 1)
    df = se**4 / sum(share**2 / (part.size - 1) for share, part in zip(shares, parts, strict=True))
    half = float(sps.t.ppf(0.975, df)) * se
    p = float(2 * sps.t.sf(abs(estimate) / se, df))
    return Contrast(estimate, estimate - half, estimate + half, n, "Welch t", p, se, df)


def paired_binary(a: np.ndarray, b: np.ndarray) -> Contrast:
    """Paired 0/1 outcomes: mean(a) - mean(b), Newcombe's interval, the exact McNemar test (NaN when empty)."""
    return binary_from_counts(paired_counts(a, b))


def binary_from_counts(counts: tuple[int, int, int, int]) -> Contrast:
    """`paired_binary` from the paired table (e, f, g, h): both right, only a right, only b right, neither."""
    counts = tuple(int(c) for c in counts)
    n = sum(counts)
    if n == 0:
        return Contrast(math.nan, math.nan, math.nan, 0, "McNemar", math.nan)
    estimate, low, high = newcombe_from_counts(*counts)
    return Contrast(estimate, low, high, n, "McNemar", mcnemar_p(counts[1], counts[2]), counts=counts)


def binary_interaction(d: np.ndarray, seed: int = 0) -> Contrast:
    """Differences of differences of 0/1 outcomes (values in -2..2): the mean, its t interval, the sign-flip
    test (`sign_flip_p`) and a t-based equivalence test on d."""
    return mean_difference(d, "sign-flip", sign_flip_p(d, seed))


def mcnemar_p(n10: int, n01: int) -> float:
    """Two-sided exact McNemar p from the discordant counts (1.0 without discordant items)."""
    if n10 + n01 == 0:
        return 1.0
    return float(sps.binomtest(n10, n10 + n01, 0.5, alternative="two-sided").pvalue)


def sign_flip_p(d: np.ndarray, seed: int = 0) -> float:
    """Two-sided sign-flip test of mean(d) = 0: the share of sign assignments of the nonzero values whose |sum|
    reaches the observed one. Exact: by enumeration up to `EXACT_SIGN_FLIPS` nonzero values, and for integer
    values (the 0/1 differences of differences, -2..2) at any n by convolving the null distribution of the sum;
    else 20,000 draws seeded by ``seed``. 1.0 when every value is 0; NaN when empty."""
    d = np.asarray(d, dtype=np.float64)
    if d.size == 0:
        return math.nan
    nonzero = d[d != 0]
    if nonzero.size == 0:
        return 1.0
    observed = abs(nonzero.sum())
    if nonzero.size <= EXACT_SIGN_FLIPS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=nonzero.size)))
        sums = np.abs(signs @ nonzero)
        return float(np.mean(sums >= observed - 1e-12))
    steps = np.abs(nonzero)
    if np.all(steps == np.round(steps)) and steps.sum() <= 1_000_000:
        return _integer_sign_flip_p(steps.astype(np.int64), int(round(observed)))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(20_000, nonzero.size))
    sums = np.abs(signs @ nonzero)
    return float((1 + np.sum(sums >= observed - 1e-12)) / (1 + len(sums)))


def _integer_sign_flip_p(steps: np.ndarray, observed: int) -> float:
    """P(|sum of s_i k_i| >= observed) for independent fair signs s_i and positive integers k_i, exactly: the
    sum's distribution is the convolution of the two-point distributions at ±k_i (index = sum + total)."""
    total = int(steps.sum())
    probability = np.zeros(2 * total + 1)
    probability[total] = 1.0
    for k in steps:
        probability = 0.5 * (np.roll(probability, k) + np.roll(probability, -k))  # no wrap: |sum| <= total
    sums = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, probability[sums >= observed].sum()))


def two_one_sided_p(estimate: float, se: float, df: float, margin: float) -> float:
    """TOST p of ``estimate`` against ±``margin`` with standard error ``se``: the larger of the two one-sided
    p-values, t with ``df`` degrees of freedom (z when infinite). Zero spread: 0 strictly inside, else 1."""
    if not (math.isfinite(estimate) and math.isfinite(se)):
        return math.nan
    if se == 0:
        return 0.0 if -margin < estimate < margin else 1.0
    dist = sps.norm if math.isinf(df) else sps.t(df)
    return max(float(dist.sf((estimate + margin) / se)), float(dist.sf((margin - estimate) / se)))


def interval_tost_p(estimate: float, low: float, high: float, margin: float) -> float:
    """TOST p from a 95% interval alone (a stored row without per-item data): each side's standard error is
    that side's half-width / 1.96, so an asymmetric interval keeps its asymmetry; a zero half-width means no
    spread on that side. NaN without an interval."""
    if not all(math.isfinite(x) for x in (estimate, low, high)):
        return math.nan
    sides = ((estimate + margin, estimate - low), (margin - estimate, high - estimate))  # (gap to H0, half)
    return max(
        (0.0 if gap > 0 else 1.0) if half <= 0 else float(sps.norm.sf(gap / (half / _Z)))
        for gap, half in sides
    )


def t_from_p(estimate: float, p: float, n: int, low: float, high: float) -> Contrast:
    """The paired t contrast a stored row implies: its estimate, its two-sided t-test ``p`` on ``n`` items.

    The t-test fixes the standard error, ``se = |estimate| / t_{n-1}^-1(1 - p/2)``, so the t interval and the
    t-based TOST follow exactly, whatever interval the row stored (runs before 2026-12-06 stored a paired
    percentile bootstrap). Where p cannot give it (estimate 0, p 0 or 1) the stored interval, taken as a t
    interval, does.
    """
    df = n - 1
    if n < 2 or not math.isfinite(estimate):
        return Contrast(estimate, low, high, n, "paired t", p)
    if math.isfinite(p) and 0 < p < 1 and estimate != 0:
        se = abs(estimate) / float(sps.t.isf(p / 2, df))
    elif math.isfinite(low) and math.isfinite(high):
        se = (high - low) / (2 * float(sps.t.ppf(0.975, df)))
    else:
        return Contrast(estimate, low, high, n, "paired t", p)
    if not math.isfinite(p):  # a row stored without its test (no spread): read as the t-test would
        p = (1.0 if estimate == 0 else 0.0) if se == 0 else float(2 * sps.t.sf(abs(estimate) / se, df))
    half = float(sps.t.ppf(0.975, df)) * se
    return Contrast(estimate, estimate - half, estimate + half, n, "paired t", p, se, df)


# --- set-level statistics from their per-item terms ------------------------------------------------------------


def pairwise_cosine_leave_one_out(per_item: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean pairwise cosine of n unit vectors and its n delete-one values, from each item's mean cosine to the
    others (``items.parquet``'s ``pairwise_cosine``): ``P = mean(pc)``, ``P_-k = (n P - 2 pc_k) / (n - 2)``."""
    return pair_mean_leave_one_out(per_item)


def pair_mean_leave_one_out(per_item: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean of a pair statistic over a regular design of pairs (every item in the same number r of pairs: all
    pairs, or a circulant sample) and its n delete-one values, from each item's mean over its pairs ``m_k``: the
    pairs' total is ``r sum(m) / 2`` over ``n r / 2`` pairs, and deleting item k removes its r pairs, so
    ``P = mean(m)`` and ``P_-k = (n P - 2 m_k) / (n - 2)`` whatever r. Linear in ``m``: differences of per-item
    means give the delete-one values of the difference."""
    pc = np.asarray(per_item, dtype=np.float64)
    n = pc.size
    point = float(pc.mean()) if n else math.nan
    if n < 3:  # no pair is left once an item of two is out
        return point, np.full(n, math.nan)
    return point, (n * point - 2 * pc) / (n - 2)


def spread_leave_one_out(per_item: np.ndarray) -> tuple[float, np.ndarray]:
    """The within-length spread of n unit vectors (mean squared distance to their centroid c, ``1 - |c|^2``) and its
    n delete-one values, from each item's squared distance ``sq_k = 1 - 2 u_k.c + |c|^2`` (``items.parquet``'s
    ``within_length_sq_spread``): ``|c_-k|^2 = (n^2 |c|^2 - 2 n u_k.c + 1) / (n - 1)^2``."""
    sq = np.asarray(per_item, dtype=np.float64)
    n = sq.size
    if n < 3:
        return (float(sq.mean()) if n else math.nan), np.full(n, math.nan)
    point = float(sq.mean())
    c2 = 1.0 - point
    dot = (1.0 + c2 - sq) / 2  # u_k . c
    return point, 1.0 - (n * n * c2 - 2 * n * dot + 1.0) / (n - 1) ** 2


JACKKNIFE_T = "jackknife t"
"""The test name of a set-level contrast: Student's t with n - 1 df on the delete-one jackknife's standard error."""


def jackknife_from_leave_one_out(point: float, loo: np.ndarray) -> Contrast:
    """The set-level contrast of a statistic (or a linear combination of statistics of the same items) from its
    n delete-one values: ``se = sqrt((n - 1)/n sum (loo - mean loo)^2)``, the interval ``point +- t_{n-1} se`` and
    the two-sided t-test with n - 1 df (`JACKKNIFE_T`). Student's t rather than z: at the study's n = 32 z made
    intervals ~4% too narrow, enough to flip a TOST (issue 76); `jackknife` computes the delete-one values."""
    loo = np.asarray(loo, dtype=np.float64)
    n = loo.size
    if n < 3 or not np.isfinite(loo).all():  # no interval from fewer than three items
        return Contrast(point, math.nan, math.nan, n, JACKKNIFE_T, math.nan)
    se = float(np.sqrt((n - 1) / n * np.sum((loo - loo.mean()) ** 2)))
    return t_contrast(point, se, n, JACKKNIFE_T)


def t_contrast(point: float, se: float, n: int, test: str) -> Contrast:
    """``point`` with standard error ``se`` read with Student's t on n - 1 df: interval, two-sided p, the TOST's
    scale."""
    df = n - 1
    if not (math.isfinite(point) and math.isfinite(se)) or df < 1:
        return Contrast(point, math.nan, math.nan, n, test, math.nan)
    if se == 0:
        return Contrast(point, point, point, n, test, 1.0 if point == 0 else 0.0, 0.0, df)
    half = float(sps.t.ppf(0.975, df)) * se
    p = float(2 * sps.t.sf(abs(point) / se, df))
    return Contrast(point, point - half, point + half, n, test, p, se, df)


def jackknife_from_interval(point: float, low: float, high: float, n: int) -> Contrast:
    """A set-level row stored before 2026-12-08 (the jackknife's normal interval, no p-value) read as today's:
    the standard error its interval implies, with t(n - 1)."""
    se = (high - low) / (2 * _Z) if math.isfinite(low) and math.isfinite(high) else math.nan
    return t_contrast(point, se, n, JACKKNIFE_T)


def jackknife(data: np.ndarray, statistic) -> Contrast:
    """`jackknife_from_leave_one_out` of ``statistic`` over the rows of ``data`` (its n delete-one values
    computed; needs n >= 3). For statistics that resampled duplicates bias, such as the mean distance to the
    group's own centroid (a duplicated row pulls the centroid towards itself, so bootstrap resamples sit low and
    a percentile interval can exclude the point). Deterministic."""
    data = np.asarray(data)
    n = data.shape[0]
    point = float(statistic(data))
    if not math.isfinite(point) or n < 3:
        return Contrast(point, math.nan, math.nan, n, JACKKNIFE_T, math.nan)
    keep = ~np.eye(n, dtype=bool)
    return jackknife_from_leave_one_out(
        point, np.array([statistic(data[keep[i]]) for i in range(n)], dtype=np.float64)
    )
