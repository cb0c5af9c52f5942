"""Measurement tasks of a comparison run. Each takes a `TaskContext` and returns tidy result rows; the
registry (`llm_collapse.tasks.registry.TASKS`) says what each task is called, writes and shows."""

from __future__ import annotations

from llm_collapse.tasks.registry import (
    METRICS,
    RUNNABLE,
    TASKS,
    MetricInfo,
    TaskSpec,
    metric_info,
    register_task,
)

__all__ = ["METRICS", "RUNNABLE", "TASKS", "MetricInfo", "TaskSpec", "metric_info", "register_task"]
