"""The TempScale paper's kNN mechanism, measured: do long texts crowd into everyone's neighbourhood?

Beside the knn task's accuracies, per length (`llm_collapse.metrics.hubness`):

- in the all-lengths pool of the paper's probe (a text's own source document excluded, as there):
  ``knn_longer_neighbour_share``, the mean share of a text's k neighbours that are longer than it, beside
  ``knn_longer_neighbour_chance``, the share random neighbours would give (short texts have more longer
  candidates: the raw share means nothing without it), and ``knn_neighbour_occurrence``, how often the
  length's texts serve as someone's neighbour (k on average over the pool);
- within each length's own pool: hubness, ``knn_hubness_skewness`` (skewness of the k-occurrence
  distribution, Radovanovic et al. 2010) and ``knn_top_hub_share`` (the top hub's share of the n k slots).

Intervals: bootstraps over the length's texts (share, occurrence) or over query rows with the neighbour
lists fixed (hubness; the docstring of `hubness_ci` says what that leaves out). The per-text share has paired
rows against ``base``; each text's neighbours' lengths and labels go to the per-item results.
"""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.hubness import (
    hubness_ci,
    length_neighbour_summary,
    longer_neighbour_share,
)
from llm_collapse.metrics.probes import knn_neighbours
from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key

SHARE, CHANCE, OCCURRENCE = (
    "knn_longer_neighbour_share",
    "knn_longer_neighbour_chance",
    "knn_neighbour_occurrence",
)
SKEWNESS, TOP_HUB = "knn_hubness_skewness", "knn_top_hub_share"


def mechanism_rows(
    ctx: TaskContext,
    vectors: np.ndarray,
    labels: np.ndarray,
    groups: list[str],
    parts: dict[int, tuple[slice, tuple[str, ...]]],
    k: int,
) -> list[dict]:
    """Rows of the mechanism per length; ``parts`` maps each length to its rows of the pool and their ids.
    Lengths too small for k neighbours get no rows (the accuracies already say why, as NaN)."""
    seed, rows = ctx.config.seed, []
    lengths = np.zeros(len(vectors), dtype=np.int64)
    for length, (part, _) in parts.items():
        lengths[part] = length
    try:
        neighbours = knn_neighbours(vectors, k, groups=groups)
    except ValueError:
        neighbours = None
    if neighbours is not None:
        summary = length_neighbour_summary(neighbours, lengths, groups, seed=seed)
        share = longer_neighbour_share(neighbours, lengths)
        for length, (part, ids) in parts.items():
            if length not in summary:
                continue
            mine = summary[length]
            n = int(mine["n"])
            point, low, high = mine["longer_share"]
            rows.append(ctx.row(task="knn", length=length, metric=SHARE, value=point, ci=(low, high), n=n))
            rows.append(
                ctx.row(task="knn", length=length, metric=CHANCE, value=mine["chance_longer_share"], n=n)
            )
            point, low, high = mine["mean_k_occurrence"]
            rows.append(
                ctx.row(task="knn", length=length, metric=OCCURRENCE, value=point, ci=(low, high), n=n)
            )
            extra = {
                "neighbour_lengths": lengths[neighbours[part]],
                "neighbour_labels": labels[neighbours[part]],
            }
            ctx.paired[paired_key("knn", length, metric=SHARE)] = PairedItems(
                SHARE, share[part], continuous=True, ids=ids, extra=extra
            )
    for length, (part, _) in parts.items():
        X = vectors[part]
        if len(X) <= k:
            continue
        stats = hubness_ci(knn_neighbours(X, k), len(X), k, seed=seed)
        for metric, key in ((SKEWNESS, "skewness"), (TOP_HUB, "top_hub_share")):
            point, low, high = stats[key]
            rows.append(
                ctx.row(task="knn", length=length, metric=metric, value=point, ci=(low, high), n=len(X))
            )
    return rows
