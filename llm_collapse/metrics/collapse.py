"""Embedding geometry of one group (e.g. one length bin) of text embeddings.

Every function takes a group ``X`` of shape (n, d), one embedding per row, and first re-normalises the rows
to unit L2 norm in float64 ("defensive" normalisation: the embedder already returns unit float32 rows, but
float32 rounding, user-supplied arrays or a forgotten normalisation would otherwise leak into the numbers).
Below, x_i denotes the i-th row *after* this normalisation, ``mu = (1/n) sum_i x_i`` the group centroid
(deliberately *not* re-normalised, so ``||mu|| <= 1`` itself measures concentration) and ``g`` a global
centroid supplied by the caller, usually ``centroid`` of all bins pooled.

Definitions (the TempScale paper did not publish its formulas; these are ours, anchors §1.4 and §8.8):

- ``pairwise_cosine``   = 1/(n(n-1)) * sum_{i != j} x_i . x_j
                        = (||sum_i x_i||^2 - sum_i ||x_i||^2) / (n(n-1))      (O(n d), needs n >= 2)
- ``centroid_distance`` = (1/n) sum_i ||x_i - mu||_2                          (needs n >= 2)
- ``global_centroid_distance`` = (1/n) sum_i ||x_i - g||_2                    (needs n >= 1)
- ``centroid_cosine``   = mu . g / (||mu|| ||g||)                             (needs n >= 1)
- ``effective_rank``    = exp(-sum_k p_k log p_k),  p_k = s_k / sum_l s_l, s = singular values of X
  (Roy & Vetterli 2007; needs n >= 2)

Decisions and gotchas:

- Collapse shows as pairwise_cosine -> 1, centroid_distance -> 0, effective_rank -> 1. For unit rows
  ``pairwise_cosine = (n ||mu||^2 - 1) / (n - 1)``, so it is a monotone function of ``||mu||``.
- Below a metric's minimum group size (``MIN_GROUP_SIZE``) the value is ``float("nan")`` and a warning
  names the metric and the group label. A value is never silently 0: with n = 1 the centroid distance
  would be 0 and the effective rank 1, i.e. "perfect collapse", which is an artefact.
- Rows with zero or non-finite norm raise ``ValueError``: such an embedding is a bug upstream.
- ``effective_rank`` is uncentred by default: collapse of unit vectors is concentration around a common
  direction, which an uncentred X shows as one dominant singular value (identical rows -> 1). Centring
  (``center=True``) removes that direction and measures only the spread of the residual; with
  identical rows the centred X is 0 and the value is NaN. Singular values at or below
  ``s_max * max(n, d) * eps`` are treated as 0 (the ``numpy.linalg.matrix_rank`` tolerance), so rounding
  noise does not add rank.
- ``effective_rank`` is at most min(n, d) and grows with n for the same distribution, so compare
  bins at equal n (subsample to the smallest bin). The other metrics are size-consistent.
- ``mean_pairwise_cosine`` streams over row chunks (normalising each chunk on its own), so a huge or
  memory-mapped X is never copied whole and no (n, n) matrix is formed.
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

MIN_GROUP_SIZE: dict[str, int] = {
    "pairwise_cosine": 2,
    "centroid_distance": 2,
    "global_centroid_distance": 1,
    "centroid_cosine": 1,
    "effective_rank": 2,
}
METRIC_KEYS: tuple[str, ...] = tuple(MIN_GROUP_SIZE)


def normalize_rows(X: np.ndarray) -> np.ndarray:
    """Return a float64 copy of ``X`` with unit-L2-norm rows.

    Args:
        X: (n, d) array-like.

    Returns:
        (n, d) float64 array.

    Raises:
        ValueError: If ``X`` is not 2-D or a row has zero or non-finite norm.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D (n, d) array, got shape {X.shape}")
    norms = np.linalg.norm(X, axis=1)  # (n,)
    bad = ~np.isfinite(norms) | (norms == 0)
    if bad.any():
        raise ValueError(
            f"{int(bad.sum())} row(s) have zero or non-finite norm, e.g. row {int(np.argmax(bad))}"
        )
    return X / norms[:, None]


def _enough(n: int, metric: str, label: str | None) -> bool:
    """True when ``n`` meets the metric's minimum; otherwise log a warning and return False."""
    need = MIN_GROUP_SIZE[metric]
    if n >= need:
        return True
    logger.warning("%s needs n >= %d but group %r has n = %d; returning NaN", metric, need, label, n)
    return False


def centroid(X: np.ndarray) -> np.ndarray:
    """Mean of the unit-normalised rows (not re-normalised): (n, d) -> (d,).

    Pass ``np.concatenate`` of all bins to get the global centroid ``g`` used by the other functions.
    """
    return normalize_rows(X).mean(axis=0)


def centroid_distance(X: np.ndarray, label: str | None = None) -> float:
    """Mean Euclidean distance of the unit rows to their own centroid; NaN if n < 2."""
    U = normalize_rows(X)  # (n, d)
    if not _enough(U.shape[0], "centroid_distance", label):
        return float("nan")
    return float(np.linalg.norm(U - U.mean(axis=0), axis=1).mean())


def global_centroid_distance(X: np.ndarray, global_centroid: np.ndarray, label: str | None = None) -> float:
    """Mean Euclidean distance of the unit rows to ``global_centroid`` (used as given); NaN if n < 1."""
    U = normalize_rows(X)  # (n, d)
    g = np.asarray(global_centroid, dtype=np.float64).reshape(-1)  # (d,)
    if g.shape[0] != U.shape[1]:
        raise ValueError(f"global_centroid has dim {g.shape[0]}, embeddings have dim {U.shape[1]}")
    if not _enough(U.shape[0], "global_centroid_distance", label):
        return float("nan")
    return float(np.linalg.norm(U - g, axis=1).mean())


def per_item_pairwise_cosine(X: np.ndarray) -> np.ndarray:
    """Each item's mean cosine to the other items of its group, (n, d) -> (n,) (NaN for a lone item): their mean is
    `mean_pairwise_cosine`, and they give its delete-one values (`llm_collapse.metrics.contrasts`)."""
    U = normalize_rows(np.asarray(X, dtype=np.float64))
    n = U.shape[0]
    if n < 2:
        return np.full(n, np.nan)
    return (U @ U.sum(axis=0) - np.einsum("ij,ij->i", U, U)) / (n - 1)


def mean_pairwise_cosine(X: np.ndarray, chunk_size: int = 65536, label: str | None = None) -> float:
    """Mean cosine over the n(n-1) ordered off-diagonal pairs, in O(n d) time and O(chunk_size d) memory.

    Args:
        X: (n, d) array-like (a memory-mapped array is read chunk by chunk).
        chunk_size: Rows normalised and summed at a time.
        label: Group name for the warning when n < 2.

    Returns:
        ``(||sum_i x_i||^2 - sum_i ||x_i||^2) / (n(n-1))`` over the normalised rows; NaN if n < 2.
    """
    if not hasattr(X, "shape"):
        X = np.asarray(X, dtype=np.float64)
    if len(X.shape) != 2:
        raise ValueError(f"expected a 2-D (n, d) array, got shape {X.shape}")
    n, d = X.shape
    if not _enough(n, "pairwise_cosine", label):
        return float("nan")
    total = np.zeros(d, dtype=np.float64)  # (d,)
    sum_sq = 0.0
    for start in range(0, n, max(1, int(chunk_size))):
        block = normalize_rows(X[start : start + chunk_size])  # (c, d)
        total += block.sum(axis=0)
        sum_sq += float(np.einsum("ij,ij->", block, block))  # ~= c
    return float((total @ total - sum_sq) / (n * (n - 1)))


def centroid_cosine(a: np.ndarray, b: np.ndarray, label: str | None = None) -> float:
    """Cosine between two vectors, e.g. a bin centroid and the global centroid; NaN if either is 0."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)  # (d,)
    b = np.asarray(b, dtype=np.float64).reshape(-1)  # (d,)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if not (na > 0 and nb > 0 and np.isfinite(na) and np.isfinite(nb)):
        logger.warning("centroid_cosine of group %r: a zero or non-finite vector; returning NaN", label)
        return float("nan")
    return float(a @ b / (na * nb))


def effective_rank(X: np.ndarray, center: bool = False, label: str | None = None) -> float:
    """Roy & Vetterli (2007) effective rank of the unit-normalised rows.

    Args:
        X: (n, d) array-like.
        center: Subtract the group centroid before the SVD (default False; see the module docstring).
        label: Group name for warnings.

    Returns:
        ``exp(H(p))`` with ``p = s / sum(s)`` over the singular values ``s``, in [1, min(n, d)];
        NaN if n < 2 or if every singular value is 0.
    """
    U = normalize_rows(X)  # (n, d)
    if not _enough(U.shape[0], "effective_rank", label):
        return float("nan")
    return _effective_rank(U, center, max(U.shape), label)


def effective_rank_leave_one_out(X: np.ndarray, center: bool = False, label: str | None = None) -> np.ndarray:
    """``effective_rank`` of X without row i, for every i: (n, d) -> (n,) (the jackknife's replicates).

    From one Gram matrix instead of n SVDs (8x faster at n = 200, d = 4096): the squared singular values of
    the rows without i are the eigenvalues of ``U U^T`` without row and column i (n <= d), or of
    ``U^T U - u_i u_i^T`` (n > d); centring is the matching correction of either. Squaring costs precision,
    so eigenvalues below ``(n - 1) max(n - 1, d) eps`` (the unit rows' Gram trace times the SVD rounding
    threshold; an absolute scale, so centred identical rows give NaN as in ``effective_rank``) count as 0.
    Singular values that small carry a negligible share of the entropy: values equal a plain loop over
    ``effective_rank(np.delete(X, i, 0))`` to rounding on ordinary data (tested), not by construction.
    NaN everywhere if n < 3 (a replicate needs 2 rows).
    """
    U = normalize_rows(X)  # (n, d)
    n, d = U.shape
    if n < 3:
        logger.warning("effective_rank_leave_one_out needs n >= 3 but group %r has n = %d; NaN", label, n)
        return np.full(n, np.nan)
    m = n - 1  # rows per replicate
    floor = m * max(m, d) * np.finfo(np.float64).eps
    out = np.empty(n)
    if n <= d:
        G = U @ U.T  # (n, n)
        keep = ~np.eye(n, dtype=bool)
        for i in range(n):
            Gi = G[keep[i]][:, keep[i]]  # (m, m)
            if center:
                r = Gi.mean(axis=0)
                Gi = Gi - r[:, None] - r[None, :] + r.mean()
            out[i] = _rank_from_eigenvalues(np.linalg.eigvalsh(Gi), floor, label)
    else:
        S, total = U.T @ U, U.sum(axis=0)  # (d, d), (d,)
        for i in range(n):
            Si = S - np.outer(U[i], U[i])  # (d, d)
            if center:
                mu = (total - U[i]) / m
                Si = Si - m * np.outer(mu, mu)
            out[i] = _rank_from_eigenvalues(np.linalg.eigvalsh(Si), floor, label)
    return out


def _rank_from_eigenvalues(lam: np.ndarray, floor: float, label: str | None) -> float:
    """exp(entropy) of p = s / sum(s), s = square roots of the Gram eigenvalues above ``floor``."""
    lam = lam[lam > floor]
    if lam.size == 0:
        logger.warning("effective_rank of group %r: all singular values are 0; returning NaN", label)
        return float("nan")
    s = np.sqrt(lam)
    p = s / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def _effective_rank(U: np.ndarray, center: bool, size: int, label: str | None) -> float:
    """exp(entropy) of the normalised singular values of unit rows ``U``; ``size`` sets the zero threshold."""
    if center:
        U = U - U.mean(axis=0)
    s = np.linalg.svd(U, compute_uv=False)  # (min(n, d),)
    tol = s.max(initial=0.0) * size * np.finfo(np.float64).eps
    s = s[s > tol]
    if s.size == 0:
        logger.warning("effective_rank of group %r: all singular values are 0; returning NaN", label)
        return float("nan")
    p = s / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def collapse_metrics(
    X: np.ndarray, global_centroid: np.ndarray | None = None, label: str | None = None
) -> dict[str, float]:
    """All collapse metrics of one group, under stable keys.

    Args:
        X: (n, d) embeddings of one group.
        global_centroid: (d,) e.g. ``centroid`` of all groups pooled. Without it the two global metrics
            are NaN (no warning).
        label: Group name for warnings.

    Returns:
        ``{"n", "pairwise_cosine", "centroid_distance", "global_centroid_distance", "centroid_cosine",
        "effective_rank"}``, each a float (``n`` as a float count).
    """
    U = normalize_rows(X)  # (n, d)
    out: dict[str, float] = {"n": float(U.shape[0])}
    out["pairwise_cosine"] = mean_pairwise_cosine(U, label=label)
    out["centroid_distance"] = centroid_distance(U, label=label)
    out["global_centroid_distance"] = float("nan")
    out["centroid_cosine"] = float("nan")
    if global_centroid is not None:
        out["global_centroid_distance"] = global_centroid_distance(U, global_centroid, label=label)
        if _enough(U.shape[0], "centroid_cosine", label):
            out["centroid_cosine"] = centroid_cosine(U.mean(axis=0), global_centroid, label=label)
    out["effective_rank"] = effective_rank(U, label=label)
    return out
