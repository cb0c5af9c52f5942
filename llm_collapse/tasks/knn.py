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

import numpy as np

from llm_collapse.errors import UserError
from llm_collapse.metrics.probes import knn_correct, knn_neighbours
from llm_collapse.tasks.base import TaskContext, paired_key, proportion_row
from llm_collapse.tasks.knn_mechanism import Part, mechanism_rows
from llm_collapse.tasks.registry import KNN_NEIGHBOURS

logger = logging.getLogger(__name__)

K = KNN_NEIGHBOURS  # the registry holds it: config checks the sample size against it
WITHIN, CROSS = "knn_accuracy", "knn_cross_accuracy"


class KnnLabelError(UserError, ValueError):
    """None of the sampled texts carries the kNN label."""


def run_knn(ctx: TaskContext) -> list[dict]:
    label_key = ctx.config.knn_label
    groups = ctx.inputs.by_length()
    lengths = sorted(groups)
    kept = {n: [t for t in groups[n] if t.labels.get(label_key) is not None] for n in lengths}
    dropped = sum(len(groups[n]) - len(kept[n]) for n in lengths)
    pool = [t for n in lengths for t in kept[n]]
    if not pool and dropped:
        raise KnnLabelError(f"corpus {ctx.config.corpus!r} texts have no label {label_key!r}; set --label")
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
