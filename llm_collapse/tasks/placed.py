"""The placed task: a labelled passage at a depth inside filler that grows with the length
(`llm_collapse.data.placed`), probed per length and depth. The label information is the same at every
length, so a probe's change with length is what length does to the embedding, not what the text says; the
method x length interaction of these rows is the TempScale claim's downstream test with the information fixed.

Probes (``placed_probes``), each with per-item 0/1 correctness for the paired contrasts (exact McNemar):

- ``logistic_accuracy``: MTEB's classification protocol (`llm_collapse.metrics.logistic`), out of fold within
  one length and depth; the passages are in the same order at every length and for every method, so the
  folds are the same and the contrasts paired.
- ``knn_accuracy``: leave-one-out kNN (k = 5, cosine, majority vote) among the passages of one length and depth.
- ``knn_cross_accuracy``: the TempScale paper's probe: the pool holds the passages at every length of the
  depth, a text's own passage at the other lengths excluded from its neighbours.

Decisions:

- Its inputs (`placed_inputs`): ``max_per_bin`` passages of the corpus (one paragraph per document, balanced over
  the label's values, each short enough for the shortest length with filler), every one at every length and
  depth inside sentences of the filler corpus (``--placed-filler``: kjv, or sotu when the corpus is kjv).
- Rows carry the depth; a report's value-vs-length figure averages the depths (n-weighted), its tables and
  the contrasts keep them apart.
- Wilson intervals treat the passages as independent (the kNN pool is shared, so they are approximate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from llm_collapse.data import Document, load_corpus
from llm_collapse.data.placed import (
    MIN_FILLER_TOKENS,
    PlacedPassage,
    PlacementError,
    place_passages,
    short_passages,
)
from llm_collapse.data.synthetic import corpus_sentences
from llm_collapse.errors import ConfigError, PreflightError
from llm_collapse.metrics.logistic import logistic_correct
from llm_collapse.metrics.probes import knn_correct
from llm_collapse.tasks.base import TaskContext, paired_key, proportion_row
from llm_collapse.tasks.knn import ACCURACIES, CROSS, WITHIN, K, check_label, label_option, resolve_label
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

TASK_NAME = "placed"
LOGISTIC = "logistic_accuracy"
FOLDS = 5
"""Folds of the logistic probe: each label needs this many passages per length."""
DEPTHS: tuple[float, ...] = (0.5,)
"""The default depth: the passage in the middle of its filler."""
PROBES: tuple[str, ...] = ("logistic", "knn")
"""The probes (``knn``: both kNN probes, within a length and over a pool of all lengths)."""
FILLER = ("kjv", "sotu")
"""The default filler corpus, and the one when the passages' corpus is the first."""


@dataclass(frozen=True)
class PlacedOptions(Options):
    title: ClassVar[str] = "the placed task"
    label: str | None = label_option()
    placed_filler: str | None = option(
        help="corpus whose sentences surround the placed task's passages (its label must not be in them)",
        shown=f"{FILLER[0]}, or {FILLER[1]} when --corpus is {FILLER[0]}",
    )
    placed_depths: list[float] | None = option(
        help="where the placed task's passage sits in its filler, comma-separated, 0 (first) .. 1 (last)",
        shown=",".join(map(str, DEPTHS)),
    )
    placed_probes: list[str] | None = option(
        help=f"the placed task's label probes, comma-separated, of {', '.join(PROBES)}",
        shown=",".join(PROBES),
    )

    @property
    def depths(self) -> list[float]:
        return list(self.placed_depths or DEPTHS)

    @property
    def probes(self) -> tuple[str, ...]:
        return tuple(self.placed_probes or PROBES)

    def filler(self, corpus: str) -> str:
        """The filler corpus of passages from ``corpus``: ``placed_filler``, or the default (`FILLER`)."""
        if self.placed_filler is not None:
            return self.placed_filler
        return FILLER[1] if corpus == FILLER[0] else FILLER[0]

    def validate(self, run: RunView, task: str) -> PlacedOptions:
        """Depths in [0, 1] and probes known, each once; a filler corpus other than --corpus; enough passages per
        length for the probes' folds and neighbours; a label for the corpus."""
        depths = self.placed_depths
        if depths is not None and (
            not depths or len(set(depths)) < len(depths) or any(not 0 <= d <= 1 for d in depths)
        ):
            raise ConfigError(
                f"--placed-depths must be distinct numbers in [0, 1] (0: the passage first, 1: last), got {depths}"
            )
        probes = self.placed_probes
        if probes is not None and (not probes or len(set(probes)) < len(probes) or set(probes) - set(PROBES)):
            raise ConfigError(
                f"--placed-probes must name each of {', '.join(PROBES)} at most once, got {probes}"
            )
        from llm_collapse.data import CORPORA

        filler = self.filler(run.corpus)
        if not filler.startswith("folder:"):
            CORPORA.get(filler)
        if filler == run.corpus:
            raise ConfigError(
                f"--placed-filler {filler} is the passages' own corpus, so the filler would carry the label; "
                f"choose another corpus, e.g. --placed-filler {FILLER[run.corpus == FILLER[0]]}"
            )
        least = 2 * max(FOLDS, K + 1)  # two labels: folds of each, and k neighbours of a length
        if run.max_per_bin < least:
            raise ConfigError(
                f"--max-per-bin {run.max_per_bin} is too few passages per length for the placed task's probes "
                f"({FOLDS} folds of each label, k = {K} neighbours); use --max-per-bin >= {least}"
            )
        resolve_label(self.label, run.corpus, task)
        return self


@dataclass
class PlacedInputs(TaskInputs):
    """The passages at every length and depth, and the corpus they sit in."""

    passages: list[PlacedPassage] = field(default_factory=list)
    filler: str = ""

    def documents(self) -> list[str]:
        return [p.text for p in self.passages]

    def counted(self) -> list[tuple[str, int]]:
        return [(p.text, p.n_tokens) for p in self.passages]

    def describe(self) -> dict:
        """Passages per label, the depths, and the filler corpus."""
        if not self.passages:
            return {}
        items = {p.item_id: p.label for p in self.passages}
        labels = sorted(set(items.values()))
        return {
            "placed": {
                "passages_per_label": {label: sum(v == label for v in items.values()) for label in labels},
                "depths": sorted({p.depth for p in self.passages}),
                "filler": self.filler,
            }
        }


def placed_inputs(run: RunView, options: PlacedOptions, tokenizer, documents: list[Document]) -> PlacedInputs:
    """The passages, balanced over the label's values, each at every length and depth in the filler.

    Raises:
        PlacementError: Too few passages of some label value fit, or the label has one value.
    """
    label = resolve_label(options.label, run.corpus, TASK_NAME)
    values = {doc.labels.get(label) for doc in documents} - {None}
    per_label = run.max_per_bin // max(len(values), 1)
    if len(values) > 1 and per_label < FOLDS:
        raise PlacementError(
            f"--label {label!r} has {len(values)} values in corpus {run.corpus!r}, so --max-per-bin "
            f"{run.max_per_bin} gives {per_label} passages per value, fewer than the logistic probe's "
            f"{FOLDS} folds; use --max-per-bin >= {FOLDS * len(values)} or a label with fewer values"
        )
    passages = short_passages(
        documents, label, tokenizer, min(run.lengths) - MIN_FILLER_TOKENS, per_label, seed=run.seed
    )
    filler_corpus = options.filler(run.corpus)
    filler = corpus_sentences(filler_corpus)
    placed = place_passages(
        passages, label, filler, tokenizer, sorted(run.lengths), options.depths, seed=run.seed
    )
    return PlacedInputs(placed, filler_corpus)


def check_placed(run: RunView, options: PlacedOptions, documents: list[Document]) -> None:
    """The corpus carries the label; the filler corpus exists and holds text."""
    filler = options.filler(run.corpus)
    if not any(doc.text.strip() for doc in load_corpus(filler)):  # CorpusError (a UserError) when missing
        raise PreflightError(f"--placed-filler {filler} holds no text; choose a corpus with sentences")
    check_label(resolve_label(options.label, run.corpus, TASK_NAME), run.corpus, documents)


def run_placed(ctx: TaskContext, inputs: PlacedInputs, options: PlacedOptions) -> list[dict]:
    placed = inputs.passages
    vectors = ctx.encode([p.text for p in placed])  # one call: the cache and the batching see every text
    labels = np.array([p.label for p in placed])
    probes = options.probes
    name = f"{ctx.model}/{ctx.method}"
    rows = []
    for depth in sorted({p.depth for p in placed}):
        at_depth = [i for i, p in enumerate(placed) if p.depth == depth]
        cross = None
        if "knn" in probes:  # item ids as groups: a passage never finds itself at another length
            groups = [placed[i].item_id for i in at_depth]
            cross = knn_correct(vectors[at_depth], labels[at_depth], k=K, groups=groups,
                                label=f"{name}/depth {depth}/all lengths")  # fmt: skip
            cross = dict(zip(at_depth, cross, strict=True)) if cross is not None else None
        for length in sorted({placed[i].length for i in at_depth}):
            part = [i for i in at_depth if placed[i].length == length]
            X, y, ids = vectors[part], labels[part], tuple(placed[i].item_id for i in part)
            where = f"{name}/{length}/depth {depth}"
            if "logistic" in probes:
                correct = logistic_correct(X, y, folds=FOLDS, seed=ctx.seed, label=where)
                rows.append(proportion_row(ctx, paired_key(TASK_NAME, length, depth), LOGISTIC, correct, ids))
            if "knn" in probes:
                within = knn_correct(X, y, k=K, label=where)
                rows.append(
                    proportion_row(ctx, paired_key(TASK_NAME, length, depth, WITHIN), WITHIN, within, ids)
                )
                mine = None if cross is None else np.array([cross[i] for i in part])
                rows.append(
                    proportion_row(ctx, paired_key(TASK_NAME, length, depth, CROSS), CROSS, mine, ids)
                )
    return rows


TASK = Task(
    name=TASK_NAME,
    title="Labelled passage in growing filler (information fixed)",
    run=run_placed,
    metrics={
        LOGISTIC: MetricInfo(  # out-of-fold, within one length and depth
            "logistic-regression accuracy (MTEB protocol)", HIGHER_IS_BETTER, paired=True, proportion=True
        ),
        **ACCURACIES,
    },
    options=PlacedOptions,
    build_inputs=placed_inputs,
    workload=lambda run, options, device: Workload(documents=run.max_per_bin * len(options.depths)),
    check=check_placed,
    headline=(LOGISTIC, CROSS),  # MTEB's classification protocol; the paper's probe, a pool of all lengths
    corpus=True,
    nested_lengths=True,
)
