"""The position task (echo's early-vs-late test, `llm_collapse.data.position`): one discriminating sentence
first (early) or last (late) in shared filler; Acc@1 per length and position, depth 0.0 (early) or 1.0 (late),
and overall per length. Queries use the model's query prompt; CIs are 95% Wilson intervals over queries."""

from __future__ import annotations

import numpy as np

from llm_collapse.data.position import POSITIONS, position_task
from llm_collapse.tasks.base import TaskContext
from llm_collapse.tasks.retrieval import (
    METRICS,
    RetrievalInputs,
    RetrievalOptions,
    accuracy_row,
    builder,
    retrieval_workload,
    retrieve,
)
from llm_collapse.tasks.task import Task


def run_position(ctx: TaskContext, inputs: RetrievalInputs, options: RetrievalOptions) -> list[dict]:
    """Acc@1 per (length, position) with depth = the task's depth, plus an overall row per length."""
    rows, pooled, name = [], {}, inputs.name
    for task in inputs.tasks:
        _, hits, ranks = retrieve(ctx, task, inputs.pool)
        rows.append(accuracy_row(ctx, name, task.length, hits, ranks, task.item_ids, depth=task.depths[0]))
        pooled.setdefault(task.length, []).append((hits, ranks, task.item_ids))
    for length, parts in pooled.items():
        hits, ranks, ids = (np.concatenate(part) for part in zip(*parts, strict=True))
        rows.append(accuracy_row(ctx, name, length, hits, ranks, tuple(ids)))
    return rows


def _position_tasks(lengths, draw):
    return [position_task(length, position, draw) for length in lengths for position in POSITIONS]


TASK = Task(
    name="position",
    title="Early vs late position (echo test)",
    run=run_position,
    metrics={"acc@1": METRICS["acc@1"]},
    options=RetrievalOptions,
    build_inputs=builder(_position_tasks, "position"),
    workload=retrieval_workload(copies=2),  # early and late documents; their queries are the same sentences
    figures=("length", "position"),
    headline=("acc@1",),
)
