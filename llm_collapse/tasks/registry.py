"""The task registry: every task (`llm_collapse.tasks.task.Task`, each declared in a module of its own), every
metric they write with its `MetricInfo`, and every task option. The configuration (``--tasks``, the option
flags and YAML keys), the preflight, the runner, the plan, the figures and the report all read it; none of them
names a task.

Adding a task: declare its `Task` in a module of its own and call `register_task` with it (a built-in is listed
in `BUILT_IN`); ``--tasks``, its flags, the run, the plan, figures and report pick it up (docs/contributing.md).
Reading the registry imports no model code: task modules import torch only where a cell runs.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, fields
from typing import Any

from llm_collapse.tasks import (
    collapse,
    knn,
    layerwise,
    placed,
    position,
    quantization,
    retrieval,
    retrieval_start,
    socm,
)
from llm_collapse.tasks.task import (
    CLOSER_IF_HIGHER,
    DEFAULT_FIGURES,
    HIGHER_IS_BETTER,
    MORE_COLLAPSE_IF_HIGHER,
    MORE_COLLAPSE_IF_LOWER,
    VS_BASE,
    VS_CONTROL,
    VS_INTERACTION,
    VS_REFERENCE,
    VS_SHORTEST,
    MetricInfo,
    Options,
    Task,
)

__all__ = [
    "BUILT_IN", "CLOSER_IF_HIGHER", "DEFAULT_FIGURES", "HEADLINE", "HIGHER_IS_BETTER", "METRICS",
    "MORE_COLLAPSE_IF_HIGHER", "MORE_COLLAPSE_IF_LOWER", "PAIRED_METRICS", "TASKS", "VS_BASE", "VS_CONTROL",
    "VS_INTERACTION", "VS_REFERENCE", "VS_SHORTEST", "MetricInfo", "Task", "length_paired_tasks", "margin_for",
    "DeclaredOption", "metric_info", "option_fields", "register_task", "tasks_with",
]  # fmt: skip

BUILT_IN: tuple[Task, ...] = (
    collapse.TASK,
    knn.TASK,
    retrieval.PASSKEY,
    retrieval.NEEDLE,
    retrieval_start.PASSKEY_START,
    retrieval_start.NEEDLE_START,
    position.TASK,
    placed.TASK,
    layerwise.TASK,
    quantization.TASK_SPEC,
    socm.TASK,
)
"""The built-in tasks, in report order."""

TASKS: dict[str, Task] = {}
"""Every task, in report order (`register_task` appends)."""
METRICS: dict[str, MetricInfo] = {}
"""Every metric a task writes, in figure order, then their paired contrasts."""
PAIRED_METRICS: list[str] = []
HEADLINE: list[tuple[str, str]] = []
"""The (task, metric) pairs of the summary table and the temperature sweep, in this order (tasks in report
order, each task's `Task.headline` in its order)."""
_CONTRASTS = (
    (VS_BASE, "base"),
    (VS_SHORTEST, "shortest length"),
    (VS_INTERACTION, "base, change from the shortest length"),
    (VS_REFERENCE, "reference model"),
    (VS_CONTROL, "matched control"),
)


def _contrast_infos(metrics: list[str]) -> dict[str, MetricInfo]:
    """The paired contrasts' labels: a difference keeps its metric's direction (a positive pairwise-cosine
    difference = more collapse than base)."""
    return {
        f"{metric}{suffix}": MetricInfo(
            f"{METRICS[metric].label} − {what} (paired)",
            METRICS[metric].direction,
            digits=METRICS[metric].digits,
        )
        for suffix, what in _CONTRASTS
        for metric in metrics
    }


def _new_metrics(task: Task) -> dict[str, MetricInfo]:
    """``task``'s metrics not registered yet; one registered already must be declared the same."""
    new = {}
    for name, info in task.metrics.items():
        known = METRICS.get(name)
        if known is None:
            new[name] = info
        elif known != info:
            raise ValueError(
                f"task {task.name}: metric {name!r} is registered as {known}, not {info}; declare it the same "
                "(llm_collapse.tasks.registry.metric_info) or name it differently"
            )
    return new


def _check_options(task: Task) -> None:
    """An option another task declares too (``label``) must be the same field, so that it is one flag."""
    if task.options is None:
        return
    declared = option_fields()
    for f in fields(task.options):
        other = declared.get(f.name)
        if other is not None and (other.field.type, other.field.default, other.field.metadata) != (
            f.type, f.default, f.metadata
        ):  # fmt: skip
            raise ValueError(
                f"task {task.name}: option {f.name!r} is declared differently by task {other.tasks[0]}; declare "
                "it the same or name it differently"
            )


def register_task(task: Task) -> Task:
    """Adds ``task`` after the tasks registered so far: ``--tasks``, its option flags and YAML keys, the run, the
    plan, figures and report pick it up. Its new metrics get their labels and, where paired, their contrasts'.

    Raises:
        ValueError: A task of that name exists, or a metric or option it shares with another task is declared
            differently there.
    """
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} is already registered; give the task another name")
    new = _new_metrics(task)
    _check_options(task)
    METRICS.update(new)
    paired = [name for name, info in new.items() if info.paired]
    PAIRED_METRICS.extend(paired)
    METRICS.update(_contrast_infos(paired))
    TASKS[task.name] = task
    HEADLINE.extend((task.name, metric) for metric in task.headline)
    return task


def _register_built_ins() -> None:
    """The built-ins, with every plain metric before the first contrast (the figure order of committed reports)."""
    for task in BUILT_IN:
        _check_options(task)
        METRICS.update(_new_metrics(task))
        TASKS[task.name] = task
        HEADLINE.extend((task.name, metric) for metric in task.headline)
    PAIRED_METRICS.extend(name for name, info in METRICS.items() if info.paired)
    METRICS.update(_contrast_infos(PAIRED_METRICS))


def metric_info(metric: str) -> MetricInfo:
    """Label and direction of ``metric``; unknown metrics get their own name and no direction."""
    return METRICS.get(metric, MetricInfo(metric, ""))


def margin_for(metric: str, overrides: dict[str, float] | None = None) -> float | None:
    """The equivalence margin of ``metric``: ``overrides`` (a run's ``margins``) first, then its `MetricInfo`'s.

    A paired key ``"task/metric"`` (e.g. ``"knn/knn_cross_accuracy"``) is looked up whole, then by its
    metric. None when no margin is declared (then no equivalence is claimed for that metric). Every
    override must be a positive finite number (checked even when another metric is asked for).
    """
    from llm_collapse.metrics.proportions import check_margin

    overrides = dict(overrides or {})
    for key, value in overrides.items():
        check_margin(value, name=f"margin for {key!r}")
    for key in (metric, metric.rsplit("/", 1)[-1]):
        if key in overrides:
            return float(overrides[key])
        if key in METRICS and METRICS[key].margin is not None:
            return METRICS[key].margin
    return None


@dataclass(frozen=True)
class DeclaredOption:
    """One task option as the configuration sees it: its field, and the tasks and `Options` classes declaring it."""

    field: Field
    tasks: tuple[str, ...]
    classes: tuple[type[Options], ...]

    @property
    def flag(self) -> str:
        return "--" + self.field.name.replace("_", "-")

    @property
    def always_hashed(self) -> bool:
        return bool(self.field.metadata["always_hashed"])

    def default(self, limit: int | None = None) -> Any:
        """Its value when not given (capped by ``--limit``, as the run caps it)."""
        options = self.classes[0]()
        return getattr(options if limit is None else options.limited(limit), self.field.name)

    def refusal(self) -> str:
        """The one line refusing it in a run without any of its tasks (it would change the run id and nothing else)."""
        if len(self.tasks) > 1 and len(self.classes) == 1:  # one set of options shared by a family of tasks
            whose, which = f"{self.classes[0].title} ({', '.join(sorted(self.tasks))})", "one"
        else:
            whose, which = (
                "--tasks " + " or ".join(self.tasks),
                "one" if len(self.tasks) > 1 else self.tasks[0],
            )
        return f"{self.flag} applies to {whose} only; add {which} to --tasks or drop {self.flag}"


def option_fields() -> dict[str, DeclaredOption]:
    """Every task option by name, in registry order (the first task declaring it decides its place)."""
    tasks: dict[str, list[str]] = {}
    classes: dict[str, list[type[Options]]] = {}
    first: dict[str, Field] = {}
    for task in TASKS.values():
        for f in fields(task.options) if task.options is not None else ():
            first.setdefault(f.name, f)
            tasks.setdefault(f.name, []).append(task.name)
            if task.options not in classes.setdefault(f.name, []):
                classes[f.name].append(task.options)
    return {name: DeclaredOption(f, tuple(tasks[name]), tuple(classes[name])) for name, f in first.items()}


def length_paired_tasks(design: str) -> frozenset[str]:
    """Tasks whose items are the same at every length under ``design`` (they get ``*_vs_shortest`` rows)."""
    return frozenset(
        name for name, task in TASKS.items() if task.nested_lengths or (design == "prefix" and task.sample)
    )


def tasks_with(*, figure: str | None = None, reads_corpus: bool | None = None) -> frozenset[str]:
    """Names of the tasks that get that figure kind and/or have that corpus use."""
    return frozenset(
        name
        for name, task in TASKS.items()
        if (figure is None or figure in task.figures)
        and (reads_corpus is None or task.reads_corpus is reads_corpus)
    )


_register_built_ins()
