"""The task protocol: a task is one `Task` value, declared in a module of its own with everything it needs, and
registered (`llm_collapse.tasks.registry.register_task`; the built-ins are listed there).

What a task declares, in the order a run meets it:

1. `Task.options`: a frozen `Options` dataclass, each field one flag and YAML key (`option`: its help, default
   text, run-id rule); `Options.validate` checks and resolves them against the run (`RunView`) with the config,
   before anything is read, raising a one-line `ConfigError`;
2. `Task.check`: checks of what the options point at (a corpus label, a filler corpus), before any model loads;
3. `Task.build_inputs`: what it embeds, built once under the reference tokenizer (a `TaskInputs`); a task
   without it reads the run's shared corpus sample (``sample=True``, `llm_collapse.tasks.sample`);
4. `Task.workload`: how much it embeds per length and method (`Workload`), for the plan and the GPU estimate,
   counted from the options before any input is built;
5. `Task.run`: ``(ctx, inputs, options) -> rows`` per (model, method) cell (`llm_collapse.tasks.base.TaskContext`);
   its `Task.metrics` say how each metric reads (label, direction, digits, pairing, equivalence margin).

Decisions:

* A task module imports no model code at module level (torch, transformers; nor scipy.stats, ~0.6 s): the
  registry imports every built-in task to build ``--help``, ``llm-collapse list`` and the reports, none of
  which load a model. Its runner imports them where a cell runs.
* Options keep their flat names across the run (``retrieval_docs``, ``placed_depths``): the YAML keys, the flags
  and the run id are today's, whichever task declares them. Several tasks may declare one option (``label``:
  knn and placed; the retrieval tasks share `Options` of one class): it is one flag, one value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from llm_collapse.interventions import Method

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
DEFAULT_FIGURES: tuple[str, ...] = ("length",)
"""The figure kinds of a task that declares none, and of rows whose task the registry does not know."""


@dataclass(frozen=True)
class MetricInfo:
    """How to label a metric, which way is bad, and what difference counts as none.

    Attributes:
        label: Axis and table label.
        direction: One of `MORE_COLLAPSE_IF_HIGHER`, `MORE_COLLAPSE_IF_LOWER`, `HIGHER_IS_BETTER`,
            `CLOSER_IF_HIGHER`, or "" when unknown (no judgement is printed).
        digits: Decimals in tables (drift cosines sit within 1e-3 of 1, where 3 decimals say nothing).
        paired: Whether the runner writes ``<metric>_vs_base`` paired contrasts for it.
        proportion: Whether it is a mean of per-item 0/1 outcomes (value x n successes of n): unpaired
            differences then get an exact test from the counts (`llm_collapse.reporting.significance`).
        set_level: Whether it is one number per set of items (a mean over pairs, a distance to the set's own
            centroid), so its contrasts are read by the delete-one jackknife with t(n - 1) (``jackknife t``).
        margin: Its equivalence margin, declared, not estimated: a change within ``±margin`` counts as none
            (`llm_collapse.tasks.registry.margin_for`; a run's ``margins`` override it). None: no equivalence
            is claimed. The built-ins: 0.01 for the geometry metrics, 0.10 for the kNN and retrieval accuracies.
    """

    label: str
    direction: str
    digits: int = 3
    paired: bool = False
    proportion: bool = False
    margin: float | None = None
    set_level: bool = False


class RunView(Protocol):
    """What a task sees of the run it is part of (`llm_collapse.run.config.CompareConfig` is one): options are
    checked against it, inputs built from it. Tasks never import the run."""

    corpus: str
    lengths: list[int]
    seed: int
    max_per_bin: int
    prefix_docs: int | None
    design: str | None
    backend: str
    quant: str | None
    limit: int | None

    @property
    def tasks(self) -> Any: ...  # the selected tasks' names (a mapping to their options)

    @property
    def per_length(
        self,
    ) -> int: ...  # texts per length of the shared sample (``--prefix-docs`` or ``--max-per-bin``)

    @property
    def per_length_flag(self) -> str: ...  # the flag that sets it

    def parsed_methods(self) -> list[Method]: ...


def option(default: Any = None, *, help: str, shown: str | None = None, always_hashed: bool = False) -> Any:
    """One field of an `Options` dataclass: its flag ``--<name-with-dashes>`` and YAML key ``<name>``.

    Args:
        default: Its value when not given (None: unset; a list option's default is None).
        help: The flag's help text; the default is appended once (``shown``, else the value).
        shown: How ``--help`` states the default where the value does not say it (``"all of them"``).
        always_hashed: It enters the run id in every run, its task's or not, at its value (the four options
            older than this rule: ``retrieval_docs``, ``retrieval_queries``, ``layerwise_per_bin``, ``label``,
            so committed runs keep their ids). Otherwise it enters only when its task runs and it is not None.
    """
    return field(default=default, metadata={"help": help, "default": shown, "always_hashed": always_hashed})


@dataclass(frozen=True)
class Options:
    """A task's options: subclass with `option` fields. ``title`` names its ``--help`` section."""

    title: ClassVar[str] = "task options"

    def validate(self, run: RunView, task: str) -> Options:
        """These options, checked against ``run`` for ``task`` and resolved (defaults that depend on the run filled
        in); raises a one-line `llm_collapse.errors.ConfigError`. Called once per selected task that has them."""
        return self

    def limited(self, n: int) -> Options:
        """These options with every count of texts per length capped at ``n`` (``--limit``)."""
        return self


class TaskInputs:
    """What a task built for itself (`Task.build_inputs`), as the run, the plan, the progress line and run.json
    read it. Subclass it for a task's own inputs; every method has a default for a task that lacks the part."""

    def documents(self) -> list[str]:
        """Every document it embeds (``ctx.encode``, kind document), in first-use order."""
        return []

    def queries(self) -> list[str]:
        """Every query it embeds (``ctx.encode(kind="query")``)."""
        return []

    def counted(self) -> list[tuple[str, int]]:
        """Texts whose reference-tokenizer tokens are known, with them (the run's characters per token)."""
        return []

    def sweep(self) -> tuple[list[str], list[str]]:
        """(every text of a prefix sweep, the longest text of each swept document): where prefix sharing is
        exact, one forward of each longest text embeds the others (`--dry-run`'s forward count)."""
        return [], []

    def describe(self) -> dict:
        """What run.json's ``inputs`` records of it (keys of `llm_collapse.records.record.InputsRecord`, or its
        own); a ``retrieval`` mapping is merged with the other tasks'."""
        return {}


@dataclass(frozen=True)
class Pass:
    """Forwards a task runs itself over the shared sample's texts, beside the cached ones: the plan costs them at
    ``factor`` x those texts' plain forwards.

    Attributes:
        says: The plan's words for it, after ``"<task>: "`` (the cost follows).
        texts: Sample texts per length it reads.
        factor: Its seconds per second of those texts' plain forwards, as measured on the run's device kind.
        hidden_states: It keeps every layer's hidden states (the GPU estimate counts these forwards and their
            memory; a pass without them is costed by ``--dry-run`` only).
        base_only: It runs in the ``base`` cell only.
        one_per_forward: It embeds one text per forward, so no prefix sharing (a forward that mixes rows).
        pairs: Pairs of texts per length it compares by a d x d statistic each (an eigendecomposition, O(d^3):
            the GPU estimate costs them from the model's width).
    """

    says: str
    texts: int
    factor: float = 1.0
    hidden_states: bool = False
    base_only: bool = False
    one_per_forward: bool = False
    pairs: int = 0


@dataclass(frozen=True)
class Workload:
    """What a task embeds per length and method, counted from the run and its options before any input is built.

    Attributes:
        documents: Documents of its own per length.
        queries: Queries per length (short: `llm_collapse.cost.estimate.QUERY_TOKENS` tokens each).
        sample: It embeds the run's shared corpus sample through the cache (every task that does shares one
            embedding of it).
        passes: Forwards it runs itself over the sample (`Pass`).
    """

    documents: int = 0
    queries: int = 0
    sample: bool = False
    passes: tuple[Pass, ...] = ()


Runner = Callable[..., list[dict]]
"""``(ctx: TaskContext, inputs, options) -> rows``: ``inputs`` is the task's `TaskInputs` or the shared sample,
``options`` its `Options` (None for a task without)."""


@dataclass(frozen=True)
class Task:
    """One task.

    Attributes:
        name: Its ``--tasks`` name and the ``task`` column of its rows.
        title: Its report section.
        run: Its `Runner`.
        metrics: The metrics its rows carry, in figure order, each with its `MetricInfo`; a metric another task
            writes too is declared by both, the same.
        options: Its `Options` class (None: it has none).
        build_inputs: ``(run, options, tokenizer, documents) -> TaskInputs``: its own inputs (documents: the
            corpus, for a task with ``corpus=True``, else None). None: it reads the shared sample.
        workload: ``(run, options, device) -> Workload`` (None: the sample, embedded, if it reads it).
        check: ``(run, options, documents) -> None``: checks of the corpus and of what the options name, before
            any model loads (a one-line `llm_collapse.errors.UserError`).
        figures: The figure kinds it gets, in report order (`llm_collapse.reporting.figures.FIGURE_KINDS`):
            ``"length"`` (each metric against length), ``"depth"`` (Acc@1 by depth and length: passkey,
            needle), ``"position"`` (early vs late) or ``"layerwise"`` (statistics against layer).
        headline: Its metrics in the summary table and the temperature sweep, in that order.
        sample: It reads the run's shared corpus sample (`llm_collapse.tasks.sample`: texts per length, prefix
            or bins design), the same for every task that does.
        corpus: Its `build_inputs` reads the corpus documents (placed: passages of its own).
        nested_lengths: Its items are the same at every length whatever the design (the ``-start`` tasks:
            token prefixes of one long text each; ``placed``: one passage in more filler), so length contrasts
            are paired. A sample task is paired across lengths under the prefix design only.
        vectors_only: It reads the model only through ``TaskContext.encode``'s vectors (and the tokenizer), so
            ``llm-collapse report --recompute`` can rebuild its rows from a run's saved embeddings; False for a
            task that runs the model itself (hidden states, attention, quantized variants).
        packages: ``(import name, what needs it, how to install it)`` of the optional packages it needs.
    """

    name: str
    title: str
    run: Runner
    metrics: dict[str, MetricInfo]
    options: type[Options] | None = None
    build_inputs: Callable[..., TaskInputs] | None = None
    workload: Callable[..., Workload] | None = None
    check: Callable[..., None] | None = None
    figures: tuple[str, ...] = DEFAULT_FIGURES
    headline: tuple[str, ...] = ()
    sample: bool = False
    corpus: bool = False
    nested_lengths: bool = False
    vectors_only: bool = True
    packages: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not set(self.headline) <= set(self.metrics):
            raise ValueError(
                f"task {self.name}: headline metrics {self.headline} not all among {list(self.metrics)}"
            )
        if self.sample and self.build_inputs is not None:
            raise ValueError(
                f"task {self.name}: it reads the shared sample or builds inputs of its own, not both"
            )

    @property
    def reads_corpus(self) -> bool:
        """Whether the run loads the corpus for it (the sample, or its own inputs from the corpus)."""
        return self.sample or self.corpus

    def count(self, run: RunView, options: Options | None, device: str) -> Workload:
        """Its `Workload` in ``run`` (`workload`, else the sample, embedded, for a sample task)."""
        if self.workload is not None:
            return self.workload(run, options, device)
        return Workload(sample=self.sample)
