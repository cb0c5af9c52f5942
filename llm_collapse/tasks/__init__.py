"""Measurement tasks of a comparison run. A task is one `Task` (`llm_collapse.tasks.task`: its options, inputs,
workload, metrics and runner), declared in a module of its own; the registry (`llm_collapse.tasks.registry`)
holds every task and metric."""

from __future__ import annotations

from llm_collapse.tasks.registry import METRICS, TASKS, metric_info, register_task
from llm_collapse.tasks.task import MetricInfo, Options, Pass, Task, TaskInputs, Workload, option

__all__ = [
    "METRICS", "TASKS", "MetricInfo", "Options", "Pass", "Task", "TaskInputs", "Workload", "metric_info", "option",
    "register_task",
]  # fmt: skip
