"""Measurement tasks of a comparison run. Each takes a `TaskContext` and returns tidy result rows."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from llm_collapse.tasks.base import TaskContext
from llm_collapse.tasks.collapse import run_collapse
from llm_collapse.tasks.knn import run_knn
from llm_collapse.tasks.layerwise import run_layerwise
from llm_collapse.tasks.retrieval import run_position, run_retrieval

TASK_RUNNERS: dict[str, Callable[[TaskContext], list[dict]]] = {
    "collapse": run_collapse,
    "knn": run_knn,
    "passkey": partial(run_retrieval, name="passkey"),
    "needle": partial(run_retrieval, name="needle"),
    "position": run_position,
    "layerwise": run_layerwise,
}

__all__ = ["TASK_RUNNERS", "TaskContext"]
