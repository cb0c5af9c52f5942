"""LongEmbed-style passkey and needle retrieval: Acc@1 (= nDCG@1) and nDCG@10 per length, and Acc@1 by the
depth of the key (five depth bins) for the length x depth heatmap. Queries use the model's query prompt. Acc@1
CIs are 95% Wilson intervals over queries.

The retrieval tasks' shared parts live here too: their options (`RetrievalOptions`: documents, queries and the
pool of candidates per query), their inputs (`RetrievalInputs`) and the scoring; the ``-start`` variants
(`llm_collapse.tasks.retrieval_start`) and the position task (`llm_collapse.tasks.position`) build other
documents from the same draw.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from llm_collapse.data.synthetic import MAX_DOCUMENTS, Draw, RetrievalTask, needle_task, passkey_task
from llm_collapse.errors import ConfigError
from llm_collapse.metrics.probes import retrieval_scores
from llm_collapse.tasks.base import TaskContext, paired_key, proportion_row
from llm_collapse.tasks.knn import ACCURACY_MARGIN
from llm_collapse.tasks.task import (
    HIGHER_IS_BETTER,
    MetricInfo,
    Options,
    RunView,
    Task,
    TaskInputs,
    Workload,
    option,
)

DEPTH_BINS = 5
HUB_SHARE = 0.5
"""A document that is the top-1 of at least this share of its pool's queries is reported as a hub: the
candidates of LongEmbed's protocol share one haystack, so their embeddings can be nearly equal and one
document can outrank the right one for most queries; Acc@1 then says more about that document than about
the keys."""
HUB_MIN_QUERIES = 4

logger = logging.getLogger(__name__)

METRICS = {
    "acc@1": MetricInfo("Acc@1", HIGHER_IS_BETTER, paired=True, proportion=True, margin=ACCURACY_MARGIN),
    "ndcg@10": MetricInfo("nDCG@10", HIGHER_IS_BETTER),
}
"""The retrieval tasks' metrics."""


@dataclass(frozen=True)
class RetrievalOptions(Options):
    """The documents, queries and candidate pools of every retrieval task (passkey, needle, their ``-start``
    variants, position)."""

    title: ClassVar[str] = "the retrieval tasks"
    retrieval_docs: int = option(
        20, help="passkey/needle candidates per length (LongEmbed: 100)", always_hashed=True
    )
    retrieval_queries: int = option(
        10, help="passkey/needle queries per length (LongEmbed: 50)", always_hashed=True
    )
    retrieval_pool: int | None = option(
        help="candidates per query: each length's documents are split into pools of this many and a query ranks "
        "its own pool, so chance is 1/pool at every --retrieval-docs",
        shown="all documents of the length, as LongEmbed",
    )

    def validate(self, run: RunView, task: str) -> RetrievalOptions:
        docs, queries, pool = self.retrieval_docs, self.retrieval_queries, self.retrieval_pool
        for name, value in (("retrieval_docs", docs), ("retrieval_queries", queries)):
            if value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if queries > docs:
            raise ConfigError("--retrieval-queries must be <= --retrieval-docs")
        limit = MAX_DOCUMENTS.get(task)
        if limit is not None and docs > limit:
            raise ConfigError(
                f"--retrieval-docs {docs} is more than task {task!r} can generate ({limit} documents per length); "
                f"use --retrieval-docs <= {limit}"
            )
        if pool is None and docs < 2:
            raise ConfigError(
                f"--retrieval-docs {docs} leaves each query a single candidate, so Acc@1 is always 1; "
                "use --retrieval-docs >= 2"
            )
        if pool is not None and (pool < 2 or docs % pool):
            raise ConfigError(
                f"--retrieval-pool must be >= 2 and divide --retrieval-docs ({docs}), got {pool}; e.g. "
                "--retrieval-docs 96 --retrieval-pool 24"
            )
        return self

    def limited(self, n: int) -> RetrievalOptions:
        docs = min(self.retrieval_docs, n)
        return RetrievalOptions(docs, min(self.retrieval_queries, docs), self.retrieval_pool)

    def draw(self, run: RunView, tokenizer) -> Draw:
        """The run's draw of documents and queries, fitted to each length under ``tokenizer``."""
        return Draw(run.seed, self.retrieval_docs, self.retrieval_queries, tokenizer, fit_to_tokens=True)


@dataclass
class RetrievalInputs(TaskInputs):
    """One retrieval task's documents and queries per length (``tasks``); ``swept``: its documents are token
    prefixes of the same documents at every length (the ``-start`` tasks)."""

    name: str
    tasks: list[RetrievalTask] = field(default_factory=list)
    pool: int | None = None
    swept: bool = False

    def documents(self) -> list[str]:
        return [d for task in self.tasks for d in task.documents]

    def queries(self) -> list[str]:
        return [q for task in self.tasks for q in task.queries]

    def counted(self) -> list[tuple[str, int]]:
        return [(d, task.length) for task in self.tasks for d in task.documents]  # fitted to its length

    def sweep(self) -> tuple[list[str], list[str]]:
        if not self.swept or not self.tasks:
            return [], []
        return self.documents(), list(max(self.tasks, key=lambda task: task.length).documents)

    def describe(self) -> dict:
        """Candidates per query at each length (1 / this is chance Acc@1)."""
        candidates = {str(t.length): min(len(t.documents), self.pool or len(t.documents)) for t in self.tasks}
        return {"retrieval": {self.name: candidates}}


def builder(make: Callable[[Sequence[int], Draw], list[RetrievalTask]], name: str, *, swept: bool = False):
    """A `Task.build_inputs` of a retrieval task whose documents ``make(lengths, draw)`` generates."""

    def build(run: RunView, options: RetrievalOptions, tokenizer, documents=None) -> RetrievalInputs:
        tasks = make(run.lengths, options.draw(run, tokenizer))
        return RetrievalInputs(name, tasks, options.retrieval_pool, swept)

    return build


def retrieval_workload(copies: int = 1):
    """A `Task.workload` of a retrieval task: ``copies`` documents per drawn document (position: early and late)
    and the queries, per length."""

    def workload(run: RunView, options: RetrievalOptions, device: str) -> Workload:
        return Workload(documents=copies * options.retrieval_docs, queries=options.retrieval_queries)

    return workload


def retrieve(
    ctx: TaskContext, task: RetrievalTask, pool: int | None
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Embeds a task's queries and documents; returns what `score` returns."""
    queries = ctx.encode(list(task.queries), kind="query")
    documents = ctx.encode(list(task.documents))
    return score(queries, documents, task.relevant, pool=pool, label=cell_label(ctx, task))


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


def cell_label(ctx: TaskContext, task: RetrievalTask) -> str:
    """Names a cell and length in warnings (a hub)."""
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


def run_retrieval(ctx: TaskContext, inputs: RetrievalInputs, options: RetrievalOptions) -> list[dict]:
    """Acc@1 and nDCG@10 per length, and Acc@1 per depth bin of the key."""
    rows, name = [], inputs.name
    for task in inputs.tasks:
        scores, hits, ranks = retrieve(ctx, task, inputs.pool)
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


def _each_length(
    make: Callable[[int, Draw], RetrievalTask],
) -> Callable[[Sequence[int], Draw], list[RetrievalTask]]:
    return lambda lengths, draw: [make(length, draw) for length in lengths]


PASSKEY, NEEDLE = (
    Task(
        name=name,
        title=title,
        run=run_retrieval,
        metrics=METRICS,
        options=RetrievalOptions,
        build_inputs=builder(_each_length(make), name),
        workload=retrieval_workload(),
        figures=("length", "depth"),
        headline=("acc@1",),
    )
    for name, title, make in (
        ("passkey", "Passkey retrieval", passkey_task),
        ("needle", "Needle retrieval", needle_task),
    )
)
