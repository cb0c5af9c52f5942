"""Uncertainty and trend statistics over per-bin metric values.

Bootstrap (percentile interval): with ``theta = statistic(data)`` and B resamples ``data*_b`` of the
n rows drawn with replacement (``numpy.random.default_rng(seed)``)::

    (point, low, high) = (theta, Q_{alpha/2}(theta*_b), Q_{1-alpha/2}(theta*_b))

where Q is the empirical quantile (``numpy.percentile``, linear interpolation) of the finite
``theta*_b``.

Spearman trend across bins: ``rho, p = scipy.stats.spearmanr(positions, values)`` after dropping bins
whose value or position is NaN; fewer than 3 bins left, or a constant series, gives NaN.

Decisions and gotchas:

- Rows are resampled, so for an (n, d) group one resample is n embeddings and the statistic
  (e.g. ``mean_pairwise_cosine``) sees duplicates, which it counts as distinct items with cosine 1.
  That is the standard nonparametric bootstrap; it makes a leave-one-out kNN probe optimistic
  (a duplicate is its own neighbour), so do not bootstrap ``knn_label_accuracy`` this way.
- Speed: the indices for all resamples are drawn at once (``(n_boot, n)`` integers), so the result
  depends only on ``seed``, ``n`` and ``n_boot``. A per-row statistic is called once per resample; an
  O(n d) statistic at n = 200, d = 384 runs 1000 resamples in ~0.2 s. ``batched=True`` instead hands
  the statistic stacks ``(b, n, ...)`` of resamples, chunked to at most ``max_batch_bytes``.
- Duplicates bias statistics over pairs or spectra. A resample of n rows has about n/e repeated
  items, so ``mean_pairwise_cosine`` on it is inflated by roughly (1 - theta)/n (visible when the
  true spread is small, e.g. near-random embeddings, where the naive interval can miss theta), and
  ``effective_rank`` drops sharply (repeated rows add no rank). For pairwise cosine use
  ``pairwise_cosine_ci``: same resamples, but pairs of copies of one original item are excluded::

      theta*_b = (||sum_i w_i x_i||^2 - sum_i w_i^2) / (n^2 - sum_i w_i^2),   w_b = resample counts

  (over multinomial counts, E[numerator] = (n-1)^2 theta and E[denominator] = (n-1)^2). Do not
  bootstrap ``effective_rank`` by rows (its interval is the jackknife's, ``effective_rank_ci``); compare
  bins at equal n. ``centroid_distance`` is
  pulled down the same way (duplicates move the resample centroid towards them), by O(1/n): harmless
  when the interval is O(1/sqrt(n)) wide (real, heterogeneous bins), but in near-random groups the
  naive interval can exclude the point. Means of per-row values (``statistic=np.mean``) are unbiased.
- Paired contrasts (a method vs ``base`` on the same texts) resample or leave out *items*, applying one draw
  to both members of each pair: ``paired_jackknife_ci`` is what runs store for set-level statistics
  (`llm_collapse.metrics.contrasts` holds the procedures behind the readings; the paired bootstraps that
  runs before 2026-12-06 stored are gone with their last caller).
- A NaN point estimate gives a NaN interval without resampling. Non-finite resample values are
  dropped from the quantiles (with a warning when any were dropped).
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as sps

from llm_collapse.metrics.collapse import (
    effective_rank,
    effective_rank_leave_one_out,
    mean_pairwise_cosine,
    normalize_rows,
)
from llm_collapse.metrics.contrasts import Contrast, jackknife, mcnemar_p
from llm_collapse.metrics.proportions import paired_counts

logger = logging.getLogger(__name__)


def _resample_values(
    data: np.ndarray, statistic: Callable, idx: np.ndarray, batched: bool, max_batch_bytes: int
) -> np.ndarray:
    """Statistic of every resample ``data[idx[b]]``: (n_boot, n) indices -> (n_boot,) float64."""
    n_boot, n = idx.shape
    if not batched:
        return np.array([statistic(data[row]) for row in idx], dtype=np.float64)
    per_resample = max(1, data[:1].nbytes * n)
    step = max(1, int(max_batch_bytes // per_resample))
    parts = [np.asarray(statistic(data[idx[s : s + step]]), dtype=np.float64) for s in range(0, n_boot, step)]
    return np.concatenate(parts).reshape(n_boot)


def bootstrap_ci(
    data: Sequence[float] | np.ndarray,
    statistic: Callable,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    batched: bool = False,
    max_batch_bytes: int = 64 * 2**20,
) -> tuple[float, float, float]:
    """Percentile bootstrap confidence interval, resampling the rows of ``data``.

    Args:
        data: (n,) values or (n, d) rows (e.g. one bin's embeddings).
        statistic: Maps an array shaped like ``data`` to a float; with ``batched=True`` it maps a stack
            ``(b, n, ...)`` to ``(b,)``.
        n_boot: Number of resamples.
        alpha: Two-sided level; the interval is the [alpha/2, 1 - alpha/2] percentile range.
        seed: Seed of ``numpy.random.default_rng``; equal seeds give equal intervals.
        batched: Call ``statistic`` on stacks of resamples instead of one at a time.
        max_batch_bytes: Upper bound on one stack's size when ``batched``.

    Returns:
        ``(point, low, high)``; all NaN when the point estimate is NaN or no resample is finite.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    data = np.asarray(data)
    n = data.shape[0]
    point = float(statistic(data[None])[0]) if batched else float(statistic(data))
    if not np.isfinite(point) or n == 0:
        return (point, float("nan"), float("nan"))
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))  # (n_boot, n)
    boot = _resample_values(data, statistic, idx, batched, max_batch_bytes)  # (n_boot,)
    return percentile_interval(point, boot, alpha)


def jackknife_ci(data: Sequence[float] | np.ndarray, statistic: Callable) -> tuple[float, float, float]:
    """Delete-one (jackknife) interval ``point +- t_{n-1} * se_jack`` (`llm_collapse.metrics.contrasts.jackknife`,
    which also gives its t-test: what runs store for set-level rows).

    For statistics that resampled duplicates bias, such as the mean distance to the group's own centroid
    (a duplicated row pulls the centroid towards itself, so bootstrap resamples sit systematically low and
    the percentile interval can exclude the point estimate). Deterministic; needs n >= 3. Runs before
    2026-12-08 stored ``point +- z * se_jack`` (`llm_collapse.reporting.significance` reads those with t too).

    Returns:
        ``(point, low, high)``; NaN interval when n < 3 or the point is NaN.
    """
    c = jackknife(np.asarray(data), statistic)
    return (c.estimate, c.low, c.high)


def effective_rank_ci(
    X: np.ndarray, center: bool = False, alpha: float = 0.05, label: str | None = None
) -> tuple[float, float, float]:
    """Delete-one jackknife interval of ``effective_rank``: ``point +- t_{n-1} * se_jack`` over the rows.

    What it covers: ``theta_n = E[effective_rank of n texts drawn from the bin's population]``. The effective
    rank grows with n (it is at most min(n, d)), so the population value (n -> infinity) is out of reach of
    any interval at n << d; theta_n is what comparisons at equal n compare, and the point is unbiased for it.
    Why the jackknife: a bootstrap resample repeats ~n/e rows, which add no rank, so its values sit far below
    the point (the percentile interval can exclude it); leaving one row out keeps distinct rows, and the
    statistic is a smooth function of the singular values, where the jackknife variance is consistent and,
    by the Efron-Stein inequality, conservative in expectation. ``t_{n-1}`` rather than z: at n = 10 z
    covered 0.89 in the synthetic check; t gives ~0.92-0.98 at n = 10-100 (tests/metrics/test_metrics.py).

    Returns:
        ``(point, low, high)``; NaN interval when n < 3 or the point is NaN.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    U = normalize_rows(X)  # (n, d)
    n = U.shape[0]
    point = effective_rank(U, center=center, label=label)
    if not np.isfinite(point) or n < 3:
        return (point, float("nan"), float("nan"))
    values = effective_rank_leave_one_out(U, center=center, label=label)  # (n,)
    if not np.isfinite(values).all():
        return (point, float("nan"), float("nan"))
    se = float(np.sqrt((n - 1) / n * np.sum((values - values.mean()) ** 2)))
    t = float(sps.t.ppf(1 - alpha / 2, n - 1))
    return (point, point - t * se, point + t * se)


def percentile_interval(point: float, boot: np.ndarray, alpha: float) -> tuple[float, float, float]:
    """Percentile interval of the finite resample values ``boot`` (n_boot,) around ``point``."""
    finite = np.isfinite(boot)
    if not finite.all():
        logger.warning(
            "bootstrap: %d of %d resamples were not finite; dropped", int((~finite).sum()), boot.size
        )
    if not finite.any():
        return (point, float("nan"), float("nan"))
    low, high = np.percentile(boot[finite], [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return (point, float(low), float(high))


def pairwise_cosine_ci(
    X: np.ndarray, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0, label: str | None = None
) -> tuple[float, float, float]:
    """Bootstrap interval of ``mean_pairwise_cosine`` that ignores pairs of duplicated items.

    Uses the same resample indices as ``bootstrap_ci`` with the same seed, as count vectors, so all
    resamples cost one (n_boot, n) @ (n, d) product.

    Args:
        X: (n, d) embeddings of one group.
        n_boot: Number of resamples.
        alpha: Two-sided level.
        seed: Seed of ``numpy.random.default_rng``.
        label: Group name for warnings.

    Returns:
        ``(point, low, high)``; NaN interval when the point is NaN (n < 2).
    """
    U = normalize_rows(X)  # (n, d)
    n = U.shape[0]
    point = mean_pairwise_cosine(U, label=label)
    if not np.isfinite(point):
        return (point, float("nan"), float("nan"))
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))  # (n_boot, n)
    parts = []
    for w in _count_blocks(idx, n):
        num, den = _dedup_pair_sums(U, w)
        with np.errstate(invalid="ignore", divide="ignore"):
            parts.append(np.where(den > 0, num / den, np.nan))
    return percentile_interval(point, np.concatenate(parts), alpha)


def _count_blocks(idx: np.ndarray, n: int):
    """Yields the resamples ``idx`` (n_boot, n) as float64 count vectors, in blocks (b, n) of <= 4e6 cells."""
    step = max(1, 4_000_000 // n)
    for s in range(0, idx.shape[0], step):
        block = idx[s : s + step]  # (b, n)
        offsets = (np.arange(block.shape[0]) * n)[:, None]
        yield np.bincount((block + offsets).ravel(), minlength=block.size).reshape(-1, n).astype(np.float64)


def _dedup_pair_sums(U: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum of cosines over resampled pairs of distinct original items, and their number, per count vector.

    ``U`` (n, d) unit rows, ``w`` (b, n) counts -> ``(num, den)`` (b,) each (formula in the module docstring).
    """
    sq_norms = np.einsum("ij,ij->i", U, U)  # (n,) ~= 1
    S = w @ U  # (b, d)
    num = np.einsum("bd,bd->b", S, S) - (w * w) @ sq_norms
    den = U.shape[0] ** 2 - (w * w).sum(axis=1)
    return num, den


def paired_jackknife(X: np.ndarray, Y: np.ndarray, statistic: Callable) -> Contrast:
    """Jackknife contrast of ``statistic(X) - statistic(Y)`` over paired rows (same item in row i of both):
    leaving item i out drops row i from both (`llm_collapse.metrics.contrasts.jackknife` over the stacked
    (n, 2, ...) pairs; t(n - 1) interval and test). Needs n >= 3."""
    X, Y = np.asarray(X), np.asarray(Y)
    _paired_n(X, Y)
    pairs = np.stack([X, Y], axis=1)  # (n, 2, ...)
    return jackknife(pairs, lambda p: statistic(p[:, 0]) - statistic(p[:, 1]))


def paired_jackknife_ci(X: np.ndarray, Y: np.ndarray, statistic: Callable) -> tuple[float, float, float]:
    """`paired_jackknife` as ``(point, low, high)``; NaN interval when n < 3 or the point is NaN."""
    c = paired_jackknife(X, Y, statistic)
    return (c.estimate, c.low, c.high)


def mcnemar_exact_p(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided exact McNemar test (the sign test on discordant pairs) for paired 0/1 outcomes.

    Under H0 (same accuracy) an item that one side gets right and the other wrong is equally likely either
    way, so the count ``n10`` of (a right, b wrong) among the ``n10 + n01`` discordant items is
    Binomial(n10 + n01, 1/2); the p-value is scipy's two-sided exact binomial test. Exact, so fit for the
    small paired counts of passkey/needle queries (the chi-squared version is not). 1.0 without discordant
    items; NaN for empty inputs.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if _paired_n(a, b) == 0:
        return float("nan")
    _, n10, n01, _ = paired_counts(a, b)  # ValueError unless both are 0/1
    return mcnemar_p(n10, n01)


def holm_adjust(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control across a table's rows).

    Sorted ascending, the i-th smallest of m is multiplied by (m - i), made monotone with a running maximum
    and capped at 1; a row survives at level alpha when its adjusted p <= alpha. NaN entries (rows without
    a test) are left NaN and do not count in m.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    m = len(finite)
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adjusted
    return out


def _paired_n(a: np.ndarray, b: np.ndarray) -> int:
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"paired data need the same items: {a.shape[0]} rows vs {b.shape[0]}")
    return int(a.shape[0])


def spearman_trend(bin_values: Sequence[float], bin_positions: Sequence[float]) -> dict[str, float]:
    """Spearman rank correlation between a per-bin metric and the bins' positions (e.g. mean length).

    Args:
        bin_values: (n_bins,) metric per bin; NaN bins are dropped.
        bin_positions: (n_bins,) position of each bin (any monotone coordinate: mean tokens, bin index).

    Returns:
        ``{"rho", "p_value", "n_bins"}`` with ``n_bins`` the bins used; rho and p are NaN with < 3 bins
        or a constant series. The p-value is exact (all orderings) up to 8 bins, scipy's beyond.
    """
    v = np.asarray(bin_values, dtype=np.float64).reshape(-1)
    x = np.asarray(bin_positions, dtype=np.float64).reshape(-1)
    if v.shape != x.shape:
        raise ValueError(f"{v.size} values for {x.size} positions")
    keep = np.isfinite(v) & np.isfinite(x)
    v, x = v[keep], x[keep]
    out = {"rho": float("nan"), "p_value": float("nan"), "n_bins": float(v.size)}
    if v.size < 3:
        logger.warning("spearman_trend needs >= 3 finite bins, got %d; returning NaN", v.size)
        return out
    if np.ptp(v) == 0 or np.ptp(x) == 0:
        logger.warning("spearman_trend: constant values or positions; returning NaN")
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.spearmanr(x, v)
    out["rho"] = float(res.statistic)
    out["p_value"] = _exact_spearman_p(x, v, out["rho"]) if v.size <= _EXACT_MAX_BINS else float(res.pvalue)
    return out


# Up to 8 bins the exact permutation p-value is cheap (8! = 40320 orderings); scipy's t approximation is
# badly anti-conservative there (it gives p ~ 1e-24 for a perfect 5-bin trend, whose exact p is 2/120).
_EXACT_MAX_BINS = 8


def _exact_spearman_p(x: np.ndarray, v: np.ndarray, rho: float) -> float:
    """Two-sided exact p: the share of all orderings of ``v`` whose |rho| is at least the observed one."""
    rank_x = sps.rankdata(x)
    rhos = np.array(
        [sps.spearmanr(rank_x, perm).statistic for perm in itertools.permutations(sps.rankdata(v))]
    )
    return float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))
