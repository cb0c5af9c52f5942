"""Drift between two embeddings of the same texts, e.g. a quantized model against its bf16 reference.

``A`` and ``B`` are (n, d) with row i of both embedding the same text i. After unit-normalising the rows
(`normalize_rows`, float64)::

    paired_cosine_i = a_i . b_i                      (n,)
    cosine_drift    = (1/n) sum_i paired_cosine_i    with a 95% percentile bootstrap interval over texts

Decisions:

- The resampling unit is the text: pair i is resampled as a whole. The statistic is a mean of per-text
  values, which resampled duplicates do not bias (unlike the pairwise statistics in `stats`), so the plain
  percentile bootstrap (`bootstrap_ci`, ``statistic=np.mean``) is used. Its interval stays within the
  values seen (never above 1), where a jackknife normal interval can pass 1 for cosines close to 1.
- The two matrices must have the same shape; a mismatch is a ``ValueError`` (rows out of order cannot be
  detected, so callers pass the same texts in the same order). n = 0 gives NaN, never 1.
"""

from __future__ import annotations

import logging

import numpy as np

from llm_collapse.metrics.collapse import normalize_rows
from llm_collapse.metrics.stats import bootstrap_ci

logger = logging.getLogger(__name__)


def paired_cosine(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Cosine between row i of ``A`` and row i of ``B``: (n, d), (n, d) -> (n,) float64."""
    A, B = np.asarray(A), np.asarray(B)
    if A.shape != B.shape or A.ndim != 2:
        raise ValueError(
            f"paired embeddings must be two (n, d) arrays of one shape, got {A.shape} and {B.shape}"
        )
    if A.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    return np.einsum("ij,ij->i", normalize_rows(A), normalize_rows(B))


def cosine_drift(
    A: np.ndarray, B: np.ndarray, label: str | None = None, **bootstrap
) -> tuple[float, float, float]:
    """Mean paired cosine of ``A`` and ``B`` with a percentile bootstrap interval over texts.

    Args:
        A: (n, d) embeddings, e.g. of the reference model.
        B: (n, d) embeddings of the same texts in the same order, e.g. of the quantized model.
        label: Group name for the warning when n = 0.
        **bootstrap: `bootstrap_ci`'s ``n_boot``, ``alpha`` and ``seed``.

    Returns:
        ``(mean, low, high)``; all NaN when n = 0, NaN interval when n = 1 (a single text has no spread).
    """
    cosines = paired_cosine(A, B)
    if cosines.size == 0:
        logger.warning("cosine_drift of group %r: no texts; returning NaN", label)
        return (float("nan"), float("nan"), float("nan"))
    if cosines.size == 1:
        return (float(cosines[0]), float("nan"), float("nan"))
    return bootstrap_ci(cosines, np.mean, **bootstrap)
