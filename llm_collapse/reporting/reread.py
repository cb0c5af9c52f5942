"""A run's paired rows read again with the current procedures (`llm_collapse.metrics.contrasts`), on loading.

A report reads every paired contrast (``*_vs_base``, ``*_vs_shortest``, ``*_vs_base_vs_shortest``) the same
way, whenever its run was made. `reread` adds the columns the equivalence tests need and brings older rows to
today's procedure:

- continuous per-item rows (a stored paired t-test p): the t interval and the standard error the t-test
  implies (`llm_collapse.metrics.contrasts.t_from_p`), in place of the bootstrap interval runs before
  2026-12-06 stored;
- 0/1 rows against base or the shortest length: the paired table (e, f, g, h) from ``items.parquet``, so the
  equivalence test inverts Newcombe's interval, and Newcombe's interval itself (runs before 2026-12-05
  stored a paired bootstrap);
- 0/1 differences of differences: the t interval and standard error of the per-item d from ``items.parquet``
  (the sign-flip p stays as stored).

Rows it cannot read again keep what they stored (set-level rows, which store no p-value: their jackknife
interval; rows without per-item data: their interval, read as `llm_collapse.metrics.contrasts.interval_tost_p`
says). A recomputed
estimate that differs from the stored one means the items are not the row's: the row is left as stored and
a warning names it.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from llm_collapse.metrics.contrasts import Contrast, binary_from_counts, mean_difference, t_from_p
from llm_collapse.tasks.registry import VS_BASE, VS_INTERACTION, VS_SHORTEST, metric_info

logger = logging.getLogger(__name__)

COUNT_COLUMNS = ("n11", "n10", "n01", "n00")
"""The paired 0/1 table of a row: both right, only the method (or the longer length) right, only the other."""
EXTRA_COLUMNS: dict[str, float] = {"se": math.nan, "df": math.nan, **dict.fromkeys(COUNT_COLUMNS, math.nan)}
"""Columns `reread` adds (NaN where a row has none)."""

_SUFFIXES = (VS_INTERACTION, VS_SHORTEST, VS_BASE)  # longest first: an interaction also ends in _vs_shortest


def reread(results: pd.DataFrame, items: pd.DataFrame | None) -> pd.DataFrame:
    """``results`` with `EXTRA_COLUMNS` and its paired rows read with today's procedures (module docstring)."""
    out = results.assign(**EXTRA_COLUMNS)
    cells = _Cells(items) if items is not None and len(items) else None
    tested = out[out["p_value"].notna() & out["metric"].str.contains("_vs_", regex=False)]
    updates: dict[int, list[float]] = {}
    for index, row in tested.iterrows():
        metric = str(row["metric"])
        suffix = next((s for s in _SUFFIXES if metric.endswith(s)), None)
        if suffix is None:
            continue
        contrast = _reread_row(row, metric[: -len(suffix)], suffix, cells)
        if contrast is None:
            continue
        if not _same(contrast.estimate, float(row["value"])):
            logger.warning("%s: items.parquet gives %.6g, the row %.6g; left as stored", _label(row),
                           contrast.estimate, row["value"])  # fmt: skip
            continue
        counts = contrast.counts or [math.nan] * 4
        updates[index] = [contrast.low, contrast.high, contrast.p, contrast.se, contrast.df, *counts]
    if updates:
        columns = ["ci_low", "ci_high", "p_value", "se", "df", *COUNT_COLUMNS]
        out.loc[list(updates), columns] = np.array(list(updates.values()), dtype=np.float64)
    return out


def _reread_row(row: pd.Series, quantity: str, suffix: str, cells: _Cells | None) -> Contrast | None:
    value, p, n = float(row["value"]), float(row["p_value"]), int(row["n"])
    if not metric_info(quantity).proportion:
        return t_from_p(value, p, n, float(row["ci_low"]), float(row["ci_high"]))
    if cells is None or not math.isnan(float(row["layer"])):
        return None
    sides = cells.sides(row, quantity, suffix)
    if sides is None:
        return None
    if suffix == VS_INTERACTION:
        m_long, b_long, m_short, b_short = sides
        contrast = mean_difference((m_long - b_long) - (m_short - b_short), "sign-flip", p)
        return contrast if contrast.n == n else None
    a, b = sides
    contrast = binary_from_counts(_counts(a, b))
    return contrast if contrast.n == n else None


def _counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int, int]:
    return (int(((a == 1) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum()),
            int(((a == 0) & (b == 1)).sum()), int(((a == 0) & (b == 0)).sum()))  # fmt: skip


class _Cells:
    """Per-item values of one run by (model, method, task, length, depth), aligned on the item ids."""

    def __init__(self, items: pd.DataFrame):
        flat = items[items["layer"].isna()].assign(_depth=items["depth"].fillna(-1.0))
        self._groups = {key: group.set_index("item") for key, group in
                        flat.groupby(["model", "method", "task", "length", "_depth"], sort=False)}  # fmt: skip
        self._shortest: dict[tuple, int] = {}
        for model, method, task, length, depth in self._groups:
            key = (model, method, task, depth)
            self._shortest[key] = min(length, self._shortest.get(key, length))

    def _cell(self, model, method, task, length, depth) -> pd.DataFrame | None:
        return self._groups.get((model, method, task, length, depth))

    def sides(self, row: pd.Series, quantity: str, suffix: str) -> list[np.ndarray] | None:
        """The per-item values a paired row compares, aligned item by item; None where a cell or the column is
        missing or the cells hold other items."""
        model, method, task, length = row["model"], row["method"], row["task"], int(row["length"])
        depth = -1.0 if math.isnan(float(row["depth"])) else float(row["depth"])
        short = self._shortest.get((model, method, task, depth))
        if suffix == VS_BASE:
            keys = [(method, length), ("base", length)]
        elif suffix == VS_SHORTEST:
            keys = [(method, length), (method, short)]
        else:
            keys = [(method, length), ("base", length), (method, short), ("base", short)]
        cells = [self._cell(model, m, task, n, depth) for m, n in keys]
        if any(c is None or quantity not in c.columns for c in cells):
            return None
        ids = cells[0].index
        if any(len(c.index) != len(ids) or not c.index.isin(ids).all() for c in cells):
            return None
        return [c.loc[ids, quantity].to_numpy(dtype=np.float64) for c in cells]


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def _label(row: pd.Series) -> str:
    return f"{row['model']}/{row['method']} {row['task']}/{row['metric']} @{int(row['length'])}"
