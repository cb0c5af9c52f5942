"""Method x length interaction: does a method change the collapse that *comes with length*?

The TempScale paper claims a temperature reduces the collapse that grows with length, which is an
interaction, not a difference at one length. For a method m, ``base`` b, a length L and the shortest length
S of the same items (the prefix design's documents, a ``-start`` task's queries)::

    (m_L - b_L) - (m_S - b_S)

is the method's effect on the change from S to L. It is negative for a metric that rises with collapse when
the method shrinks that rise. Rows ``<metric>_vs_base_vs_shortest`` (method m, length L) carry it with a paired
interval over the items, each item seen in all four cells:

- per-item quantities (0/1 correctness, the distance to the global centroid and its square, per-layer
  statistics): the mean of the per-item values, its t interval (a bootstrap in runs before 2026-12-06), and
  a p-value (a one-sample t-test of continuous values; for 0/1 outcomes an exact sign-flip test, whose null
  is that each item's value is as likely negated: the four-cell analogue of McNemar's test);
- set-level statistics (pairwise cosine, distance to the length's own centroid, the decomposition's spread
  and offset): a delete-one jackknife over the items, its t(n - 1) interval and test (as their ``*_vs_base``
  rows; runs before 2026-12-08 stored its normal interval and no p-value).

Bins whose four cells do not hold the same items (by id, else by count) are skipped with a warning.

Under ``--design bins`` the texts of length L and of the shortest length S are other texts, so the four cells
are two pairs: `unpaired_interaction_rows` gives ``mean(m_L - b_L) - mean(m_S - b_S)`` of the per-item
quantities (0/1 correctness, continuous values, the distances to the global centroid) with Welch's t interval
and test (`llm_collapse.metrics.contrasts.independent_sum`); set-level statistics get no row there.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from llm_collapse.metrics.collapse import centroid_distance, mean_pairwise_cosine, normalize_rows
from llm_collapse.metrics.contrasts import binary_interaction, independent_sum, jackknife, mean_difference
from llm_collapse.metrics.decomposition import DECOMPOSITION_KEYS, centroid_decomposition
from llm_collapse.records.results import CellKey, result_row
from llm_collapse.tasks.base import EMBEDDINGS, PairedItems, PairedKey, pair_mean_contrast, paired_task
from llm_collapse.tasks.task import VS_INTERACTION

logger = logging.getLogger(__name__)

INTERACTION = VS_INTERACTION


def interaction_rows(
    cell: CellKey,
    items: dict[PairedKey, PairedItems],
    base: dict[PairedKey, PairedItems],
    tasks: set[str] | frozenset[str],
    *,
    seed: int = 0,
) -> list[dict]:
    """``*_vs_base_vs_shortest`` rows of one method against ``base``, for the ``tasks`` whose items are the
    same at every length (`llm_collapse.tasks.registry.length_paired_tasks`)."""
    rows = []
    for key, short in _longer_bins(items, tasks):
        name, length, depth = key
        cells = [items.get(key), base.get(key), items.get(short), base.get(short)]
        if not _same_items(cells, f"{cell} {key}"):
            continue
        row = dict(**cell.fields(), task=paired_task(name), length=length,
                   depth=math.nan if depth is None else depth, n=len(cells[0].values))  # fmt: skip
        for part in _interactions(cells, seed):
            rows.append(result_row(**{**row, **part}))  # a per-layer part counts its own items
    return rows


def unpaired_interaction_rows(
    cell: CellKey,
    items: dict[PairedKey, PairedItems],
    base: dict[PairedKey, PairedItems],
    tasks: set[str] | frozenset[str],
) -> list[dict]:
    """``*_vs_base_vs_shortest`` rows for the ``tasks`` whose texts differ between lengths (the bins design):
    within each length the method and base embed the same texts (paired), across lengths the texts are
    independent (module docstring). Per-layer statistics and means over pairs (other pairs at each length) are
    left out."""
    rows = []
    for key, short in _longer_bins(items, tasks):
        name, length, depth = key
        if items[key].per_layer or items[key].pairwise:  # pairwise: the lengths' pair designs are other items
            continue
        long_pair, short_pair = [items.get(key), base.get(key)], [items.get(short), base.get(short)]
        label = f"{cell} {key}"
        if not (_same_items(long_pair, label) and _same_items(short_pair, label)):
            continue
        row = dict(**cell.fields(), task=paired_task(name), length=length,
                   depth=math.nan if depth is None else depth)  # fmt: skip
        for metric, (m_long, b_long), (m_short, b_short) in _per_item_pairs(long_pair, short_pair):
            contrast = independent_sum([m_long - b_long, -(m_short - b_short)])
            rows.append(result_row(**row, metric=metric + INTERACTION, value=contrast.estimate, n=contrast.n,
                                   ci=(contrast.low, contrast.high), p_value=contrast.p))  # fmt: skip
    return rows


def _longer_bins(items: dict[PairedKey, PairedItems], tasks: set[str] | frozenset[str]) -> list[tuple]:
    """(bin, the same task and depth at its shortest length) for every bin of ``tasks`` above its shortest length,
    in task, length, depth order."""
    shortest: dict[tuple[str, float | None], int] = {}
    for name, length, depth in items:
        if paired_task(name) in tasks:
            shortest[(name, depth)] = min(length, shortest.get((name, depth), length))
    return [
        (key, (key[0], shortest[(key[0], key[2])], key[2]))
        for key in sorted(items, key=lambda k: (k[0], k[1], -1.0 if k[2] is None else k[2]))
        if paired_task(key[0]) in tasks and key[1] != shortest[(key[0], key[2])]
    ]


def _per_item_pairs(long_pair: list[PairedItems], short_pair: list[PairedItems]) -> list[tuple]:
    """(metric, (method, base) per-item values at L, the same at S) of a bin's per-item quantities."""
    cells = [*long_pair, *short_pair]
    if cells[0].metric != EMBEDDINGS:
        values = [np.asarray(c.values, dtype=np.float64) for c in cells]
        return [(cells[0].metric, values[:2], values[2:])]
    if any(c.reference is None for c in cells):
        return []
    distances = [np.linalg.norm(normalize_rows(c.values) - c.reference.reshape(1, -1), axis=1) for c in cells]
    squares = [d**2 for d in distances]
    return [
        (metric, per_item[:2], per_item[2:])
        for metric, per_item in (
            ("global_centroid_distance", distances),
            ("global_centroid_sq_distance", squares),
        )
    ]


def _same_items(cells: list[PairedItems | None], label: str) -> bool:
    if any(c is None for c in cells) or len({c.metric for c in cells}) != 1:
        return False
    ids = {c.ids for c in cells}
    counts = {len(c.values) for c in cells}
    if len(counts) != 1 or (all(c.ids for c in cells) and len(ids) != 1):
        logger.warning("%s: the four cells of the interaction hold other items; no interaction row", label)
        return False
    return True


def _interactions(cells: list[PairedItems], seed: int) -> list[dict]:
    """The rows of one bin from its four cells (method L, base L, method S, base S)."""
    kind = cells[0]
    if kind.metric == EMBEDDINGS:
        return _embedding_interactions(cells, seed)
    values = [np.asarray(c.values, dtype=np.float64) for c in cells]
    if kind.per_layer:
        out = []
        for layer in range(values[0].shape[1]):
            d = _did([v[:, layer] for v in values])
            d = d[~np.isnan(d)]
            out.append(dict(_per_item(d, seed, binary=False), layer=layer, metric=kind.metric + INTERACTION,
                            n=len(d)))  # fmt: skip
        return out
    if kind.pairwise:  # a mean over pairs: the jackknife of the per-item differences of differences
        point, low, high, p = pair_mean_contrast(_did(values))
        return [dict(value=point, ci=(low, high), p_value=p, metric=kind.metric + INTERACTION)]
    binary = not kind.continuous
    return [dict(_per_item(_did(values), seed, binary=binary), metric=kind.metric + INTERACTION)]


def _did(values: list[np.ndarray]) -> np.ndarray:
    m_long, b_long, m_short, b_short = values
    return (m_long - b_long) - (m_short - b_short)


def _per_item(d: np.ndarray, seed: int, *, binary: bool) -> dict:
    """mean(d) of per-item differences of differences with its t interval; the one-sample t-test of
    continuous values, the sign-flip test of 0/1 outcomes (`llm_collapse.metrics.contrasts`)."""
    contrast = binary_interaction(d, seed) if binary else mean_difference(d)
    return dict(value=contrast.estimate, ci=(contrast.low, contrast.high), p_value=contrast.p)


def _embedding_interactions(cells: list[PairedItems], seed: int) -> list[dict]:
    stack = np.stack([c.values for c in cells], axis=1)  # (n, 4, d)
    refs = [c.reference for c in cells]

    def set_level(statistic):
        return jackknife(stack, lambda s: _did([statistic(s[:, j], refs[j]) for j in range(4)]))

    statistics = {
        "pairwise_cosine": lambda X, g: mean_pairwise_cosine(X),
        "centroid_distance": lambda X, g: centroid_distance(X),
    }
    if all(r is not None for r in refs):
        for key in DECOMPOSITION_KEYS[1:]:
            statistics[key] = lambda X, g, key=key: centroid_decomposition(X, g).summary()[key]
    out = []
    for metric, statistic in statistics.items():
        c = set_level(statistic)
        out.append(dict(metric=metric + INTERACTION, value=c.estimate, ci=(c.low, c.high), p_value=c.p))
    if all(r is not None for r in refs):
        distances = [
            np.linalg.norm(normalize_rows(c.values) - r.reshape(1, -1), axis=1)
            for c, r in zip(cells, refs, strict=True)
        ]
        squares = [x**2 for x in distances]
        for metric, per_item in (
            ("global_centroid_distance", distances),
            ("global_centroid_sq_distance", squares),
        ):
            out.append(dict(_per_item(_did(per_item), seed, binary=False), metric=metric + INTERACTION))
    return out
