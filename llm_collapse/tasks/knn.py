"""The kNN-by-length probe (the TempScale paper's IMDB-by-length analysis, offline): leave-one-out kNN
label accuracy within each length bin, with a 95% Wilson interval over its texts. The per-text correctness
behind it is left in ``ctx.paired`` for the runner's paired contrasts against ``base``."""

from __future__ import annotations

import math

from llm_collapse.metrics.probes import knn_correct
from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key, wilson_interval

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
        correct = knn_correct(vectors, labels, k=K, label=f"{ctx.model}/{ctx.method}/{length}")
        if correct is None:
            accuracy, ci = math.nan, (math.nan, math.nan)
        else:
            accuracy, ci = float(correct.mean()), wilson_interval(int(correct.sum()), len(group))
            ctx.paired[paired_key("knn", length)] = PairedItems("knn_accuracy", correct)
        rows.append(
            ctx.row(task="knn", length=length, metric="knn_accuracy", value=accuracy, ci=ci, n=len(group))
        )
    return rows
