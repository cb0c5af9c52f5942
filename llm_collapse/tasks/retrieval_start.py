"""``passkey-start`` / ``needle-start`` (key at the start, haystack grows; not in LongEmbed): the same documents
cut to every length (`llm_collapse.data.synthetic.passkey_start_tasks`) and the same queries, so length
contrasts are paired. Acc@1 and nDCG@10 per length; no depth rows: every key sits at depth 0.

Every length's documents go to one ``ctx.encode`` call, so `Embedder.encode` embeds all lengths of a document
from one forward where prefix sharing is exact (one per length and document where it is not: the results are
the same); ``--dry-run`` counts the forwards from the same sweep (`RetrievalInputs.sweep`)."""

from __future__ import annotations

from llm_collapse.data.synthetic import needle_start_tasks, passkey_start_tasks
from llm_collapse.tasks.base import TaskContext
from llm_collapse.tasks.retrieval import (
    METRICS,
    RetrievalInputs,
    RetrievalOptions,
    accuracy_row,
    builder,
    cell_label,
    retrieval_workload,
    score,
)
from llm_collapse.tasks.task import Task


def run_start(ctx: TaskContext, inputs: RetrievalInputs, options: RetrievalOptions) -> list[dict]:
    """Acc@1 and nDCG@10 per length (queries embedded once, documents in one call)."""
    tasks, name = inputs.tasks, inputs.name
    if not tasks:
        return []
    queries = ctx.encode(list(tasks[0].queries), kind="query")  # the same queries at every length
    documents = ctx.encode([d for task in tasks for d in task.documents])  # one call: prefix sharing
    rows, start = [], 0
    for task in tasks:
        block = documents[start : start + len(task.documents)]
        start += len(task.documents)
        scores, hits, ranks = score(
            queries, block, task.relevant, pool=inputs.pool, label=cell_label(ctx, task)
        )
        rows.append(accuracy_row(ctx, name, task.length, hits, ranks, task.item_ids))
        rows.append(
            ctx.row(task=name, length=task.length, metric="ndcg@10", value=scores["ndcg@10"], n=len(hits))
        )
    return rows


# StartTaskError (a UserError) when the shortest length cannot hold a document's key line whole
PASSKEY_START, NEEDLE_START = (
    Task(
        name=name,
        title=title,
        run=run_start,
        metrics=METRICS,
        options=RetrievalOptions,
        build_inputs=builder(make, name, swept=True),
        workload=retrieval_workload(),
        headline=("acc@1",),
        nested_lengths=True,
    )
    for name, title, make in (
        ("passkey-start", "Passkey at the start, haystack grows", passkey_start_tasks),
        ("needle-start", "Needle at the start, haystack grows", needle_start_tasks),
    )
)
