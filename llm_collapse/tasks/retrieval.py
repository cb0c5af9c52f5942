"""LongEmbed-style passkey and needle retrieval: Acc@1 (= nDCG@1) and nDCG@10 per length, and Acc@1 by the
depth of the key (five depth bins) for the length x depth heatmap. Queries use the model's query prompt."""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.probes import retrieval_scores
from llm_collapse.tasks.base import TaskContext, wilson_interval

DEPTH_BINS = 5


def run_retrieval(ctx: TaskContext, name: str) -> list[dict]:
    rows = []
    for task in ctx.inputs.retrieval[name]:
        queries = ctx.encode(list(task.queries), kind="query")
        documents = ctx.encode(list(task.documents))
        scores = retrieval_scores(queries, documents, list(task.relevant), ks=(1, 10))
        n = len(task.queries)
        hits = (np.argmax(queries @ documents.T, axis=1) == np.array(task.relevant)).astype(int)
        ci = wilson_interval(int(hits.sum()), n)
        rows.append(ctx.row(task=name, length=task.length, metric="acc@1", value=scores["acc@1"], ci=ci, n=n))
        rows.append(ctx.row(task=name, length=task.length, metric="ndcg@10", value=scores["ndcg@10"], n=n))
        depth = np.array([task.depths[r] for r in task.relevant])
        bins = np.minimum((depth * DEPTH_BINS).astype(int), DEPTH_BINS - 1)
        for b in range(DEPTH_BINS):
            chosen = hits[bins == b]
            if len(chosen):
                rows.append(
                    ctx.row(
                        task=name,
                        length=task.length,
                        metric="acc@1",
                        depth=(b + 0.5) / DEPTH_BINS,
                        value=float(chosen.mean()),
                        ci=wilson_interval(int(chosen.sum()), len(chosen)),
                        n=len(chosen),
                    )
                )
    return rows
