"""Tables for the report: a small `Table` type rendered to markdown and to equivalent HTML, and builders.

Decisions:

- A `Table` holds cells as inline markdown (``**bold**``, ```code```, links); `inline_html`
  (`llm_collapse.reporting.markup`, markdown-it-py) turns each into HTML, raw HTML escaped. report.md and
  report.html are rendered from the same `Table` objects, so they cannot disagree. The markdown comes from
  the package's one table renderer, `llm_collapse.utils.markdown.markdown_table`.
- Summary table: rows are model x method (x corpus when there are several); for each headline metric
  present, the value at the row's shortest and longest length with its CI, and the change. The change
  is tested (paired when the run stored ``*_vs_shortest`` rows, the prefix design; unpaired otherwise),
  Holm-adjusted across the table and read only where it survives (`llm_collapse.reporting.significance`).
  When every row shares the same shortest/longest length it goes into the header, otherwise into each cell.
- tiny_random models are left out of the summary table when a real model exists; when none does, every
  row is kept and marked, so a tiny-only report can never be read as a finding.
- Values tables print values only, except paired contrasts (``*_vs_base``), whose paired CI is the point.
- Numbers: 3 decimals (1 decimal from 100 up; a metric may ask for more, `MetricInfo.digits`); NaN prints
  as ``n/a``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from llm_collapse.reporting.frames import (
    CLOSER_IF_HIGHER,
    HEADLINE,
    HIGHER_IS_BETTER,
    MORE_COLLAPSE_IF_HIGHER,
    MORE_COLLAPSE_IF_LOWER,
    VS_BASE,
    VS_SHORTEST,
    ReportData,
    is_contrast,
    metric_info,
    overall_rows,
    sorted_methods,
)
from llm_collapse.reporting.markup import inline_html
from llm_collapse.reporting.names import method_cell
from llm_collapse.reporting.significance import change_test, paired_test, read_changes
from llm_collapse.utils.markdown import markdown_table

TINY_MARK = "**(tiny random)**"


@dataclass(frozen=True)
class Table:
    """A table of inline-markup strings.

    Attributes:
        headers: Column headers.
        rows: Rows, each as long as ``headers``.
        numeric: Per column, whether to right-align it.
    """

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]

    def to_markdown(self) -> str:
        """GitHub-flavoured markdown (`markdown_table`, cells escaped), no trailing newline."""
        return markdown_table(self.headers, self.rows, ["r" if num else "" for num in self.numeric])

    def to_html(self) -> str:
        """An HTML ``<table>`` with the same content."""
        align = [' class="num"' if num else "" for num in self.numeric]
        head = "".join(f"<th{a}>{inline_html(h)}</th>" for a, h in zip(align, self.headers, strict=True))
        body = "\n".join(
            "<tr>"
            + "".join(f"<td{a}>{inline_html(c)}</td>" for a, c in zip(align, row, strict=True))
            + "</tr>"
            for row in self.rows
        )
        return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def fmt(value: float, digits: int = 3) -> str:
    """``digits`` decimals (3; see `MetricInfo.digits`), 1 from 100 up, ``n/a`` for NaN."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def fmt_ci(value: float, low: float, high: float, digits: int = 3) -> str:
    """``value [low, high]``, or just the value when there is no CI."""
    if math.isfinite(low) and math.isfinite(high):
        return f"{fmt(value, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]"
    return fmt(value, digits)


def length_text(length: int) -> str:
    """``@512``, ``@4k``."""
    return f"@{length // 1024}k" if length >= 1024 and length % 1024 == 0 else f"@{length}"


def judge(metric: str, delta: float) -> str:
    """Words for a change of ``delta`` in ``metric``: more/less collapse, better/worse, or ""."""
    direction = metric_info(metric).direction
    if not math.isfinite(delta) or delta == 0 or not direction:
        return ""
    up = delta > 0
    if direction == MORE_COLLAPSE_IF_HIGHER:
        return "more collapse" if up else "less collapse"
    if direction == MORE_COLLAPSE_IF_LOWER:
        return "less collapse" if up else "more collapse"
    if direction == HIGHER_IS_BETTER:
        return "better" if up else "worse"
    if direction == CLOSER_IF_HIGHER:
        return "less drift" if up else "more drift"
    return ""


def model_cell(model: str, tiny: set[str]) -> str:
    """Model name, marked when tiny_random."""
    return f"{model} {TINY_MARK}" if model in tiny else model


# ------------------------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class _Endpoint:
    length: int
    value: float
    low: float
    high: float
    row: pd.Series


def _endpoints(cell: pd.DataFrame) -> tuple[_Endpoint, _Endpoint] | None:
    cell = cell.dropna(subset=["value"]).sort_values("length")
    if cell.empty:
        return None
    first, last = cell.iloc[0], cell.iloc[-1]

    def point(row) -> _Endpoint:
        return _Endpoint(
            int(row["length"]), float(row["value"]), float(row["ci_low"]), float(row["ci_high"]), row
        )

    return point(first), point(last)


def summary_models(data: ReportData) -> tuple[list[str], bool]:
    """Models the summary table covers and whether they are all tiny (rows then get marked).

    Args:
        data: Loaded results.

    Returns:
        (models, all_tiny).
    """
    tiny = set(data.tiny_models)
    real = [m for m in data.models if m not in tiny]
    return (real, False) if real else (list(data.models), bool(tiny))


def headline_metrics(data: ReportData) -> list[tuple[str, str]]:
    """The (task, metric) pairs of `HEADLINE` that the results contain."""
    present = set(map(tuple, data.results[["task", "metric"]].drop_duplicates().to_numpy().tolist()))
    return [pair for pair in HEADLINE if pair in present]


def summary_table(data: ReportData) -> Table | None:
    """Side-by-side summary: shortest vs longest length per model x method for each headline metric.

    Args:
        data: Loaded results.

    Returns:
        The table, or None when no headline metric is present.
    """
    pairs = headline_metrics(data)
    if not pairs:
        return None
    models, all_tiny = summary_models(data)
    rows = overall_rows(data.results[data.results["model"].isin(models)])
    corpora = sorted(rows["corpus"].unique())
    keys = [
        (model, method, corpus)
        for model in models
        for method in sorted_methods(rows.loc[rows["model"] == model, "method"])
        for corpus in corpora
        if ((rows["model"] == model) & (rows["method"] == method) & (rows["corpus"] == corpus)).any()
    ]
    ends = {(key, pair): _cell_endpoints(rows, key, pair) for key in keys for pair in pairs}
    single = one_length(data)
    headers = ["model", "method"] + (["corpus"] if len(corpora) > 1 else [])
    numeric = [False] * len(headers)
    columns = []
    metric_names = [pair[1] for pair in pairs]
    for pair in pairs:
        name = pair[1] if metric_names.count(pair[1]) == 1 else f"{pair[0]} {pair[1]}"
        found = [e for (_, p), e in ends.items() if p == pair and e is not None]
        shorts = {e[0].length for e in found}
        longs = {e[1].length for e in found}
        short_h = length_text(shorts.pop()) if len(shorts) == 1 else "shortest"
        long_h = length_text(longs.pop()) if len(longs) == 1 else "longest"
        per_cell = short_h == "shortest" or long_h == "longest"
        if single:
            headers.append(f"{name} {long_h}")
            numeric.append(True)
        else:
            headers += [f"{name} {short_h}", f"{name} {long_h}", f"Δ {name}"]
            numeric += [True, True, False]
        columns.append(per_cell)
    tiny = set(data.tiny_models) if all_tiny else set()
    paired = data.results[data.results["metric"].str.endswith(VS_SHORTEST)]
    body, changes = [], []
    for key in keys:
        model, method, corpus = key
        row = [model_cell(model, tiny), method_cell(method)] + ([corpus] if len(corpora) > 1 else [])
        for pair, per_cell in zip(pairs, columns, strict=True):
            cells, change = _summary_cells(
                ends[(key, pair)], pair, per_cell, _cell_rows(paired, key, pair, VS_SHORTEST)
            )
            row += cells[1:2] if single else cells
            if change is not None:
                changes.append((len(body), len(row) - 1, change))
        body.append(row)
    for (i, j, _), text in zip(
        changes, read_changes([c for _, _, c in changes], judge, data.margins), strict=True
    ):
        body[i][j] = text
    return Table(tuple(headers), tuple(tuple(r) for r in body), tuple(numeric))


def one_length(data: ReportData) -> bool:
    """Whether the run measured a single length: its summary shows one value per metric and no change."""
    return data.results["length"].nunique() == 1


def _cell_rows(
    rows: pd.DataFrame, key: tuple[str, str, str], pair: tuple[str, str], suffix: str = ""
) -> pd.DataFrame:
    """Overall rows of one (model, method, corpus) x (task, metric + suffix)."""
    model, method, corpus = key
    task, metric = pair
    mask = (
        (rows["model"] == model)
        & (rows["method"] == method)
        & (rows["corpus"] == corpus)
        & (rows["task"] == task)
        & (rows["metric"] == metric + suffix)
        & rows["depth"].isna()
        & rows["layer"].isna()
    )
    return rows[mask]


def _cell_endpoints(rows: pd.DataFrame, key: tuple[str, str, str], pair: tuple[str, str]):
    return _endpoints(_cell_rows(rows, key, pair))


def _summary_cells(ends, pair: tuple[str, str], per_cell: bool, paired: pd.DataFrame):
    """The shortest and longest value cells (and a placeholder for the change), and the change to test:
    ``(metric, delta, test, digits)``, or None where there is nothing to test."""
    metric = pair[1]
    if ends is None:
        return ["—", "—", "—"], None
    short, long = ends
    where = (lambda e: f" ({length_text(e.length)})") if per_cell else (lambda e: "")
    digits = metric_info(metric).digits
    cells = [
        fmt_ci(short.value, short.low, short.high, digits) + where(short),
        fmt_ci(long.value, long.low, long.high, digits) + where(long),
    ]
    if short.length == long.length:
        return [*cells, "— (one length)"], None
    test = change_test(metric, short.row, long.row, paired, VS_SHORTEST)
    return [*cells, None], (metric, long.value - short.value, test, digits)


def summary_legend(data: ReportData) -> list[str]:
    """One line per headline metric: its label and direction."""
    lines = []
    for _, metric in headline_metrics(data):
        info = metric_info(metric)
        lines.append(f"`{metric}`: {info.label}" + (f" ({info.direction})" if info.direction else ""))
    return lines


# -------------------------------------------------------------------------------------- per-task tables


def _depth_rows(data: ReportData, task: str, metric: str, corpus: str) -> pd.DataFrame:
    """Per-depth rows (depth set, no layer) of one task/metric/corpus."""
    frame = data.results
    return frame[
        (frame["task"] == task)
        & (frame["metric"] == metric)
        & (frame["corpus"] == corpus)
        & frame["depth"].notna()
        & frame["layer"].isna()
    ]


def values_by_depth(
    data: ReportData, task: str, metric: str, corpus: str, label: Callable[[float], str]
) -> Table | None:
    """Per-depth values (the position task: early/late) of one task/metric/corpus: rows model x method x
    depth, one column per length, CIs where reported.

    Args:
        data: Loaded results.
        task: Task name.
        metric: Metric name.
        corpus: Corpus name.
        label: Depth -> its name in the table (``0.0`` -> ``early``).

    Returns:
        The table, or None without per-depth rows.
    """
    rows = _depth_rows(data, task, metric, corpus)
    if rows.empty:
        return None
    lengths = sorted(int(x) for x in rows["length"].unique())
    tiny = set(data.tiny_models)
    body = []
    for model in sorted(rows["model"].unique()):
        sub = rows[rows["model"] == model]
        for method in sorted_methods(sub["method"]):
            for depth in sorted(sub.loc[sub["method"] == method, "depth"].unique()):
                cell = sub[(sub["method"] == method) & (sub["depth"] == depth)].set_index("length")
                cells = [
                    fmt_ci(*(float(cell.at[n, c]) for c in ("value", "ci_low", "ci_high")))
                    if n in cell.index
                    else "—"
                    for n in lengths
                ]
                body.append((model_cell(model, tiny), method_cell(method), label(depth), *cells))
    headers = ("model", "method", "position", *(length_text(n)[1:] for n in lengths))
    return Table(headers, tuple(body), (False, False, False, *([True] * len(lengths))))


def paired_by_depth(data: ReportData, task: str, metric: str, corpus: str, model: str) -> Table | None:
    """Each method minus base by key depth (rows method x depth, one column per length) for one model, from
    the run's ``<metric>_vs_base`` rows: the paired difference with its 95% CI and its reading after Holm's
    correction across every cell of the table (the depth heatmap shows the values; this tests them).

    Returns:
        The table, or None without per-depth paired rows.
    """
    rows = _depth_rows(data, task, metric + VS_BASE, corpus)
    rows = rows[rows["model"] == model]
    if rows.empty:
        return None
    lengths = sorted(int(x) for x in rows["length"].unique())
    digits = metric_info(metric).digits
    body, changes = [], []
    for method in sorted_methods(rows["method"]):
        for depth in sorted(rows.loc[rows["method"] == method, "depth"].unique()):
            cell = rows[(rows["method"] == method) & (rows["depth"] == depth)].set_index("length")
            row = [method_cell(method), f"{depth:.2f}"]
            for n in lengths:
                if n not in cell.index:
                    row.append("—")
                    continue
                r = cell.loc[n]
                ci = fmt_ci(r["value"], r["ci_low"], r["ci_high"], digits)
                changes.append((len(body), len(row), ci, (metric, float(r["value"]), paired_test(r), digits)))
                row.append(None)  # filled below, once Holm has seen every cell
            body.append(row)
    texts = read_changes([change for *_, change in changes], judge, data.margins)
    for (i, j, ci, _), text in zip(changes, texts, strict=True):
        body[i][j] = f"{ci}: {text.partition(' ')[2]}"
    headers = ("method", "depth", *(length_text(n)[1:] for n in lengths))
    return Table(headers, tuple(tuple(r) for r in body), (False, False, *([True] * len(lengths))))


def values_by_length(data: ReportData, task: str, metric: str, corpus: str) -> Table | None:
    """Values of one task/metric/corpus: rows model x method, one column per length.

    Args:
        data: Loaded results.
        task: Task name.
        metric: Metric name.
        corpus: Corpus name.

    Returns:
        The table, or None without rows.
    """
    rows = overall_rows(data.results[data.results["task"] == task])
    rows = rows[(rows["metric"] == metric) & (rows["corpus"] == corpus)]
    if rows.empty:
        return None
    lengths = sorted(int(x) for x in rows["length"].unique())
    tiny = set(data.tiny_models)
    digits = metric_info(metric).digits
    contrast = is_contrast(metric)
    body = []
    for model in sorted(rows["model"].unique()):
        sub = rows[rows["model"] == model]
        for method in sorted_methods(sub["method"]):
            values = dict(
                zip(
                    sub.loc[sub["method"] == method, "length"],
                    sub.loc[sub["method"] == method, ["value", "ci_low", "ci_high"]].to_numpy(float).tolist(),
                    strict=True,
                )
            )
            cells = [_value_cell(values[n], digits, contrast) if n in values else "—" for n in lengths]
            body.append((model_cell(model, tiny), method_cell(method), *cells))
    headers = ("model", "method", *(length_text(n)[1:] for n in lengths))
    return Table(headers, tuple(body), (False, False, *([True] * len(lengths))))


def _value_cell(value_ci: list[float], digits: int, with_ci: bool) -> str:
    """A values-table cell: paired contrasts show their CI (the point of pairing), other metrics the value."""
    value, low, high = value_ci
    return fmt_ci(value, low, high, digits) if with_ci else fmt(value, digits)


def models_table(data: ReportData) -> Table:
    """Model metadata: dtype, pooling, attention, sliding window, max length, weights, tiny flag, texts.

    Args:
        data: Loaded results.

    Returns:
        One row per (model, run it comes from).
    """
    headers = (
        "model",
        "run",
        "dtype",
        "pooling",
        "attention",
        "sliding window",
        "max length",
        "weights",
        "tiny random",
        "texts",
    )
    body = []
    for model in data.models:
        for run, record in data.model_records(model):
            describe = record.describe if record is not None else {}
            weights = describe.get("weights") or {}
            source = weights.get("source") if isinstance(weights, dict) else weights
            body.append(
                (
                    model,
                    run.label,
                    _text(describe.get("dtype")),
                    _text(describe.get("pooling")),
                    _text(describe.get("attn_implementation")),
                    _text(describe.get("sliding_window"), none="none" if describe else "?"),
                    _text(describe.get("max_length")),
                    _text(source),
                    "**yes**" if record is not None and record.tiny_random else ("no" if record else "?"),
                    _text(record.n_texts if record is not None else None),
                )
            )
    return Table(headers, tuple(body), (False,) * 6 + (True, False, False, True))


def _text(value: object, none: str = "?") -> str:
    if value is None or value == "":
        return none
    return str(value)
