"""The kNN-by-length probe (the TempScale paper's IMDB-by-length analysis, offline): leave-one-out kNN
label accuracy within each length bin, with a 95% Wilson interval over its texts. The per-text correctness
behind it is left in ``ctx.paired`` for the runner's paired contrasts against ``base``."""

from __future__ import annotations

import logging
import math

import numpy as np

from llm_collapse.metrics.collapse import normalize_rows
from llm_collapse.metrics.probes import _vote, knn_label_accuracy
from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key, wilson_interval

logger = logging.getLogger(__name__)

K = 5


def knn_correct(X: np.ndarray, labels, k: int = K) -> np.ndarray:
    """(n,) 0/1: whether each item's leave-one-out kNN vote equals its label.

    Mirrors `llm_collapse.metrics.probes.knn_label_accuracy` (same ties, same vote), whose mean it equals
    when that is defined; the caller checks that it is (NaN: < 2 classes or n <= k).
    """
    U = normalize_rows(X)  # (n, d)
    classes, y_ids = np.unique(np.asarray(labels), return_inverse=True)
    sims = U @ U.T  # (n, n); bins hold at most a few hundred texts
    np.fill_diagonal(sims, -np.inf)  # exclude self
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]  # (n, k), ties -> lower index
    return (_vote(y_ids[order], classes.size) == y_ids).astype(int)


def run_knn(ctx: TaskContext) -> list[dict]:
    label_key = ctx.config.knn_label
    groups = ctx.inputs.by_length()
    rows = []
    for length in sorted(groups):
        group = groups[length]
        labels = [t.labels.get(label_key) for t in group]
        if any(label is None for label in labels):
            raise ValueError(f"corpus {ctx.config.corpus!r} texts have no label {label_key!r}; set --label")
        vectors = ctx.encode([t.text for t in group])
        accuracy = knn_label_accuracy(vectors, labels, k=K, label=f"{ctx.model}/{ctx.method}/{length}")
        ci = (
            (math.nan, math.nan)
            if math.isnan(accuracy)
            else wilson_interval(round(accuracy * len(group)), len(group))
        )
        if not math.isnan(accuracy):
            correct = knn_correct(vectors, labels, k=K)
            if int(correct.sum()) == round(accuracy * len(group)):  # guards the mirror of the probe
                ctx.paired[paired_key("knn", length)] = PairedItems("knn_accuracy", correct)
            else:
                logger.warning(
                    "%s/%s/%s: per-text kNN correctness disagrees; no paired contrast",
                    ctx.model,
                    ctx.method,
                    length,
                )
        rows.append(
            ctx.row(task="knn", length=length, metric="knn_accuracy", value=accuracy, ci=ci, n=len(group))
        )
    return rows
