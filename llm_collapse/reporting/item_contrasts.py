"""Contrasts computed from runs' per-item values (``items.parquet``): weighted sums of cells of the same items.

A cell is one (run, model, method, task, length, depth) bin; its items carry ids, the same for the same text
across methods, lengths and runs of the same documents. A contrast is ``sum_j w_j cell_j`` over cells holding the
same items, read with the procedure of its outcome type (`llm_collapse.metrics.contrasts`):

- a per-item quantity (the distance to the global centroid, 0/1 correctness) combines item by item into per-item
  values d: two cells of 0/1 outcomes with weights +1, -1 are `paired_binary` (McNemar), four with ±1 the 0/1
  interaction (`binary_interaction`, sign-flip), anything else `mean_difference` (t);
- a set-level quantity (the pairwise cosine, the within-length spread) combines its values and its delete-one
  values (`pairwise_cosine_leave_one_out`, `spread_leave_one_out`), read by the jackknife;
- cells of other items (the length bins of ``--design bins``) in groups that share no item: each group's
  per-item sum, the groups' means added, Welch's t (`independent_sum`); set-level quantities get none.

This is how the study reads what no single stored row holds: the trend of an interaction across every value of
a swept parameter (a weighted sum over the sweep's cells), and a contrast between two runs of the same texts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from llm_collapse.metrics.contrasts import (
    Contrast,
    binary_interaction,
    independent_sum,
    jackknife_from_leave_one_out,
    mean_difference,
    paired_binary,
    pairwise_cosine_leave_one_out,
    spread_leave_one_out,
)
from llm_collapse.records.results import ITEMS_FILE
from llm_collapse.tasks.registry import VS_BASE, VS_INTERACTION, VS_SHORTEST, metric_info

SET_LEVEL = {
    "pairwise_cosine": pairwise_cosine_leave_one_out,
    "within_length_sq_spread": spread_leave_one_out,
}
"""Set-level quantities read from their per-item terms, with the function giving their delete-one values."""


@dataclass(frozen=True)
class Cell:
    """One bin of a run: ``depth`` None for the row over all depths."""

    run: str
    model: str
    method: str
    task: str
    length: int
    depth: float | None = None


class Items:
    """Runs' per-item values indexed once by cell: the ``items.parquet`` of runs under ``root`` (each read when first
    asked for), or frames already in memory (``frames``: run name -> items frame)."""

    def __init__(self, root: Path | None = None, frames: dict[str, pd.DataFrame] | None = None):
        self.root = None if root is None else Path(root)
        self._index: dict[str, dict[tuple, pd.DataFrame]] = {}
        self._shortest: dict[tuple, int | None] = {}
        for run, frame in (frames or {}).items():
            self._index[run] = _index(frame)

    def _cells(self, run: str) -> dict[tuple, pd.DataFrame]:
        if run not in self._index:
            path = None if self.root is None else self.root / run / ITEMS_FILE
            self._index[run] = _index(pd.read_parquet(path)) if path is not None and path.is_file() else {}
        return self._index[run]

    def values(self, cell: Cell, quantity: str) -> pd.Series | None:
        """The cell's per-item ``quantity`` by item id; None where the run, cell or column is missing."""
        key = (cell.model, cell.method, cell.task, cell.length, _depth_key(cell.depth))
        rows = self._cells(cell.run).get(key)
        return rows[quantity] if rows is not None and quantity in rows.columns else None

    def shortest_length(self, cell: Cell, quantity: str) -> int | None:
        """The shortest length at which the run holds ``quantity`` for the cell's model, method, task and depth
        (worked out once per run, series and quantity: a run's re-read asks for every row)."""
        key = (cell.run, cell.model, cell.method, cell.task, _depth_key(cell.depth), quantity)
        if key not in self._shortest:
            lengths = [
                length
                for (model, method, task, length, depth), rows in self._cells(cell.run).items()
                if (model, method, task, depth) == key[1:5]
                and quantity in rows.columns
                and rows[quantity].notna().any()
            ]
            self._shortest[key] = min(lengths) if lengths else None
        return self._shortest[key]


def _depth_key(depth: float | None) -> float:
    return (
        -1.0 if depth is None or (isinstance(depth, float) and math.isnan(depth)) else round(float(depth), 9)
    )


def _index(frame: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """(model, method, task, length, depth key) -> the cell's rows by item id; per-layer rows are left out."""
    flat = frame[frame["layer"].isna()]
    depth = flat["depth"].map(_depth_key)
    return {
        (model, method, task, int(length), depth_key): rows.set_index("item")
        for (model, method, task, length, depth_key), rows in flat.groupby(
            [flat["model"], flat["method"], flat["task"], flat["length"], depth], sort=False
        )
    }


def combine(items: Items, terms: list[tuple[float, Cell]], quantity: str) -> Contrast | None:
    """``sum_j w_j cell_j`` of ``quantity`` over cells of the same items (module docstring); None where a cell is
    missing or the cells hold other items."""
    series = [items.values(cell, quantity) for _, cell in terms]
    if any(s is None for s in series):
        return None
    ids = series[0].index
    if any(len(s) != len(ids) or not s.index.isin(ids).all() for s in series):
        return _independent_groups(series, [w for w, _ in terms], quantity)
    columns = [s.loc[ids].to_numpy(dtype=np.float64) for s in series]
    weights = [w for w, _ in terms]
    if quantity in SET_LEVEL:
        parts = [SET_LEVEL[quantity](column) for column in columns]
        point = sum(w * p for w, (p, _) in zip(weights, parts, strict=True))
        loo = sum(w * loo for w, (_, loo) in zip(weights, parts, strict=True))
        return jackknife_from_leave_one_out(float(point), loo)
    binary = metric_info(quantity).proportion
    if binary and sorted(weights) == [-1.0, 1.0]:
        plus, minus = (columns[0], columns[1]) if weights[0] > 0 else (columns[1], columns[0])
        return paired_binary(plus, minus)
    d = sum(w * column for w, column in zip(weights, columns, strict=True))
    if binary and sorted(weights) == [-1.0, -1.0, 1.0, 1.0]:
        return binary_interaction(d)
    return mean_difference(d)


def _independent_groups(series: list[pd.Series], weights: list[float], quantity: str) -> Contrast | None:
    """`combine` where the cells fall into groups of the same items and the groups share no item (the length
    bins of ``--design bins``): each group's per-item weighted sum, the groups' means added, Welch's t
    (`independent_sum`); None for a set-level quantity or groups that overlap."""
    groups: dict[frozenset, list[int]] = {}
    for j, values in enumerate(series):
        groups.setdefault(frozenset(values.index), []).append(j)
    keys = list(groups)
    if quantity in SET_LEVEL or any(a & b for i, a in enumerate(keys) for b in keys[i + 1 :]):
        return None
    if any(len(series[j]) != len(key) for key, members in groups.items() for j in members):
        return None  # an item twice in a cell
    parts = []
    for members in groups.values():
        ids = series[members[0]].index
        parts.append(sum(weights[j] * series[j].loc[ids].to_numpy(dtype=np.float64) for j in members))
    return independent_sum(parts)


def contrast_terms(cell: Cell, suffix: str, shortest: int) -> list[tuple[float, Cell]]:
    """The weighted cells of a paired metric's contrast at ``cell`` (``suffix``: ``_vs_base``, ``_vs_shortest`` or
    ``_vs_base_vs_shortest``, the method x length interaction), ``shortest`` the length it starts from."""

    def at(method: str, length: int) -> Cell:
        return Cell(cell.run, cell.model, method, cell.task, length, cell.depth)

    if suffix == VS_BASE:
        return [(1.0, at(cell.method, cell.length)), (-1.0, at("base", cell.length))]
    if suffix == VS_SHORTEST:
        return [(1.0, at(cell.method, cell.length)), (-1.0, at(cell.method, shortest))]
    if suffix == VS_INTERACTION:
        return [(1.0, at(cell.method, cell.length)), (-1.0, at("base", cell.length)),
                (-1.0, at(cell.method, shortest)), (1.0, at("base", shortest))]  # fmt: skip
    raise ValueError(
        f"no contrast of the form {suffix!r} (one of {VS_BASE}, {VS_SHORTEST}, {VS_INTERACTION})"
    )


def merged(terms: list[tuple[float, Cell]]) -> list[tuple[float, Cell]]:
    """Terms with the weights of one cell summed and the cells whose weights cancel dropped, in first-seen order."""
    weights: dict[Cell, float] = {}
    for weight, cell in terms:
        weights[cell] = weights.get(cell, 0.0) + weight
    return [(weight, cell) for cell, weight in weights.items() if abs(weight) > 1e-12]


def trend_weights(values: list[float]) -> list[float]:
    """Weights giving the least-squares slope of y on ``values`` as ``sum w_i y_i``, negated: the change of y per
    unit *decrease* of the parameter (so that a temperature below 1 reads in the direction its claim asks)."""
    x = np.asarray(values, dtype=np.float64)
    centred = x - x.mean()
    if not np.any(centred):
        raise ValueError("a trend needs at least two different parameter values")
    return [float(-w) for w in centred / np.sum(centred**2)]


def trend_terms(
    cells: list[Cell], values: list[float], suffix: str, shortest: int
) -> list[tuple[float, Cell]]:
    """The trend of a contrast across a sweep, ``sum_k w_k contrast_k`` with `trend_weights`: base's cells, shared
    by every value, cancel."""
    terms = []
    for weight, cell in zip(trend_weights(values), cells, strict=True):
        terms += [(weight * w, c) for w, c in contrast_terms(cell, suffix, shortest)]
    return merged(terms)
