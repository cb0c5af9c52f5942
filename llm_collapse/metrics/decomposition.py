"""Split the squared distance to the global centroid into within-length spread and length offset.

Conventions follow `llm_collapse.metrics.collapse` exactly: the rows of one length's ``X`` (n, d) are
re-normalised to unit L2 norm in float64 (`normalize_rows`), ``c = (1/n) sum_i x_i`` is the length's
centroid (not re-normalised) and ``g`` is the global centroid as the collapse task computes it
(``centroid`` of all lengths pooled), used as given. Then, exactly (the cross term vanishes because
``sum_i (x_i - c) = 0``)::

    global_centroid_sq_distance = (1/n) sum_i ||x_i - g||^2
                                = (1/n) sum_i ||x_i - c||^2  +  ||c - g||^2
                                = within_length_sq_spread    +  length_centroid_offset_sq

Why: the TempScale paper's collapse metric (our ``global_centroid_distance``) falls when a length's items
crowd together *and* when the length's whole group moves relative to the others; the two terms separate
these (issue 43, item 3). In floating point the identity holds to a few ulps (tested to 1e-12).

Gotchas:

- The paper's metric is the mean *distance* ``(1/n) sum_i ||x_i - g||``, not its square; by Jensen it is
  at most ``sqrt(global_centroid_sq_distance)``. The decomposition explains the squared version; report
  it beside the paper's metric, not as a transform of it.
- For unit rows ``within_length_sq_spread = 1 - ||c||^2 = (n - 1)/n * (1 - pairwise_cosine)``, so it is
  ``centroid_distance``'s squared sibling and, like it, needs n >= 2: with n = 1 the spread would be 0
  ("perfect collapse", an artefact) and the offset would be the lone item's distance. Below n = 2 the
  within and offset values are NaN (warning logged); the global values need n >= 1.
- Per-item values (``global_sq``, ``within_sq``) are for paired contrasts between methods on the same
  items. ``within_sq`` depends on the group's own centroid: a bootstrap that repeats rows pulls ``c``
  towards the duplicates and biases the spread low (use a jackknife, as the collapse task does for
  ``centroid_distance``).
- Pooled over lengths with ``g`` the pooled centroid this is the law of total variance:
  ``sum_L n_L (within_L + offset_L) = N (1 - ||g||^2)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from llm_collapse.metrics.collapse import normalize_rows

logger = logging.getLogger(__name__)

DECOMPOSITION_KEYS: tuple[str, ...] = (
    "global_centroid_sq_distance",
    "within_length_sq_spread",
    "length_centroid_offset_sq",
)


@dataclass(frozen=True)
class CentroidDecomposition:
    """Per-item and summary terms of one length's squared distance to the global centroid.

    Attributes:
        global_sq: (n,) ``||x_i - g||^2``.
        within_sq: (n,) ``||x_i - c||^2`` (NaN if n < 2).
        offset_sq: ``||c - g||^2`` (NaN if n < 2).
    """

    global_sq: np.ndarray
    within_sq: np.ndarray
    offset_sq: float

    def summary(self) -> dict[str, float]:
        """``{global_centroid_sq_distance, within_length_sq_spread, length_centroid_offset_sq}``; the first
        equals the sum of the other two (NaN means where n is too small)."""
        n = self.global_sq.shape[0]
        return {
            "global_centroid_sq_distance": float(self.global_sq.mean()) if n else float("nan"),
            "within_length_sq_spread": float(self.within_sq.mean()) if n >= 2 else float("nan"),
            "length_centroid_offset_sq": float(self.offset_sq),
        }


def centroid_decomposition(
    X: np.ndarray, global_centroid: np.ndarray, label: str | None = None
) -> CentroidDecomposition:
    """Decompose one length's squared distances to ``global_centroid`` (see the module docstring).

    Args:
        X: (n, d) embeddings of one length (re-normalised to unit rows here).
        global_centroid: (d,) ``centroid`` of all lengths pooled, used as given (not normalised).
        label: Group name for the warning when n < 2.

    Returns:
        A `CentroidDecomposition`; ``.summary()`` gives the three result metrics.

    Raises:
        ValueError: If ``global_centroid`` and ``X`` differ in dimension (or `normalize_rows` rejects X).
    """
    U = normalize_rows(X)  # (n, d)
    n, d = U.shape
    g = np.asarray(global_centroid, dtype=np.float64).reshape(-1)  # (d,)
    if g.shape[0] != d:
        raise ValueError(
            f"global_centroid has dim {g.shape[0]} but the embeddings have dim {d}; pass the pooled centroid "
            "of the same model's embeddings"
        )
    global_sq = ((U - g) ** 2).sum(axis=1)  # (n,)
    if n < 2:
        logger.warning(
            "within_length_sq_spread and length_centroid_offset_sq need n >= 2 but group %r has n = %d; "
            "returning NaN",
            label,
            n,
        )
        return CentroidDecomposition(global_sq, np.full(n, np.nan), float("nan"))
    c = U.mean(axis=0)  # (d,)
    within_sq = ((U - c) ** 2).sum(axis=1)  # (n,)
    return CentroidDecomposition(global_sq, within_sq, float(((c - g) ** 2).sum()))
