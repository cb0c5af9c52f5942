"""Per-item results: what every bin's row is a mean of, one row per item, for ``items.parquet``.

A cell's `PairedItems` (the data behind its paired contrasts) become rows keyed by model, method, task,
corpus, length, depth, layer and ``item`` (`PairedItems.ids`: the same id for the same text or query across
methods, and across lengths where the items are the same: the prefix design, the ``-start`` tasks). Each
quantity is a column named after the metric it averages to, so the mean of a column over a bin's items is
the bin's value in ``results.parquet`` (tested):

- collapse: ``pairwise_cosine`` (an item's mean cosine to the other items of its length: the mean over
  items is the mean over pairs), ``centroid_distance`` (to its length's centroid),
  ``global_centroid_distance`` (to the centroid of all lengths, the TempScale paper's distance), and the
  squares of the last two (``within_length_sq_spread``, ``global_centroid_sq_distance``: the decomposition's
  per-item terms; the length centroid's offset is one number per length, in the results only);
- knn: ``knn_accuracy`` and ``knn_cross_accuracy`` (0/1 correct); placed: ``logistic_accuracy``, ``knn_accuracy``
  and ``knn_cross_accuracy`` (0/1 correct) at each depth;
- retrieval tasks: ``acc@1`` (0/1) and ``gold_rank`` (the relevant document's rank, 1 = top);
- layerwise: one row per layer with each statistic.

Depth rows (retrieval by depth bin, the position test's early and late) repeat their items at that depth;
the overall rows have NaN depth. A cell's quantization variants keep no per-item rows yet.
"""

from __future__ import annotations

import math

import numpy as np

from llm_collapse.metrics.collapse import normalize_rows, per_item_pairwise_cosine
from llm_collapse.records.results import CellKey
from llm_collapse.tasks.base import EMBEDDINGS, PairedItems, PairedKey, paired_task


def item_rows(cell: CellKey, paired: dict[PairedKey, PairedItems]) -> list[dict]:
    """Per-item rows of one (model, method) cell, one per (task, length, depth, layer, item).

    Bins whose items carry no ids are left out (a task that keeps none).
    """
    merged: dict[tuple, dict] = {}
    for (name, length, depth), items in paired.items():
        if not items.ids:
            continue
        if len(items.ids) != len(items.values):
            raise ValueError(f"{name} at {length}: {len(items.ids)} ids for {len(items.values)} items")
        base = dict(**cell.fields(), task=paired_task(name), length=int(length),
                    depth=math.nan if depth is None else float(depth))  # fmt: skip
        for layer, columns in _quantities(items):
            for i, item in enumerate(items.ids):
                key = (base["task"], base["length"], depth, None if math.isnan(layer) else layer, item)
                row = merged.setdefault(key, {**base, "layer": layer, "item": item})
                row.update({column: values[i] for column, values in columns.items()})
    return list(merged.values())


def _quantities(items: PairedItems) -> list[tuple[float, dict[str, np.ndarray]]]:
    """(layer, {column: (n,) values}) of one bin; layer NaN except for per-layer statistics."""
    if items.metric == EMBEDDINGS:
        return [(math.nan, embedding_quantities(items.values, items.reference))]
    if items.per_layer:
        return [
            (float(layer), {items.metric: items.values[:, layer]}) for layer in range(items.values.shape[1])
        ]
    columns = {items.metric: np.asarray(items.values, dtype=np.float64)}
    columns.update({name: np.asarray(values) for name, values in items.extra.items()})
    return [(math.nan, columns)]


def embedding_quantities(X: np.ndarray, reference: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per-item geometry of one length's embeddings (rows normalised as `llm_collapse.metrics.collapse` does).

    ``pairwise_cosine``: mean cosine to the other items (NaN for a lone item); ``centroid_distance``: distance
    to the items' own centroid; ``global_centroid_distance``: distance to ``reference``, the centroid of all
    lengths (absent without one); the ``*_sq_*`` columns: their squares.
    """
    U = normalize_rows(np.asarray(X, dtype=np.float64))
    out = {
        "pairwise_cosine": per_item_pairwise_cosine(U),
        "centroid_distance": np.linalg.norm(U - U.mean(axis=0, keepdims=True), axis=1),
    }
    out["within_length_sq_spread"] = out["centroid_distance"] ** 2
    if reference is not None:
        out["global_centroid_distance"] = np.linalg.norm(U - np.asarray(reference).reshape(1, -1), axis=1)
        out["global_centroid_sq_distance"] = out["global_centroid_distance"] ** 2
    return out
