"""The kNN-by-length probe (the TempScale paper's IMDB-by-length analysis, offline): leave-one-out kNN
label accuracy within each length bin, with a 95% Wilson interval over its texts."""

from __future__ import annotations

import math

from llm_collapse.metrics.probes import knn_label_accuracy
from llm_collapse.tasks.base import TaskContext, wilson_interval

K = 5


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
        rows.append(
            ctx.row(task="knn", length=length, metric="knn_accuracy", value=accuracy, ci=ci, n=len(group))
        )
    return rows
