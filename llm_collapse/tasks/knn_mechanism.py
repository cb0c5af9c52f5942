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

from typing import NamedTuple

import numpy as np

from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key
from llm_collapse.tasks.task import MetricInfo

SHARE, CHANCE, OCCURRENCE = (
    "knn_longer_neighbour_share",
    "knn_longer_neighbour_chance",
    "knn_neighbour_occurrence",
)
SKEWNESS, TOP_HUB = "knn_hubness_skewness", "knn_top_hub_share"
METRICS = {
    SHARE: MetricInfo("share of k neighbours that are longer (all lengths)", "", paired=True),
    CHANCE: MetricInfo("longer-neighbour share of random neighbours", ""),
    OCCURRENCE: MetricInfo("mean k-occurrence (all lengths)", ""),
    SKEWNESS: MetricInfo("hubness: k-occurrence skewness (within length)", ""),
    TOP_HUB: MetricInfo("top hub's share of neighbour slots (within length)", ""),
}
"""The mechanism's metrics (the knn task writes them)."""


class Part(NamedTuple):
    """One length of the knn task's pool: its rows, their item ids, and its own kNN lists (None if too few)."""

    rows: slice
    ids: tuple[str, ...]
    neighbours: np.ndarray | None


def mechanism_rows(
    ctx: TaskContext,
    labels: np.ndarray,
    groups: list[str],
    parts: dict[int, Part],
    neighbours: np.ndarray | None,
    k: int,
) -> list[dict]:
    """Rows of the mechanism per length, from the knn task's neighbour lists: ``neighbours`` of the
    all-lengths pool (source documents ``groups`` excluded; None when some text has fewer than k candidates)
    and each length's own in ``parts``. Lengths without lists get no rows (their accuracies are NaN)."""
    # scipy.stats loads where a cell runs, not where the task is declared (--help, llm-collapse list)
    from llm_collapse.metrics.hubness import hubness_ci, length_neighbour_summary, longer_neighbour_share

    seed, rows = ctx.seed, []
    lengths = np.zeros(len(labels), dtype=np.int64)
    for length, part in parts.items():
        lengths[part.rows] = length
    if neighbours is not None:
        summary = length_neighbour_summary(neighbours, lengths, groups, seed=seed)
        share = longer_neighbour_share(neighbours, lengths)
        for length, part in parts.items():
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
            mine_nb = neighbours[part.rows]
            extra = {"neighbour_lengths": lengths[mine_nb], "neighbour_labels": labels[mine_nb]}
            ctx.paired[paired_key("knn", length, metric=SHARE)] = PairedItems(
                SHARE, share[part.rows], continuous=True, ids=part.ids, extra=extra
            )
    for length, part in parts.items():
        if part.neighbours is None:
            continue
        n = len(part.ids)
        stats = hubness_ci(part.neighbours, n, k, seed=seed)
        for metric, key in ((SKEWNESS, "skewness"), (TOP_HUB, "top_hub_share")):
            point, low, high = stats[key]
            rows.append(ctx.row(task="knn", length=length, metric=metric, value=point, ci=(low, high), n=n))
    return rows
