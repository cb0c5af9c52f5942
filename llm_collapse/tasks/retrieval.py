"""LongEmbed-style passkey and needle retrieval: Acc@1 (= nDCG@1) and nDCG@10 per length, and Acc@1 by the
depth of the key (five depth bins) for the length x depth heatmap. The position task (echo's early-vs-late
test, `llm_collapse.data.position`): Acc@1 per length and position, depth 0.0 (early) or 1.0 (late), and
overall. Queries use the model's query prompt. Acc@1 CIs are 95% Wilson intervals over queries.

``passkey-start`` / ``needle-start`` (key at the start, haystack grows): the same documents cut to every length
and the same queries. Every length's documents go to one ``ctx.encode`` call, so `Embedder.encode` embeds all
lengths of a document from one forward where prefix sharing is exact (one per length and document where it is
not: the results are the same). No depth rows: every key sits at depth 0."""

from __future__ import annotations

import logging
import math

import numpy as np

from llm_collapse.data.synthetic import RetrievalTask
from llm_collapse.metrics.probes import retrieval_scores
from llm_collapse.tasks.base import TaskContext, paired_key, proportion_row

DEPTH_BINS = 5
HUB_SHARE = 0.5
"""A document that is the top-1 of at least this share of its pool's queries is reported as a hub: the
candidates of LongEmbed's protocol share one haystack, so their embeddings can be nearly equal and one
document can outrank the right one for most queries; Acc@1 then says more about that document than about
the keys."""
HUB_MIN_QUERIES = 4

logger = logging.getLogger(__name__)


def retrieve(ctx: TaskContext, task: RetrievalTask) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Embeds a task's queries and documents; returns what `score` returns."""
    queries = ctx.encode(list(task.queries), kind="query")
    documents = ctx.encode(list(task.documents))
    return score(queries, documents, task.relevant, pool=ctx.config.retrieval_pool, label=_label(ctx, task))


def score(
    queries: np.ndarray, documents: np.ndarray, relevant, pool: int | None = None, label: str | None = None
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """`retrieval_scores` (Acc@1, nDCG@10), the per-query top-1 hits (0/1) and the relevant document's rank
    among its pool's candidates (1 = top; a tie goes to the lower index, as the top-1 does: hit = rank 1).

    With ``pool``, documents ``[k * pool, (k + 1) * pool)`` form pool k and a query ranks only the pool of its
    relevant document (chance 1 / pool whatever the number of documents); scores are means over all queries.
    With ``label``, a hub (`HUB_SHARE`) is logged as a warning naming it.
    """
    relevant = np.asarray(relevant)
    pool = pool or len(documents)
    ranks = np.zeros(len(relevant), dtype=int)
    totals: dict[str, float] = {}
    for first in range(0, len(documents), pool):
        mine = np.flatnonzero((relevant >= first) & (relevant < first + pool))
        if not len(mine):
            continue
        block = documents[first : first + pool]
        scores = retrieval_scores(queries[mine], block, list(relevant[mine] - first), ks=(1, 10))
        for name in ("acc@1", "ndcg@10"):
            totals[name] = totals.get(name, 0.0) + scores[name] * len(mine)
        sims = queries[mine] @ block.T  # encode returns unit vectors: cosine
        gold = relevant[mine] - first
        gold_sims = sims[np.arange(len(mine)), gold][:, None]
        before = np.arange(block.shape[0])[None, :] < gold[:, None]
        ranks[mine] = 1 + (sims > gold_sims).sum(axis=1) + ((sims == gold_sims) & before).sum(axis=1)
        if label is not None:
            _warn_if_hub(label, first + np.argmax(sims, axis=1))
    hits = (ranks == 1).astype(int)
    return {name: total / len(relevant) for name, total in totals.items()}, hits, ranks


def _label(ctx: TaskContext, task: RetrievalTask) -> str:
    return f"{ctx.model} x {ctx.method}: {task.name} at {task.length} tokens"


def _warn_if_hub(label: str, top1: np.ndarray) -> None:
    """Logs a warning when one document is the top-1 of at least `HUB_SHARE` of a pool's queries."""
    if len(top1) < HUB_MIN_QUERIES:
        return
    documents, counts = np.unique(top1, return_counts=True)
    if counts.max() >= HUB_SHARE * len(top1):
        logger.warning(
            "%s: document %d is the top-1 of %d of %d queries (a hub: Acc@1 measures it more than the keys)",
            label, documents[counts.argmax()], counts.max(), len(top1),
        )  # fmt: skip


def accuracy_row(
    ctx: TaskContext,
    name: str,
    length: int,
    hits: np.ndarray,
    ranks: np.ndarray,
    ids: tuple[str, ...],
    depth: float = math.nan,
) -> dict:
    """One acc@1 row (`proportion_row`): the mean of ``hits``; each query's gold rank goes to the per-item
    results."""
    extra = {"gold_rank": np.asarray(ranks)}
    return proportion_row(ctx, paired_key(name, length, depth), "acc@1", hits, tuple(ids), extra=extra)


def run_retrieval(ctx: TaskContext, name: str) -> list[dict]:
    rows = []
    for task in ctx.inputs.retrieval[name]:
        scores, hits, ranks = retrieve(ctx, task)
        n, ids = len(task.queries), np.array(task.item_ids)
        rows.append(accuracy_row(ctx, name, task.length, hits, ranks, task.item_ids))
        rows.append(ctx.row(task=name, length=task.length, metric="ndcg@10", value=scores["ndcg@10"], n=n))
        depth = np.array([task.depths[r] for r in task.relevant])
        bins = np.minimum((depth * DEPTH_BINS).astype(int), DEPTH_BINS - 1)
        for b in range(DEPTH_BINS):
            chosen = bins == b
            if chosen.any():
                rows.append(
                    accuracy_row(
                        ctx, name, task.length, hits[chosen], ranks[chosen], tuple(ids[chosen]),
                        depth=(b + 0.5) / DEPTH_BINS,
                    )
                )  # fmt: skip
    return rows


def run_passkey(ctx: TaskContext) -> list[dict]:
    return run_retrieval(ctx, "passkey")


def run_needle(ctx: TaskContext) -> list[dict]:
    return run_retrieval(ctx, "needle")


def run_start(ctx: TaskContext, name: str) -> list[dict]:
    """Acc@1 and nDCG@10 per length for a ``-start`` task (queries embedded once, documents in one call)."""
    tasks = ctx.inputs.retrieval[name]
    if not tasks:
        return []
    queries = ctx.encode(list(tasks[0].queries), kind="query")  # the same queries at every length
    documents = ctx.encode([d for task in tasks for d in task.documents])  # one call: prefix sharing
    rows, start = [], 0
    for task in tasks:
        block = documents[start : start + len(task.documents)]
        start += len(task.documents)
        scores, hits, ranks = score(
            queries, block, task.relevant, pool=ctx.config.retrieval_pool, label=_label(ctx, task)
        )
        rows.append(accuracy_row(ctx, name, task.length, hits, ranks, task.item_ids))
        rows.append(
            ctx.row(task=name, length=task.length, metric="ndcg@10", value=scores["ndcg@10"], n=len(hits))
        )
    return rows


def run_passkey_start(ctx: TaskContext) -> list[dict]:
    return run_start(ctx, "passkey-start")


def run_needle_start(ctx: TaskContext) -> list[dict]:
    return run_start(ctx, "needle-start")


def run_position(ctx: TaskContext, name: str = "position") -> list[dict]:
    """Acc@1 per (length, position) with depth = the task's depth, plus an overall row per length."""
    rows, pooled = [], {}
    for task in ctx.inputs.retrieval[name]:
        _, hits, ranks = retrieve(ctx, task)
        rows.append(accuracy_row(ctx, name, task.length, hits, ranks, task.item_ids, depth=task.depths[0]))
        pooled.setdefault(task.length, []).append((hits, ranks, task.item_ids))
    for length, parts in pooled.items():
        hits, ranks, ids = (np.concatenate(part) for part in zip(*parts, strict=True))
        rows.append(accuracy_row(ctx, name, length, hits, ranks, tuple(ids)))
    return rows
