"""Two summary tables about the change that comes with length: the method x length interaction and the
decomposition of the paper's distance.

- Verdicts (the run report's answer): per model x non-base method x headline metric, base's change and the
  method's from the shortest to the longest length, and the ``*_vs_base_vs_shortest`` row at the longest
  length, (method - base at L) - (method - base at the shortest), read with its test after Holm's correction
  across the table ("less collapse": the method shrinks the collapse that comes with length).
- Decomposition: per model x method, the change from the shortest to the longest length of the squared
  distance to the global centroid and of its two parts (within-length spread, the length centroid's offset),
  tested like the summary table's changes, and the offset's share of the change (only where the change
  survives its test: the share of a change indistinguishable from 0 is noise).

Both are absent where the run has no such rows (runs written before them; the bins design's interaction rows,
Welch's t between the lengths, exist from 2026-12-06, its decomposition rows not).
"""

from __future__ import annotations

import math

import pandas as pd

from llm_collapse.metrics.decomposition import DECOMPOSITION_KEYS
from llm_collapse.reporting.frames import ReportData, overall_rows, sorted_methods
from llm_collapse.reporting.names import method_cell
from llm_collapse.reporting.significance import change_test, paired_test, read_changes
from llm_collapse.reporting.tables import (
    Table,
    fmt,
    fmt_ci,
    headline_metrics,
    judge,
    length_text,
    model_cell,
    summary_models,
)
from llm_collapse.tasks.registry import VS_INTERACTION, VS_SHORTEST, metric_info


def verdict_table(data: ReportData) -> Table | None:
    """The run's answer, a row per model x non-base method and a column per headline metric: the method x
    length interaction at the longest length (the difference of the method's change with length from base's,
    on the same items) with its 95% CI and reading after Holm's correction across the table, then base's and
    the method's own changes. None where the run has no interaction rows (one length, or older runs)."""
    models, all_tiny = summary_models(data)
    rows = overall_rows(data.results[data.results["model"].isin(models)])
    did = rows[rows["metric"].str.endswith(VS_INTERACTION)]
    pairs = [(task, metric) for task, metric in headline_metrics(data)
             if ((did["task"] == task) & (did["metric"] == metric + VS_INTERACTION)).any()]  # fmt: skip
    if not pairs:
        return None
    tiny = set(data.tiny_models) if all_tiny else set()
    headers = ["model", "method", *(f"{metric} {_at(did, task, metric)}" for task, metric in pairs)]
    body, changes = [], []
    for model in models:
        for method in sorted_methods(did.loc[did["model"] == model, "method"]):
            row = [model_cell(model, tiny), method_cell(method)]
            for task, metric in pairs:
                mine = _longest(did, model, method, task, metric + VS_INTERACTION)
                row.append("—" if mine is None else None)
                if mine is None:
                    continue
                digits = metric_info(metric).digits
                long = int(mine["length"])
                base, own = (_change(rows, model, m, task, metric, long, digits) for m in ("base", method))
                ci = fmt_ci(mine["value"], mine["ci_low"], mine["ci_high"], digits)
                said = (len(body), len(row) - 1, ci, f"change with length: base {base}, method {own}")
                changes.append((*said, (metric, mine["value"], paired_test(mine), digits)))
            body.append(row)
    readings = read_changes([c for *_, c in changes], judge, data.margins)
    for (i, j, ci, own, _), text in zip(changes, readings, strict=True):
        verdict, _, test = text.partition(" ")[2].strip("()").partition("; ")
        body[i][j] = f"**{verdict}** {ci} ({test}); {own}"
    return Table(tuple(headers), tuple(tuple(r) for r in body), (False, False, *(False for _ in pairs)))


def _change(
    rows: pd.DataFrame, model: str, method: str, task: str, metric: str, long: int, digits: int
) -> str:
    """``+0.19``: the metric's change from the shortest length to ``long`` tokens for one model and method."""
    mine = rows[(rows["model"] == model) & (rows["method"] == method) & (rows["task"] == task)
                & (rows["metric"] == metric)].dropna(subset=["value"])  # fmt: skip
    if mine.empty or long not in set(mine["length"]):
        return "—"
    short = mine.sort_values("length").iloc[0]
    end = mine[mine["length"] == long].iloc[0]
    delta = end["value"] - short["value"]
    return f"{delta:+.{digits}f}"


def _at(rows: pd.DataFrame, task: str, metric: str) -> str:
    lengths = rows.loc[(rows["task"] == task) & (rows["metric"] == metric + VS_INTERACTION), "length"]
    return length_text(int(lengths.max()))


def decomposition_table(data: ReportData) -> Table | None:
    """Shortest -> longest change of the squared distance to the global centroid and of its two parts."""
    models, all_tiny = summary_models(data)
    rows = overall_rows(data.results[data.results["model"].isin(models)])
    rows = rows[(rows["task"] == "collapse") & rows["metric"].isin(DECOMPOSITION_KEYS)]
    if rows.empty:
        return None
    paired = data.results[data.results["metric"].str.endswith(VS_SHORTEST)]
    tiny = set(data.tiny_models) if all_tiny else set()
    headers = ["model", "method", "lengths", *(f"Δ {key}" for key in DECOMPOSITION_KEYS), "offset share of Δ"]
    body, changes = [], []
    for model in models:
        for method in sorted_methods(rows.loc[rows["model"] == model, "method"]):
            mine = rows[(rows["model"] == model) & (rows["method"] == method)]
            cell_paired = paired[(paired["model"] == model) & (paired["method"] == method)]
            lengths = sorted(mine["length"].unique())
            if len(lengths) < 2:
                continue
            short, long = lengths[0], lengths[-1]
            row = [
                model_cell(model, tiny),
                method_cell(method),
                f"{length_text(short)} → {length_text(long)}",
            ]
            deltas = {}
            for key in DECOMPOSITION_KEYS:
                a = mine[(mine["metric"] == key) & (mine["length"] == short)].iloc[0]
                b = mine[(mine["metric"] == key) & (mine["length"] == long)].iloc[0]
                deltas[key] = float(b["value"] - a["value"])
                test = change_test(key, a, b, cell_paired, VS_SHORTEST)
                row.append(None)
                changes.append((len(body), len(row) - 1, (key, deltas[key], test, metric_info(key).digits)))
            whole = deltas[DECOMPOSITION_KEYS[0]]
            share = deltas[DECOMPOSITION_KEYS[2]] / whole if whole else math.nan
            row.append(fmt(100 * share, 0) + "%" if math.isfinite(share) else "n/a")
            body.append(row)
    if not body:
        return None
    for (i, j, _), text in zip(
        changes, read_changes([c for *_, c in changes], judge, data.margins), strict=True
    ):
        body[i][j] = text
    for row in body:  # a share of a change that did not survive its test is noise: not printed
        if not any(f"({word};" in row[3] for word in ("more collapse", "less collapse", "higher", "lower")):
            row[-1] = "—"
    return Table(tuple(headers), tuple(tuple(r) for r in body), (False, False, False, True, True, True, True))


def _longest(rows: pd.DataFrame, model: str, method: str, task: str, metric: str) -> pd.Series | None:
    mine = rows[(rows["model"] == model) & (rows["method"] == method) & (rows["task"] == task)
                & (rows["metric"] == metric)].dropna(subset=["value"])  # fmt: skip
    return None if mine.empty else mine.sort_values("length").iloc[-1]
