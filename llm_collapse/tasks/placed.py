"""The placed task: a labelled passage at a depth inside filler that grows with the length
(`llm_collapse.data.placed`), probed per length and depth. The label information is the same at every
length, so a probe's change with length is what length does to the embedding, not what the text says; the
method x length interaction of these rows is the TempScale claim's downstream test with the information fixed.

Probes (``placed_probes``), each with per-item 0/1 correctness for the paired contrasts (exact McNemar):

- ``logistic_accuracy``: MTEB's classification protocol (`llm_collapse.metrics.logistic`), out of fold within
  one length and depth; the passages are in the same order at every length and for every method, so the
  folds are the same and the contrasts paired.
- ``knn_accuracy``: leave-one-out kNN (k = 5, cosine, majority vote) among the passages of one length and depth.
- ``knn_cross_accuracy``: the TempScale paper's probe: the pool holds the passages at every length of the
  depth, a text's own passage at the other lengths excluded from its neighbours.

Decisions:

- Rows carry the depth; a report's value-vs-length figure averages the depths (n-weighted), its tables and
  the contrasts keep them apart.
- Wilson intervals treat the passages as independent (the kNN pool is shared, so they are approximate).
"""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.logistic import logistic_correct
from llm_collapse.metrics.probes import knn_correct
from llm_collapse.tasks.base import TaskContext, paired_key, proportion_row
from llm_collapse.tasks.registry import KNN_NEIGHBOURS, PLACED_FOLDS

TASK = "placed"
LOGISTIC, WITHIN, CROSS = "logistic_accuracy", "knn_accuracy", "knn_cross_accuracy"


def run_placed(ctx: TaskContext) -> list[dict]:
    placed = ctx.inputs.placed
    vectors = ctx.encode([p.text for p in placed])  # one call: the cache and the batching see every text
    labels = np.array([p.label for p in placed])
    probes = ctx.config.placed_probes
    name = f"{ctx.model}/{ctx.method}"
    rows = []
    for depth in sorted({p.depth for p in placed}):
        at_depth = [i for i, p in enumerate(placed) if p.depth == depth]
        cross = None
        if "knn" in probes:  # item ids as groups: a passage never finds itself at another length
            groups = [placed[i].item_id for i in at_depth]
            cross = knn_correct(vectors[at_depth], labels[at_depth], k=KNN_NEIGHBOURS, groups=groups,
                                label=f"{name}/depth {depth}/all lengths")  # fmt: skip
            cross = dict(zip(at_depth, cross, strict=True)) if cross is not None else None
        for length in sorted({placed[i].length for i in at_depth}):
            part = [i for i in at_depth if placed[i].length == length]
            X, y, ids = vectors[part], labels[part], tuple(placed[i].item_id for i in part)
            where = f"{name}/{length}/depth {depth}"
            if "logistic" in probes:
                correct = logistic_correct(X, y, folds=PLACED_FOLDS, seed=ctx.config.seed, label=where)
                rows.append(proportion_row(ctx, paired_key(TASK, length, depth), LOGISTIC, correct, ids))
            if "knn" in probes:
                within = knn_correct(X, y, k=KNN_NEIGHBOURS, label=where)
                rows.append(proportion_row(ctx, paired_key(TASK, length, depth, WITHIN), WITHIN, within, ids))
                mine = None if cross is None else np.array([cross[i] for i in part])
                rows.append(proportion_row(ctx, paired_key(TASK, length, depth, CROSS), CROSS, mine, ids))
    return rows
