"""A run's paired rows read again with the current procedures (`llm_collapse.metrics.contrasts`), on loading.

A report reads every paired contrast the same way, whenever its run was made. `reread` adds the columns the
equivalence tests need and brings older rows to today's procedure:

- continuous per-item rows (a stored paired t-test p; ``*_vs_reference`` and ``*_vs_control`` too): the t
  interval and the standard error the t-test implies (`llm_collapse.metrics.contrasts.t_from_p`), in place of
  the bootstrap interval runs before 2026-12-06 stored;
- 0/1 rows against base or the shortest length: the paired table (e, f, g, h) from ``items.parquet``
  (`llm_collapse.reporting.item_contrasts`), so the equivalence test inverts Newcombe's interval, and Newcombe's
  interval itself (runs before 2026-12-05 stored a paired bootstrap);
- 0/1 differences of differences: the t interval of the per-item d and the exact sign-flip p from
  ``items.parquet`` (runs before 2026-12-06 stored one from 20,000 seeded draws beyond 16 items);
- interactions whose lengths hold other texts (``--design bins``): Welch's t from ``items.parquet``
  (`llm_collapse.metrics.contrasts.independent_sum`), named in the ``test`` column;
- set-level rows stored before 2026-12-08 (the jackknife's normal interval, no p-value): the standard error from
  that interval, read with t(n - 1): its interval, p-value and TOST scale
  (`llm_collapse.metrics.contrasts.jackknife_from_interval`).

Rows it cannot read again keep what they stored (0/1 rows against another model or method, or without per-item
data: their interval, read as `llm_collapse.metrics.contrasts.interval_tost_p` says). A recomputed estimate that differs from the stored one
means the items are not the row's: the row is left as stored and a warning names it.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from llm_collapse.metrics.contrasts import Contrast, jackknife_from_interval, t_from_p
from llm_collapse.reporting.item_contrasts import Cell, Items, combine, contrast_terms, merged
from llm_collapse.tasks.registry import (
    VS_BASE,
    VS_CONTROL,
    VS_INTERACTION,
    VS_REFERENCE,
    VS_SHORTEST,
    metric_info,
)

logger = logging.getLogger(__name__)

COUNT_COLUMNS = ("n11", "n10", "n01", "n00")
"""The paired 0/1 table of a row: both right, only the method (or the longer length) right, only the other."""
EXTRA_COLUMNS: dict[str, float] = {"se": math.nan, "df": math.nan, **dict.fromkeys(COUNT_COLUMNS, math.nan)}
"""Columns `reread` adds (NaN where a row has none), besides ``test``: the test's name where the row's metric does
not imply it (`WELCH`), else ""."""
WELCH = "Welch t"

_SUFFIXES = (
    VS_INTERACTION,
    VS_SHORTEST,
    VS_BASE,
    VS_REFERENCE,
    VS_CONTROL,
)  # an interaction also ends in _vs_shortest


def reread(results: pd.DataFrame, items: pd.DataFrame | None) -> pd.DataFrame:
    """``results`` with `EXTRA_COLUMNS` and its paired rows read with today's procedures (module docstring)."""
    out = results.assign(**EXTRA_COLUMNS, test="")
    cells = Items(frames={RUN: items}) if items is not None and len(items) else None
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
        if contrast.test == WELCH:
            out.loc[index, "test"] = WELCH
    for index, row in out[out["p_value"].isna() & out["metric"].str.contains("_vs_", regex=False)].iterrows():
        if metric_info(str(row["metric"]).split("_vs_", 1)[0]).set_level:
            c = jackknife_from_interval(
                float(row["value"]), float(row["ci_low"]), float(row["ci_high"]), int(row["n"])
            )
            if math.isfinite(c.p):
                updates[index] = [c.low, c.high, c.p, c.se, c.df, *[math.nan] * 4]
    if updates:
        columns = ["ci_low", "ci_high", "p_value", "se", "df", *COUNT_COLUMNS]
        out.loc[list(updates), columns] = np.array(list(updates.values()), dtype=np.float64)
    return out


RUN = ""
"""The one run `reread` indexes (`llm_collapse.reporting.item_contrasts.Items` keys runs by name)."""


def _reread_row(row: pd.Series, quantity: str, suffix: str, cells: Items | None) -> Contrast | None:
    value, p, n = float(row["value"]), float(row["p_value"]), int(row["n"])
    if not metric_info(quantity).proportion:
        welch = _welch(row, quantity, suffix, cells)  # the bins design's interaction: Welch's df, not n - 1
        return welch or t_from_p(value, p, n, float(row["ci_low"]), float(row["ci_high"]))
    if (
        cells is None
        or not math.isnan(float(row["layer"]))
        or suffix not in (VS_BASE, VS_SHORTEST, VS_INTERACTION)
    ):
        return None  # a 0/1 row against another model or method keeps its stored interval and test
    return _from_items(row, quantity, suffix, cells)


def _welch(row: pd.Series, quantity: str, suffix: str, cells: Items | None) -> Contrast | None:
    """An interaction row whose lengths hold other items (`independent_sum`), recomputed from items.parquet; None
    for any other row."""
    if cells is None or suffix != VS_INTERACTION or not math.isnan(float(row["layer"])):
        return None
    contrast = _from_items(row, quantity, suffix, cells)
    return contrast if contrast is not None and contrast.test == WELCH else None


def _from_items(row: pd.Series, quantity: str, suffix: str, cells: Items) -> Contrast | None:
    """The row's contrast computed from items.parquet (`combine`), or None where the cells are not there or hold
    another number of items than the row."""
    depth = None if math.isnan(float(row["depth"])) else float(row["depth"])
    cell = Cell(RUN, str(row["model"]), str(row["method"]), str(row["task"]), int(row["length"]), depth)
    shortest = cells.shortest_length(cell, quantity)
    if shortest is None:
        return None
    contrast = combine(cells, merged(contrast_terms(cell, suffix, shortest)), quantity)
    return contrast if contrast is not None and contrast.n == int(row["n"]) else None


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def _label(row: pd.Series) -> str:
    return f"{row['model']}/{row['method']} {row['task']}/{row['metric']} @{int(row['length'])}"
