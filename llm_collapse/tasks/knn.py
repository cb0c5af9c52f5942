"""The kNN probes by length (the TempScale paper's IMDB-by-length analysis, offline), two metrics per length:

- ``knn_accuracy``, within-bin (ours): leave-one-out kNN among the texts of the same length only. Its name
  predates the second probe and is kept so committed runs still read.
- ``knn_cross_accuracy``, the paper's design: the pool is every text of every length of this model and
  method, each text is classified by its k nearest neighbours in that pool, and accuracy is reported per
  length. Long texts crowded near the centre are everyone's neighbours and swing the votes of every length,
  which the within-bin probe cannot show.

Both use k = 5, cosine similarity and a majority vote (ties: `llm_collapse.metrics.probes`), report a 95%
Wilson interval over the length's texts (treated as independent; they share one pool, so it is
approximate), and leave the per-text correctness in ``ctx.paired`` for the runner's paired contrasts.

Decisions:

- The cross-length probe excludes a text's own source document (``BinnedText.doc_id``) from its
  neighbours, in both designs: under ``--design prefix`` the other lengths are prefixes of the same document
  (same label, trivially); under ``bins`` they are other spans of the same speech or review. The within-bin
  probe keeps its plain leave-one-out (excluding more would change committed numbers).
- Prefix-design texts of different start documents never share a paragraph (`llm_collapse.data.prefixes`),
  so no text finds a verbatim copy of its words under another id.
- Texts without the label are left out of both probes (logged): sotu's ``major_party`` is absent for the
  minor parties (`llm_collapse.data.corpora.load_sotu`). ``n`` counts the labelled texts.
- Pool order is by length, then input order, so an exact similarity tie goes to the shorter text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from llm_collapse.errors import ConfigError, PreflightError, UserError
from llm_collapse.metrics.probes import knn_correct, knn_neighbours
from llm_collapse.tasks import knn_mechanism
from llm_collapse.tasks.base import TaskContext, paired_key, proportion_row
from llm_collapse.tasks.knn_mechanism import Part, mechanism_rows
from llm_collapse.tasks.sample import CorpusSample
from llm_collapse.tasks.task import HIGHER_IS_BETTER, MetricInfo, Options, RunView, Task, option

logger = logging.getLogger(__name__)

K = 5
"""k of the kNN probes: each text needs more than k texts of its length."""
WITHIN, CROSS = "knn_accuracy", "knn_cross_accuracy"
ACCURACY_MARGIN = 0.10
"""The equivalence margin of a 0/1 accuracy (the kNN probes, Acc@1, the logistic probe)."""
DEFAULT_LABELS = {"sotu": "party", "movie_reviews": "sentiment", "kjv": "testament"}
"""The label the label probes read where ``--label`` is not given, per corpus."""
ACCURACIES = {
    WITHIN: MetricInfo(
        "kNN accuracy, within bin (ours)",
        HIGHER_IS_BETTER,
        paired=True,
        proportion=True,
        margin=ACCURACY_MARGIN,
    ),
    CROSS: MetricInfo(  # the within-bin probe is knn_accuracy
        "kNN accuracy, all lengths (paper)",
        HIGHER_IS_BETTER,
        paired=True,
        proportion=True,
        margin=ACCURACY_MARGIN,
    ),
}
"""The two kNN probes' metrics (the placed task writes them too)."""


class KnnLabelError(UserError, ValueError):
    """None of the sampled texts carries the kNN label."""


def label_option():
    """``--label``: one option of every label probe (knn, placed)."""
    shown = ", ".join(f"{label} for {corpus}" for corpus, label in DEFAULT_LABELS.items())
    return option(help="document label for the kNN probe", shown=shown, always_hashed=True)


def resolve_label(label: str | None, corpus: str, task: str) -> str:
    """``label``, else the corpus's default (`DEFAULT_LABELS`); a corpus without one needs ``--label``."""
    resolved = label or DEFAULT_LABELS.get(corpus)
    if resolved is None:
        raise ConfigError(
            f"the {task} task needs --label for corpus {corpus!r} (sotu: party, movie_reviews: sentiment)"
        )
    return resolved


def check_label(label: str, corpus: str, documents) -> None:
    """The corpus's documents carry ``label`` with at least two values (the label probes' classes)."""
    values = {doc.labels.get(label) for doc in documents} - {None}
    if not values:
        available = sorted({key for doc in documents for key in doc.labels})
        raise PreflightError(
            f"--label {label!r}: the documents of corpus {corpus!r} carry no such label; "
            f"available: {', '.join(available) or 'none (the label probes need labelled documents)'}"
        )
    if len(values) < 2:
        raise PreflightError(
            f"--label {label!r} has a single value ({values.pop()!r}) in corpus {corpus!r}; "
            "the label probes need at least two classes"
        )


@dataclass(frozen=True)
class KnnOptions(Options):
    title: ClassVar[str] = "the kNN probe"
    label: str | None = label_option()

    def validate(self, run: RunView, task: str) -> KnnOptions:
        resolve_label(self.label, run.corpus, task)
        if run.per_length <= K:
            flag = run.per_length_flag
            raise ConfigError(
                f"{flag} {run.per_length} is too few texts per length for the kNN probe: each text needs "
                f"k = {K} neighbours of its own length; use {flag} >= {K + 1}"
            )
        return self


def run_knn(ctx: TaskContext, sample: CorpusSample, options: KnnOptions) -> list[dict]:
    label_key = resolve_label(options.label, ctx.corpus, "knn")
    groups = sample.by_length()
    lengths = sorted(groups)
    kept = {n: [t for t in groups[n] if t.labels.get(label_key) is not None] for n in lengths}
    dropped = sum(len(groups[n]) - len(kept[n]) for n in lengths)
    pool = [t for n in lengths for t in kept[n]]
    if not pool and dropped:
        raise KnnLabelError(f"corpus {ctx.corpus!r} texts have no label {label_key!r}; set --label")
    if dropped:
        logger.warning(
            "knn: %d of %d texts have no label %r; left out", dropped, dropped + len(pool), label_key
        )
    vectors = ctx.encode([t.text for t in pool])  # (N, d), all lengths in one call (prefix sharing)
    labels = np.array([t.labels[label_key] for t in pool])
    name, documents = f"{ctx.model}/{ctx.method}", [t.doc_id for t in pool]
    # One neighbour search per pool, for the vote and for the mechanism (`llm_collapse.tasks.knn_mechanism`).
    cross_neighbours = _neighbours(vectors, documents)
    cross = knn_correct(
        vectors, labels, k=K, label=f"{name}/all lengths", groups=documents, neighbours=cross_neighbours
    )
    rows, start, parts = [], 0, {}
    for length in lengths:
        n = len(kept[length])
        part = slice(start, start + n)
        start += n
        neighbours = _neighbours(vectors[part])
        within = (
            knn_correct(vectors[part], labels[part], k=K, label=f"{name}/{length}", neighbours=neighbours)
            if n
            else None
        )
        ids = tuple(t.item_id for t in kept[length])
        parts[length] = Part(part, ids, neighbours)
        rows.append(proportion_row(ctx, paired_key("knn", length), WITHIN, within, ids))
        cross_part = None if cross is None else cross[part]
        rows.append(proportion_row(ctx, paired_key("knn", length, metric=CROSS), CROSS, cross_part, ids))
    return rows + mechanism_rows(ctx, labels, documents, parts, cross_neighbours, K)


def _neighbours(X: np.ndarray, groups: list[str] | None = None) -> np.ndarray | None:
    """`knn_neighbours` with k = `K`, or None where some text has fewer than K candidates (`knn_correct` then
    says why and gives no accuracy)."""
    try:
        return knn_neighbours(X, K, groups=groups)
    except ValueError:
        return None


TASK = Task(
    name="knn",
    title="kNN probe",
    run=run_knn,
    metrics={**ACCURACIES, **knn_mechanism.METRICS},
    options=KnnOptions,
    check=lambda run, options, documents: check_label(
        resolve_label(options.label, run.corpus, "knn"), run.corpus, documents
    ),
    headline=(CROSS, WITHIN),  # the TempScale paper's probe (a pool of all lengths) first
    sample=True,
)
