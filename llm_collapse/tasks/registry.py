"""The task registry: every task's name, runner, metrics (label, direction, decimals), figure kinds, headline
metrics and report section, in one place. The configuration (`llm_collapse.run.config.TASKS`), the preflight
(which tasks read the corpus), the runner, the figures (order, which kinds a task gets) and the report
(section titles, the summary table's metrics, table judgements) all read it.

Runners are named as ``module:function`` and imported on first use, so reading the registry (the reporting
code does) imports no model code. Adding a task: write its runner (``(TaskContext) -> list of result
rows``) and call `register_task` with its `TaskSpec` and metrics (a built-in is a `TaskSpec` in `TASKS`); the
command line, figures and report pick it up (docs/contributing.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

MORE_COLLAPSE_IF_HIGHER = "higher = more collapse"
MORE_COLLAPSE_IF_LOWER = "lower = more collapse"
HIGHER_IS_BETTER = "higher is better"
CLOSER_IF_HIGHER = "higher = closer to the reference"
VS_BASE = "_vs_base"
"""Suffix of the paired contrasts (`llm_collapse.tasks.base.contrast_rows`): method - base on the same texts."""
VS_SHORTEST = "_vs_shortest"
"""Suffix of the paired length contrasts (`llm_collapse.tasks.base.length_contrast_rows`): length L - the
shortest length on the same items (prefix design, or a task with nested lengths)."""
VS_INTERACTION = VS_BASE + VS_SHORTEST
"""Suffix of the method x length interaction (`llm_collapse.tasks.interaction`): (method - base) at length L
minus (method - base) at the shortest length, on the same items."""
VS_REFERENCE = "_vs_reference"
"""Suffix of the paired model contrasts (``reference_model`` in the run config): a model - the reference model,
the same method on the same items."""
VS_CONTROL = "_vs_control"
"""Suffix of the paired method contrasts (``controls`` in the run config): a method - its matched control
method, the same model on the same items (YaRN against its hidden temperature alone)."""


@dataclass(frozen=True)
class MetricInfo:
    """How to label a metric and which way is bad.

    Attributes:
        label: Axis and table label.
        direction: One of `MORE_COLLAPSE_IF_HIGHER`, `MORE_COLLAPSE_IF_LOWER`, `HIGHER_IS_BETTER`,
            `CLOSER_IF_HIGHER`, or "" when unknown (no judgement is printed).
        digits: Decimals in tables (drift cosines sit within 1e-3 of 1, where 3 decimals say nothing).
        paired: Whether the runner writes ``<metric>_vs_base`` paired contrasts for it.
        proportion: Whether it is a mean of per-item 0/1 outcomes (value x n successes of n): unpaired
            differences then get an exact test from the counts (`llm_collapse.reporting.significance`).
    """

    label: str
    direction: str
    digits: int = 3
    paired: bool = False
    proportion: bool = False


DEFAULT_FIGURES: tuple[str, ...] = ("length",)
"""The figure kinds of a task that declares none, and of rows whose task the registry does not know."""


@dataclass(frozen=True)
class TaskSpec:
    """One task.

    Attributes:
        name: Its ``--tasks`` name and the ``task`` column of its rows.
        title: Its report section.
        runner: ``"module:function"`` taking a `TaskContext` and returning result rows; None for a task whose
            rows come from another command (none today).
        metrics: The metrics its rows carry (keys of `METRICS`).
        figures: The figure kinds it gets, in report order (`llm_collapse.reporting.figures.FIGURE_KINDS`):
            ``"length"`` (each metric against length), ``"depth"`` (Acc@1 by depth and length: passkey,
            needle), ``"position"`` (early vs late) or ``"layerwise"`` (statistics against layer).
        headline: Its metrics in the summary table and the temperature sweep (`HEADLINE`), in that order.
        reads_corpus: Whether it samples the run's corpus (else it generates its own texts).
        nested_lengths: Whether its items are the same at every length whatever the design (the ``-start``
            tasks: token prefixes of one long text each; ``placed``: one passage in more filler), so length
            contrasts are paired. Tasks that
            read the corpus are paired across lengths under ``--design prefix`` only.
        texts: What it embeds per length and method, for the cost estimates: ``"binned"`` (the run's corpus
            texts, shared by every task that says so), ``"retrieval"`` (``retrieval_docs`` documents and
            ``retrieval_queries`` queries), ``"retrieval-pair"`` (two documents each, early and late, and the
            queries once), ``"layerwise"`` (``layerwise_per_bin`` texts with every layer's hidden states) or
            ``"variants"`` (the binned texts again per quantization, costed by ``--dry-run`` only) or
            ``"placed"`` (``max_per_bin`` labelled passages in filler, per depth).
        vectors_only: Whether it reads the model only through ``TaskContext.encode``'s vectors (and the
            tokenizer), so ``llm-collapse report --recompute`` can rebuild its rows from a run's saved embeddings;
            False for a task that runs the model itself (hidden states, attention, quantized variants).
    """

    name: str
    title: str
    runner: str | None
    metrics: tuple[str, ...]
    figures: tuple[str, ...] = DEFAULT_FIGURES
    headline: tuple[str, ...] = ()
    reads_corpus: bool = False
    nested_lengths: bool = False
    texts: str = "binned"
    vectors_only: bool = True

    def __post_init__(self) -> None:
        if not set(self.headline) <= set(self.metrics):
            raise ValueError(
                f"task {self.name}: headline metrics {self.headline} not all among {self.metrics}"
            )

    def run(self, ctx) -> list[dict]:
        return _load(self.runner)(ctx)


def _load(target: str | None) -> Callable:
    if target is None:
        raise ValueError("this task has no runner of its own (its rows come from another command)")
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


KNN_NEIGHBOURS = 5
"""k of the kNN probes (`llm_collapse.tasks.knn`): each text needs more than k texts of its length."""
PLACED_FOLDS = 5
"""Folds of the placed task's logistic probe (`llm_collapse.tasks.placed`): each label needs this many items."""

_COLLAPSE = ("pairwise_cosine", "centroid_cosine", "centroid_distance", "global_centroid_distance",
             "global_centroid_sq_distance", "within_length_sq_spread", "length_centroid_offset_sq",
             "effective_rank", "tokens")  # fmt: skip
_RETRIEVAL = ("acc@1", "ndcg@10")
_KNN = ("knn_accuracy", "knn_cross_accuracy", "knn_longer_neighbour_share", "knn_longer_neighbour_chance",
        "knn_neighbour_occurrence", "knn_hubness_skewness", "knn_top_hub_share")  # fmt: skip
_PLACED = ("logistic_accuracy", "knn_accuracy", "knn_cross_accuracy")
_DRIFT = ("cosine_to_bf16", "cosine_to_fp16", "cosine_to_fp32")

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("collapse", "Collapse geometry", "llm_collapse.tasks.collapse:run_collapse", _COLLAPSE,
                 reads_corpus=True,
                 headline=("pairwise_cosine",
                           "global_centroid_distance",  # the TempScale paper's collapse distance
                           "centroid_distance")),
        TaskSpec("knn", "kNN probe", "llm_collapse.tasks.knn:run_knn", _KNN,
                 reads_corpus=True,
                 headline=("knn_cross_accuracy",  # the TempScale paper's probe: a pool of all lengths
                           "knn_accuracy")),
        TaskSpec("passkey", "Passkey retrieval", "llm_collapse.tasks.retrieval:run_passkey", _RETRIEVAL,
                 figures=("length", "depth"), headline=("acc@1",), texts="retrieval"),
        TaskSpec("needle", "Needle retrieval", "llm_collapse.tasks.retrieval:run_needle", _RETRIEVAL,
                 figures=("length", "depth"), headline=("acc@1",), texts="retrieval"),
        TaskSpec("passkey-start", "Passkey at the start, haystack grows",
                 "llm_collapse.tasks.retrieval:run_passkey_start", _RETRIEVAL, headline=("acc@1",),
                 nested_lengths=True, texts="retrieval"),
        TaskSpec("needle-start", "Needle at the start, haystack grows",
                 "llm_collapse.tasks.retrieval:run_needle_start", _RETRIEVAL, headline=("acc@1",),
                 nested_lengths=True, texts="retrieval"),
        TaskSpec("position", "Early vs late position (echo test)", "llm_collapse.tasks.retrieval:run_position",
                 ("acc@1",), figures=("length", "position"), headline=("acc@1",), texts="retrieval-pair"),
        TaskSpec("placed", "Labelled passage in growing filler (information fixed)",
                 "llm_collapse.tasks.placed:run_placed", _PLACED, reads_corpus=True, nested_lengths=True,
                 headline=("logistic_accuracy",  # MTEB's classification protocol
                           "knn_cross_accuracy"),  # the paper's probe: a pool of all lengths
                 texts="placed"),
        TaskSpec("layerwise", "Layerwise statistics", "llm_collapse.tasks.layerwise:run_layerwise",
                 ("hf_ratio", "hf_ratio_length_free", "attention_entropy", "attention_entropy_normalized"),
                 reads_corpus=True, figures=("layerwise",), texts="layerwise", vectors_only=False),
        # headline: the drift against whichever dtype the unquantized reference ran in (a run has one of them)
        TaskSpec("quantization", "Quantization drift", "llm_collapse.tasks.quantization:run_quantization",
                 _DRIFT, reads_corpus=True, headline=_DRIFT, texts="variants", vectors_only=False),
    )
}  # fmt: skip
"""Every task, in report order."""

RUNNABLE: list[str] = [name for name, spec in TASKS.items() if spec.runner is not None]
"""The tasks ``--tasks`` accepts (`register_task` adds to it in place)."""

HEADLINE: list[tuple[str, str]] = [(name, metric) for name, spec in TASKS.items() for metric in spec.headline]
"""The (task, metric) pairs of the summary table and the temperature sweep, in this order (tasks in report
order, each task's `TaskSpec.headline` in its order)."""

METRICS: dict[str, MetricInfo] = {
    "pairwise_cosine": MetricInfo("mean pairwise cosine", MORE_COLLAPSE_IF_HIGHER, paired=True),
    "centroid_cosine": MetricInfo("cosine to global centroid", MORE_COLLAPSE_IF_HIGHER),
    "centroid_distance": MetricInfo("distance to bin centroid (ours)", MORE_COLLAPSE_IF_LOWER, paired=True),
    "global_centroid_distance": MetricInfo(
        "distance to global centroid (paper)", MORE_COLLAPSE_IF_LOWER, paired=True
    ),
    # The squared paper distance = within-length spread + the length centroid's offset (metrics.decomposition):
    # the spread is collapse proper; the offset moves with where a length's group sits, not how tight it is.
    "global_centroid_sq_distance": MetricInfo(
        "squared distance to global centroid", MORE_COLLAPSE_IF_LOWER, paired=True, digits=4
    ),
    "within_length_sq_spread": MetricInfo(
        "within-length spread (squared)", MORE_COLLAPSE_IF_LOWER, paired=True, digits=4
    ),
    "length_centroid_offset_sq": MetricInfo("length centroid offset (squared)", "", paired=True, digits=4),
    "effective_rank": MetricInfo("effective rank", MORE_COLLAPSE_IF_LOWER),
    "hf_ratio": MetricInfo("high-frequency energy ratio", MORE_COLLAPSE_IF_LOWER, paired=True),
    "hf_ratio_length_free": MetricInfo(
        "high-frequency ratio x L/(L-1) (length-free)", MORE_COLLAPSE_IF_LOWER, paired=True
    ),
    "knn_accuracy": MetricInfo(
        "kNN accuracy, within bin (ours)", HIGHER_IS_BETTER, paired=True, proportion=True
    ),
    "knn_cross_accuracy": MetricInfo(  # the within-bin probe is knn_accuracy
        "kNN accuracy, all lengths (paper)", HIGHER_IS_BETTER, paired=True, proportion=True
    ),
    "logistic_accuracy": MetricInfo(  # tasks.placed: out-of-fold, within one length and depth
        "logistic-regression accuracy (MTEB protocol)", HIGHER_IS_BETTER, paired=True, proportion=True
    ),
    # The paper's mechanism (tasks.knn_mechanism): long texts as everyone's neighbours, and hubs.
    "knn_longer_neighbour_share": MetricInfo(
        "share of k neighbours that are longer (all lengths)", "", paired=True
    ),
    "knn_longer_neighbour_chance": MetricInfo("longer-neighbour share of random neighbours", ""),
    "knn_neighbour_occurrence": MetricInfo("mean k-occurrence (all lengths)", ""),
    "knn_hubness_skewness": MetricInfo("hubness: k-occurrence skewness (within length)", ""),
    "knn_top_hub_share": MetricInfo("top hub's share of neighbour slots (within length)", ""),
    "acc@1": MetricInfo("Acc@1", HIGHER_IS_BETTER, paired=True, proportion=True),
    "ndcg@10": MetricInfo("nDCG@10", HIGHER_IS_BETTER),
    "tokens": MetricInfo("mean tokens per text", ""),
    "attention_entropy": MetricInfo("attention entropy (nats)", "", paired=True),
    "attention_entropy_normalized": MetricInfo("attention entropy / ln(#keys)", "", paired=True),
    **{
        f"cosine_to_{dtype}": MetricInfo(
            f"mean cosine to the {dtype} embedding", CLOSER_IF_HIGHER, paired=True, digits=5
        )
        for dtype in ("bf16", "fp16", "fp32")  # llm_collapse.tasks.quantization (drift of a quantized model)
    },
}
"""Every metric a task writes, in figure order; then their paired contrasts (added below)."""

PAIRED_METRICS: list[str] = [name for name, info in METRICS.items() if info.paired]
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


METRICS.update(_contrast_infos(PAIRED_METRICS))


def register_task(spec: TaskSpec, metrics: dict[str, MetricInfo] | None = None) -> TaskSpec:
    """Adds a task after the built-ins: ``--tasks``, the runner, figures and report pick it up. ``metrics``:
    its new metrics' labels and directions (a paired one also gets its ``*_vs_base``... contrasts' labels).

    Its runner (``"module:function"``) takes a `llm_collapse.tasks.base.TaskContext` and returns result rows
    (``ctx.row(task=..., length=..., metric=..., value=..., n=...)``). A task that reads the run's corpus texts
    (``reads_corpus=True``) needs nothing else; one that generates its own inputs also needs its builder in
    `llm_collapse.run.inputs` and its cost in `llm_collapse.run.plan` (docs/contributing.md).
    """
    if spec.name in TASKS:
        raise ValueError(f"task {spec.name!r} is already registered; give the task another name")
    new = dict(metrics or {})
    if taken := sorted(set(new) & set(METRICS)):
        raise ValueError(f"task {spec.name}: metrics {taken} are already registered; name them differently")
    if unknown := sorted(set(spec.metrics) - set(METRICS) - set(new)):
        raise ValueError(f"task {spec.name}: metrics {unknown} have no MetricInfo; pass them in metrics=")
    METRICS.update(new)
    paired = [name for name, info in new.items() if info.paired]
    PAIRED_METRICS.extend(paired)
    METRICS.update(_contrast_infos(paired))
    TASKS[spec.name] = spec
    if spec.runner is not None:
        RUNNABLE.append(spec.name)
    HEADLINE.extend((spec.name, metric) for metric in spec.headline)
    return spec


def metric_info(metric: str) -> MetricInfo:
    """Label and direction of ``metric``; unknown metrics get their own name and no direction."""
    return METRICS.get(metric, MetricInfo(metric, ""))


def length_paired_tasks(design: str) -> frozenset[str]:
    """Tasks whose items are the same at every length under ``design`` (they get ``*_vs_shortest`` rows)."""
    return frozenset(
        name
        for name, spec in TASKS.items()
        if spec.runner is not None and (spec.nested_lengths or (design == "prefix" and spec.reads_corpus))
    )


def binned_tasks() -> frozenset[str]:
    """Tasks that read the corpus as texts per length (the ``--design``'s bins or prefixes); ``placed`` reads it
    for passages of its own."""
    return frozenset(name for name in tasks_with(reads_corpus=True) if TASKS[name].texts != "placed")


def tasks_with(*, figure: str | None = None, reads_corpus: bool | None = None) -> frozenset[str]:
    """Names of the tasks that get that figure kind and/or have that corpus use."""
    return frozenset(
        name
        for name, spec in TASKS.items()
        if (figure is None or figure in spec.figures)
        and (reads_corpus is None or spec.reads_corpus is reads_corpus)
    )
