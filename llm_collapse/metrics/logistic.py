"""A cross-validated logistic-regression label probe: MTEB's classification protocol, per item.

MTEB (``AbsTaskClassification``) fits scikit-learn's ``LogisticRegression(max_iter=100)`` on embeddings of a
training split and reports the accuracy on a test split. A length sweep has no fixed split, so every item
is predicted once, out of fold: stratified k-fold (shuffled with a seed, the same folds for every method
and length of a run), a fresh classifier per fold on the raw embeddings. The per-item 0/1 correctness is
what the paired contrasts need (exact McNemar against ``base``: the same items in the same folds).

Decisions:

- ``LogisticRegression`` with scikit-learn's defaults and ``max_iter=100`` (MTEB's setting); its lbfgs
  solver is deterministic, so the probe is a function of the embeddings, labels, folds and seed.
- Folds are stratified; a class with fewer members than folds gives no accuracy (a warning and None),
  as a kNN probe with too few items does (`llm_collapse.metrics.probes.knn_correct`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

logger = logging.getLogger(__name__)

FOLDS = 5
MAX_ITER = 100  # MTEB's LogisticRegression(max_iter=100)


def logistic_correct(
    X: np.ndarray,
    labels: Sequence | np.ndarray,
    *,
    folds: int = FOLDS,
    seed: int = 0,
    max_iter: int = MAX_ITER,
    label: str | None = None,
) -> np.ndarray | None:
    """Out-of-fold correctness of a logistic-regression classifier, per item.

    Args:
        X: (n, d) embeddings.
        labels: (n,) class labels.
        folds: Stratified folds (each item is predicted by the classifier fitted without its fold).
        seed: Shuffles the items before they are dealt into folds.
        max_iter: lbfgs iterations.
        label: Group name for warnings.

    Returns:
        (n,) 0/1 ints, whether each item's out-of-fold prediction equals its label; None (with a warning)
        for fewer than 2 classes or a class with fewer than ``folds`` members.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    X = np.asarray(X)
    y = np.asarray(labels)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"need (n, d) embeddings and (n,) labels, got {X.shape} and {y.shape}")
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2 or counts.min() < folds:
        logger.warning(
            "logistic probe of group %r needs >= 2 classes of >= %d items each, has %s; returning NaN",
            label,
            folds,
            dict(zip(classes.tolist(), counts.tolist(), strict=True)),
        )
        return None
    predicted = np.empty(y.shape, dtype=y.dtype)
    for train, test in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(X, y):
        model = LogisticRegression(max_iter=max_iter).fit(X[train], y[train])
        predicted[test] = model.predict(X[test])
    return (predicted == y).astype(np.int64)
