"""The kNN mechanism of length collapse: do long texts become everyone's neighbours (hubs)?

TempScale's argument: long texts sit near the centre of embedding space, so they fill the neighbour lists
of other texts and swing kNN votes. Inputs are the neighbour lists of ``knn_neighbours`` (``N_k(i)``, n
items, each its own query and part of the pool) and per-item lengths ``l``::

    longer_share(i)  = |{j in N_k(i) : l_j > l_i}| / k            (equal length is not longer)
    chance_share(i)  = |{j in C(i) : l_j > l_i}| / |C(i)|         C(i) = candidates: rows outside i's group
    N_k(j)           = |{i : j in N_k(i)}|                          k-occurrence; sum_j N_k(j) = n k
    skewness         = m3 / m2^(3/2),  m_r = (1/n) sum_j (N_k(j) - k)^r
    top_hub_share    = max_j N_k(j) / (n k)

(k-occurrence and its skewness as in Radovanovic, Nanopoulos & Ivanovic 2010, "Hubs in space", JMLR 11,
eq. for S_{N_k}.) ``chance_share`` is what ``longer_share`` would be with neighbours drawn at random from
the candidates: the shortest texts sit near 1 and the longest at 0 whatever the geometry, so compare the
two, not ``longer_share`` with 0.5. The mean k-occurrence over all items is exactly k; a length whose mean
is above k serves as a neighbour more often than its share of the pool.

Decisions and gotchas:

- Skewness is the biased (population-moment) estimator, ``scipy.stats.skew(..., bias=True)``, the
  default: the n k-occurrences are the whole pool, not a sample of it, and it is what Radovanovic et al.
  and scikit-hubness report (the bias correction, sqrt(n(n-1))/(n-2), is < 0.1% at n = 2000). A constant
  k-occurrence (no hubs at all) has 0/0 skewness: NaN.
- Hubness intervals (``hubness_ci``) bootstrap the *queries*: B resamples of the n rows of
  ``neighbours`` with replacement (``numpy.random.default_rng(seed).integers(0, n, (B, n))``, the draws of
  ``stats.bootstrap_ci``), the k-occurrence of every pool item recounted from the resampled rows, then the
  statistic. The pool and each query's neighbour list stay fixed: the interval covers which texts ask,
  not which texts could be answered (the pool is not re-drawn). Re-running kNN on resampled embeddings
  would instead let a duplicate be its own nearest neighbour (as ``stats`` notes for the kNN probe).
- The skewness interval is bias-corrected: the percentile interval of theta*_b shifted by the bootstrap
  bias estimate, ``(Q_lo - bias, Q_hi - bias)``, ``bias = mean_b(theta*_b) - theta`` (Efron & Tibshirani
  1993, sec. 10.2). Without it the interval is wrong where hubness is weak: a resample lists a duplicated
  query's neighbours twice, which adds count noise, and count noise is right-skewed, so theta*_b sits well
  above theta. Simulated (k = 5, Gaussian clouds, 95% level, 120-300 data sets each): bias +0.30 at
  n = 200 and +0.24 at n = 1000 (sampling sd 0.18 and 0.09); coverage of E[skewness] by the plain
  percentile interval 0.69 and 0.00 (the point falls outside), bias-corrected 0.97 and 0.94. Where hubness
  is strong (skewness ~2, n = 600) the bias is small but the interval is too narrow (bootstrap sd 0.18 vs
  sampling sd 0.26, coverage 0.81): the pool is not re-drawn, and which texts exist matters when a few
  hubs dominate. Read it as a lower bound on the uncertainty there.
- ``top_hub_share`` tracks the item that is the top hub on the full data (``argmax``, ties to the lower
  index) through the resamples; it does not re-take the maximum in each resample. The bootstrap of a
  maximum is biased upward (the max of noisy counts exceeds the noisy count of the max), most when several
  items are near the top: in the same simulations re-taking the max covered 0.01 and 0.00 of E[max share],
  the tracked hub 0.91-1.00 (very conservative where no item stands out). Its count is linear in the
  resample weights, so it needs no bias correction.
- Per length (``length_neighbour_summary``) both intervals resample that length's items
  (``stats.bootstrap_ci`` of the mean of per-item values: longer-neighbour shares, k-occurrences). For the
  mean k-occurrence this covered 0.95-0.99 in simulation where the query bootstrap covered 0.75-0.81 (it
  misses which items exist). Neighbour lists of different items share pool items and are not independent,
  so the longer-share interval is somewhat narrow (coverage 0.90-0.93).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np

from llm_collapse.metrics.probes import group_ids, knn_neighbours
from llm_collapse.metrics.stats import bootstrap_ci, percentile_interval

logger = logging.getLogger(__name__)

__all__ = [
    "chance_longer_share",
    "hubness",
    "hubness_ci",
    "k_occurrence",
    "knn_neighbours",
    "length_neighbour_summary",
    "longer_neighbour_share",
    "neighbour_lengths",
]

_MAX_BOOT_ELEMENTS = 1 << 22  # neighbour indices gathered per bootstrap chunk (32 MiB of int64)


def _check_neighbours(neighbours: np.ndarray, n: int) -> np.ndarray:
    """Validate (m, k) integer neighbour indices into a pool of n items; return them as int64."""
    nb = np.asarray(neighbours)
    if nb.ndim != 2 or nb.shape[1] < 1:
        raise ValueError(f"neighbours must be an (m, k) array with k >= 1, got shape {nb.shape}")
    if nb.size and not np.issubdtype(nb.dtype, np.integer):
        raise ValueError(f"neighbours must hold integer row indices, got dtype {nb.dtype}")
    if nb.size and (nb.min() < 0 or nb.max() >= n):
        raise ValueError(f"neighbour indices must lie in [0, {n}), got [{nb.min()}, {nb.max()}]")
    return nb.astype(np.int64, copy=False)


def _check_lengths(lengths: Sequence[float] | np.ndarray) -> np.ndarray:
    """Validate 1-D finite per-item lengths."""
    ln = np.asarray(lengths)
    if ln.ndim != 1:
        raise ValueError(f"lengths must be 1-D (one per item), got shape {ln.shape}")
    if not np.issubdtype(ln.dtype, np.number) or not np.isfinite(ln).all():
        raise ValueError("lengths must be finite numbers")
    return ln


def _check_pair(
    neighbours: np.ndarray, lengths: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Validate (n, k) neighbours of n items whose (n,) lengths are given (queries = pool)."""
    ln = _check_lengths(lengths)
    nb = _check_neighbours(neighbours, ln.size)
    if nb.shape[0] != ln.size:
        raise ValueError(
            f"neighbours has {nb.shape[0]} rows but lengths has {ln.size} items; they must match"
        )
    return nb, ln


def neighbour_lengths(neighbours: np.ndarray, lengths: Sequence[float] | np.ndarray) -> np.ndarray:
    """(n, k) lengths of each item's neighbours, nearest first (``lengths[neighbours]``)."""
    nb, ln = _check_pair(neighbours, lengths)
    return ln[nb]


def longer_neighbour_share(neighbours: np.ndarray, lengths: Sequence[float] | np.ndarray) -> np.ndarray:
    """(n,) share of each item's k neighbours strictly longer than the item (equal length is not longer)."""
    nb, ln = _check_pair(neighbours, lengths)
    return (ln[nb] > ln[:, None]).mean(axis=1)


def chance_longer_share(
    lengths: Sequence[float] | np.ndarray, groups: Sequence | np.ndarray | None = None
) -> np.ndarray:
    """(n,) share of each item's candidates (rows outside its group) that are strictly longer than it.

    The expected ``longer_neighbour_share`` if neighbours were drawn at random from the candidates; NaN for
    an item without candidates. O(n log n): counts via sorted (group, length rank) keys, not n^2 pairs.
    """
    ln = _check_lengths(lengths)
    n = ln.size
    g = np.arange(n) if groups is None else group_ids(groups, n)  # (n,)
    ranks, r = np.unique(ln, return_inverse=True)
    r = r.reshape(n)
    longer_all = n - np.searchsorted(np.sort(r), r, side="right")  # (n,)
    key = g * ranks.size + r  # (n,) sorts by group, then length
    sorted_key = np.sort(key)
    group_end = np.searchsorted(sorted_key, g * ranks.size + ranks.size - 1, side="right")
    longer_own_group = group_end - np.searchsorted(sorted_key, key, side="right")  # (n,)
    candidates = n - np.bincount(g, minlength=n)[g]  # (n,)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(candidates > 0, (longer_all - longer_own_group) / candidates, np.nan)


def k_occurrence(neighbours: np.ndarray, n: int) -> np.ndarray:
    """(n,) k-occurrence N_k(j): how many rows of ``neighbours`` list pool item j (Radovanovic 2010)."""
    if n < 1:
        raise ValueError(f"n (pool size) must be >= 1, got {n}")
    return np.bincount(_check_neighbours(neighbours, n).ravel(), minlength=n)


def _skewness(x: np.ndarray) -> np.ndarray:
    """Population skewness m3 / m2^(3/2) along the last axis; NaN where m2 = 0."""
    d = x - x.mean(axis=-1, keepdims=True)
    m2 = (d**2).mean(axis=-1)
    m3 = (d**3).mean(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, np.nan)


def hubness(k_occ: Sequence[int] | np.ndarray, k: int) -> dict[str, float]:
    """Skewness of the k-occurrence distribution and the top hub's share of the n k neighbour slots.

    Args:
        k_occ: (n,) k-occurrences of a complete neighbour list (every pool item also a query).
        k: Neighbours per item.

    Returns:
        ``{"skewness": ..., "top_hub_share": ...}``; skewness NaN if every item occurs equally often.
    """
    occ = np.asarray(k_occ)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if occ.ndim != 1 or occ.size == 0:
        raise ValueError(f"k_occ must be a non-empty 1-D array, got shape {occ.shape}")
    n = occ.size
    if occ.sum() != n * k:
        raise ValueError(f"k_occ sums to {occ.sum()}, not n * k = {n * k}: wrong k or an incomplete list")
    occ = occ.astype(np.float64)
    skewness = float(_skewness(occ))
    if np.isnan(skewness):
        logger.warning("hubness: every item occurs %d times among the neighbours; skewness is NaN", k)
    return {"skewness": skewness, "top_hub_share": float(occ.max() / (n * k))}


def _bootstrap_k_occurrence(nb: np.ndarray, n: int, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Yield (b, n) k-occurrence counts recounted over resampled query rows, chunk by chunk."""
    m, k = nb.shape
    idx = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))  # (n_boot, m), all draws at once
    step = max(1, _MAX_BOOT_ELEMENTS // max(1, m * k))
    for s in range(0, n_boot, step):
        rows = nb[idx[s : s + step]].reshape(-1, m * k)  # (b, m k) neighbours of the resampled queries
        b = rows.shape[0]
        flat = (rows + (np.arange(b) * n)[:, None]).ravel()  # offset resample b into its own n bins
        yield np.bincount(flat, minlength=b * n).reshape(b, n)


def _check_boot(n_boot: int, alpha: float) -> None:
    """Validate the bootstrap size and level."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def hubness_ci(
    neighbours: np.ndarray, n: int, k: int, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """`hubness` with intervals from a bootstrap over the query rows (skewness bias-corrected; module notes).

    Args:
        neighbours: (n, k) neighbour indices, e.g. ``knn_neighbours(X, k)``.
        n: Pool size (rows of X).
        k: Neighbours per item; must equal ``neighbours.shape[1]``.
        n_boot: Number of resamples.
        alpha: Two-sided level.
        seed: Seed of ``numpy.random.default_rng``; equal seeds give equal intervals.

    Returns:
        ``{"skewness": (point, low, high), "top_hub_share": (point, low, high)}``; ``top_hub_share``
        follows the full-data top hub through the resamples. Skewness all NaN if there are no hubs.
    """
    _check_boot(n_boot, alpha)
    nb = _check_neighbours(neighbours, n)
    if nb.shape != (n, k):
        raise ValueError(f"neighbours must have shape (n, k) = ({n}, {k}), got {nb.shape}")
    occ = k_occurrence(nb, n)
    point = hubness(occ, k)
    hub = int(np.argmax(occ))
    skews, shares = [], []
    for counts in _bootstrap_k_occurrence(nb, n, n_boot, seed):
        skews.append(_skewness(counts.astype(np.float64)))
        shares.append(counts[:, hub] / (n * k))
    nan = float("nan")
    skew_ci = (nan, nan, nan)  # no hubs at all (constant k-occurrence): NaN, as bootstrap_ci does
    boot = np.concatenate(skews)
    if np.isfinite(point["skewness"]) and np.isfinite(boot).any():
        bias = float(boot[np.isfinite(boot)].mean() - point["skewness"])
        skew_ci = percentile_interval(
            point["skewness"], boot - bias, alpha
        )  # bias-corrected, see the module notes
    return {
        "skewness": skew_ci,
        "top_hub_share": percentile_interval(point["top_hub_share"], np.concatenate(shares), alpha),
    }


def _as_key(value: np.generic) -> int | float:
    """A numpy scalar length as a plain Python int or float (a dict key that JSON can write)."""
    return int(value) if np.issubdtype(type(value), np.integer) else float(value)


def _mean_ci(values: np.ndarray, n_boot: int, alpha: float, seed: int) -> tuple[float, float, float]:
    """Percentile bootstrap interval of the mean of (m,) per-item values, resampling the items."""
    return bootstrap_ci(
        values, lambda a: a.mean(axis=-1), n_boot=n_boot, alpha=alpha, seed=seed, batched=True
    )


def length_neighbour_summary(
    neighbours: np.ndarray,
    lengths: Sequence[float] | np.ndarray,
    groups: Sequence | np.ndarray | None = None,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[int | float, dict[str, float | tuple[float, float, float]]]:
    """Per length: how often its texts' neighbours are longer (against chance), how often they are neighbours.

    Args:
        neighbours: (n, k) neighbour indices of all n items, e.g. ``knn_neighbours(X, k, groups)``.
        lengths: (n,) length of each item (e.g. the token budget it was cut to).
        groups: (n,) the groups the neighbour search excluded (for ``chance_longer_share``); None = self only.
        n_boot: Number of resamples.
        alpha: Two-sided level.
        seed: Seed of ``numpy.random.default_rng``.

    Returns:
        ``{length: {"n", "longer_share", "chance_longer_share", "mean_k_occurrence"}}`` in increasing length:
        ``n`` items; ``longer_share`` the mean `longer_neighbour_share` as (point, low, high), resampling
        that length's items; ``chance_longer_share`` its mean random-neighbour baseline; ``mean_k_occurrence``
        the mean k-occurrence of that length's items as (point, low, high), resampling those items
        (overall mean: exactly k).
    """
    _check_boot(n_boot, alpha)
    nb, ln = _check_pair(neighbours, lengths)
    n = ln.size
    share = longer_neighbour_share(nb, ln)  # (n,)
    chance = chance_longer_share(ln, groups)  # (n,)
    occ = k_occurrence(nb, n).astype(np.float64)  # (n,)
    values, which = np.unique(ln, return_inverse=True)
    which = which.reshape(n)
    out: dict[int | float, dict[str, float | tuple[float, float, float]]] = {}
    for j, value in enumerate(values):
        mask = which == j
        out[_as_key(value)] = {
            "n": int(mask.sum()),
            "longer_share": _mean_ci(share[mask], n_boot, alpha, seed),
            "chance_longer_share": float(chance[mask].mean()),  # NaN only if an item has no candidates
            "mean_k_occurrence": _mean_ci(occ[mask], n_boot, alpha, seed),
        }
    return out
