"""Post-hoc baselines: transforms of the embeddings themselves, at no model cost (issue 43, item 7).

Each function takes (n, d) embeddings as the embedder returns them, re-normalises the rows to unit L2 norm
in float64 (`normalize_rows`, as every collapse metric does) and returns float64 (n, d) vectors *without*
re-normalising them: the metrics re-normalise defensively, so a transformed matrix can go straight into
``collapse_metrics``. Working on unit rows makes each transform see exactly the vectors the paper's metric
sees (for our embedders, which already return unit rows, this is a no-op) and keeps a row's norm from
weighting the means and principal directions.

- `center_per_length`: subtract each length's own mean. It makes every length centroid 0 before the
  metrics' re-normalisation, so the length offset term of `llm_collapse.metrics.decomposition` is ~0 by
  construction: a smaller global-centroid distance after it is not evidence of anything beyond offsets.
  It also uses the length label at inference time (a query of another length gets another shift).
- `all_but_the_top`: Mu & Viswanath (2018), "All-but-the-Top: Simple and Effective Postprocessing for
  Word Representations", ICLR, Algorithm 1: subtract the mean, then the projections on the top D
  principal directions, D ~ d/100. Fitted on the matrix it is applied to, as in the paper (transductive,
  but label-free); pass all lengths pooled, as for the global centroid.
- `fit_whitening` / `apply_whitening`: ZCA whitening fitted on one half of the items and applied to the
  other (`split_halves`), in the spirit of Su et al. (2021), "Whitening Sentence Representations for
  Better Semantics and Faster Retrieval" (arXiv:2103.15316), who use PCA whitening with a dimension cap.
- `split_halves`: a seeded fit/eval split by item id.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llm_collapse.metrics.collapse import normalize_rows

logger = logging.getLogger(__name__)


def center_per_length(X: np.ndarray, lengths: Sequence | np.ndarray) -> np.ndarray:
    """Unit rows minus the mean of the unit rows of the same length: (n, d), (n,) -> (n, d).

    Raises:
        ValueError: If ``lengths`` is not one label per row, if a length has fewer than 2 items (its only
            row would become 0), or if a centred row is 0 (all of a length's rows identical).
    """
    U = normalize_rows(X)  # (n, d)
    labels = np.asarray(lengths)
    if labels.shape != (U.shape[0],):
        raise ValueError(
            f"lengths must hold one label per row, shape ({U.shape[0]},), got shape {labels.shape}"
        )
    out = np.empty_like(U)
    for length in np.unique(labels).tolist():
        rows = labels == length
        if rows.sum() < 2:
            raise ValueError(
                f"center_per_length needs >= 2 items per length, length {length!r} has {int(rows.sum())}; "
                "drop or merge that length"
            )
        out[rows] = U[rows] - U[rows].mean(axis=0)
    zero = np.linalg.norm(out, axis=1) <= 1e-12
    if zero.any():
        raise ValueError(
            f"centring per length left {int(zero.sum())} zero row(s) (a length whose rows are all identical, "
            f"e.g. length {labels.tolist()[int(np.argmax(zero))]!r}); a zero row has no direction, drop that length"
        )
    return out


def default_abtt_components(d: int) -> int:
    """Mu & Viswanath's rule of thumb D ~ d/100, rounded, at least 1 (384 -> 4, 1024 -> 10, 2304 -> 23)."""
    return max(1, round(d / 100))


def all_but_the_top(X: np.ndarray, n_components: int | None = None) -> np.ndarray:
    """Mu & Viswanath (2018) post-processing of the unit rows: (n, d) -> (n, d).

    ``x' = (x - m) - sum_{j <= D} (u_j . (x - m)) u_j``, ``m`` the mean of the unit rows and ``u_j`` the top
    D principal directions of the centred unit rows (right singular vectors; signs do not matter).

    Args:
        X: (n, d) embeddings, all lengths pooled.
        n_components: D; default `default_abtt_components` (d). Needs ``0 <= D < min(n - 1, d)``: the
            centred rows span at most n - 1 directions, and removing all of them leaves zero rows.

    Raises:
        ValueError: If D is out of range (too few items for D).
    """
    U = normalize_rows(X)  # (n, d)
    n, d = U.shape
    D = default_abtt_components(d) if n_components is None else int(n_components)
    if not 0 <= D < min(n - 1, d):
        raise ValueError(
            f"all_but_the_top needs 0 <= n_components < min(n - 1, d) = {min(n - 1, d)} (n={n}, d={d}), got "
            f"{D}; pass a smaller n_components or more items"
        )
    C = U - U.mean(axis=0)  # (n, d)
    if D == 0:
        return C
    Vt = np.linalg.svd(C, full_matrices=False)[2][:D]  # (D, d), top principal directions
    return C - (C @ Vt.T) @ Vt


@dataclass(frozen=True)
class WhiteningParams:
    """A fitted ZCA whitening ``x -> V diag(eigenvalues^-1/2) V^T (x - mean)``.

    Attributes:
        mean: (d,) mean of the fit half's unit rows.
        components: (k, d) orthonormal retained principal directions V^T.
        eigenvalues: (k,) their covariance eigenvalues (ddof = 1), descending, all above the floor.
    """

    mean: np.ndarray
    components: np.ndarray
    eigenvalues: np.ndarray


def fit_whitening(X_fit: np.ndarray, n_components: int | None = None) -> WhiteningParams:
    """Fit ZCA whitening on the unit rows of the fit half: (n_fit, d) -> `WhiteningParams`.

    Decisions:

    - ZCA rather than PCA whitening: ZCA is PCA whitening rotated back by ``V`` (an isometry), so every
      cosine, distance and singular value, hence every collapse metric, is the same; ZCA keeps the
      output in the input's d coordinates, so shapes and the global centroid's dimension stay as they are.
    - Rank limit: the centred fit rows span at most ``n_fit - 1`` directions, and here n_fit <= d is
      common (n ~ 50-500 texts, d = 384-2304), so a full d x d whitening does not exist. Only directions
      whose singular value exceeds ``s_max * max(n_fit, d) * eps`` (the ``numpy.linalg.matrix_rank``
      tolerance, as in `llm_collapse.metrics.collapse.effective_rank`) and at most ``n_fit - 1`` of them
      are kept; the rest of ``x - mean`` is dropped, since unscaled it would mix with unit-variance
      coordinates. ``n_components`` caps k further (Su et al. 2021 keep k < d).
    - Whitening every retained direction amplifies the small, noisy ones: with k = n_fit - 1 the fit
      rows themselves become a regular simplex, and the eval half is far from identity covariance in
      those directions. That is the baseline's nature, not a bug; cap k to study it.

    Args:
        X_fit: (n_fit, d) embeddings of the fit half (all lengths pooled).
        n_components: Keep at most this many directions (default: all above the floor).

    Raises:
        ValueError: If n_fit < 2, if ``n_components`` < 1, if the fit rows are all identical, or if fewer
            directions pass the floor than ``n_components`` asks for (too few fit items).
    """
    U = normalize_rows(X_fit)  # (n_fit, d)
    n, d = U.shape
    if n < 2:
        raise ValueError(f"fit_whitening needs >= 2 fit items, got {n}; fit on more items")
    if n_components is not None and n_components < 1:
        raise ValueError(f"n_components must be >= 1 or None, got {n_components}")
    mean = U.mean(axis=0)  # (d,)
    _, s, Vt = np.linalg.svd(U - mean, full_matrices=False)  # s: (min(n, d),), Vt: (min(n, d), d)
    tol = s.max(initial=0.0) * max(n, d) * np.finfo(np.float64).eps
    available = min(int((s > tol).sum()), n - 1)
    if available == 0:
        raise ValueError(
            f"the {n} fit rows are all identical, so there is no direction to whiten; fit on other items"
        )
    k = available if n_components is None else int(n_components)
    if k > available:
        raise ValueError(
            f"whitening to {k} direction(s) needs at least {k} above the eigenvalue floor, but {n} fit items "
            f"in d={d} give {available}; use n_components <= {available} or more fit items"
        )
    return WhiteningParams(mean=mean, components=Vt[:k].copy(), eigenvalues=s[:k] ** 2 / (n - 1))


def apply_whitening(params: WhiteningParams, X: np.ndarray) -> np.ndarray:
    """ZCA-whiten the unit rows of ``X`` with fitted ``params``: (n, d) -> (n, d)."""
    U = normalize_rows(X)  # (n, d)
    if U.shape[1] != params.mean.shape[0]:
        raise ValueError(
            f"embeddings have dim {U.shape[1]} but the whitening was fitted in dim {params.mean.shape[0]}; "
            "fit and apply on the same model's embeddings"
        )
    Z = (U - params.mean) @ params.components.T / np.sqrt(params.eigenvalues)  # (n, k) PCA-whitened
    return Z @ params.components


def split_halves(ids: Sequence[str], seed: int) -> np.ndarray:
    """Seeded fit/eval split by item id: (n,) ids -> (n,) bool, True = fit half.

    The distinct ids are ordered by ``blake2b(f"{seed}:{id}")`` and the first ``m // 2`` of the m distinct
    ids form the fit half. Hence: rows with the same id (one document at every length under the prefix
    design) share their half; the split does not depend on row order; and every method and length given
    the same ids gets the same split, so paired designs stay paired. Call it once on the ids of all lengths
    pooled. Under the span design each length's own split is balanced only on average. Python's ``hash``
    is not used: it is salted per process for strings.

    Raises:
        ValueError: If there are fewer than 2 distinct ids.
    """
    ids = [str(i) for i in ids]
    distinct = sorted(set(ids))
    if len(distinct) < 2:
        raise ValueError(f"split_halves needs >= 2 distinct item ids, got {len(distinct)}; pass more items")
    ranked = sorted(distinct, key=lambda i: hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=16).digest())
    fit = set(ranked[: len(ranked) // 2])
    return np.array([i in fit for i in ids], dtype=bool)
