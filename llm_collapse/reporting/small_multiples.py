"""Small multiples: several metrics of one task in one figure, a row per metric and a column per model, every
method a line in each panel (`plot_grid`). The run report's overview and its per-task figures are drawn here.

Decisions:

- One figure per group of metrics instead of one per metric: a default run drew 31 near-identical one-panel
  figures; its groups (values, paired contrasts against base, changes with length) draw six or seven.
- Axes are shared: x (length, log2) everywhere, y along a row, so the models of a row, and the runs of a merged
  report (their models share the panels), read against one scale; each row's label says which way is more
  collapse (an arrow), or better, where the metric has a direction.
- Equal lines stay visible: each method has its own colour, marker and dash pattern, and the markers shrink
  from the first method to the last, so a line drawn over an identical one leaves the earlier one's ring.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from llm_collapse.reporting.frames import is_contrast, metric_info
from llm_collapse.reporting.names import shown
from llm_collapse.tasks.registry import (
    CLOSER_IF_HIGHER,
    HIGHER_IS_BETTER,
    MORE_COLLAPSE_IF_HIGHER,
    MORE_COLLAPSE_IF_LOWER,
    VS_BASE,
    VS_INTERACTION,
)

PANEL = (3.6, 2.5)  # inches per panel
ARROWS = {
    MORE_COLLAPSE_IF_HIGHER: "↑ more collapse",
    MORE_COLLAPSE_IF_LOWER: "↓ more collapse",
    HIGHER_IS_BETTER: "↑ better",
    CLOSER_IF_HIGHER: "↑ closer",
}


def axis_label(metric: str, task: str = "") -> str:
    """The metric's label (after its task, where a figure mixes tasks) and, where it has a direction, which way
    is more collapse (or better)."""
    info = metric_info(metric)
    arrow = ARROWS.get(info.direction or "")
    label = f"{task}: {info.label}" if task else info.label
    return _wrapped(f"{label} ({arrow})" if arrow else label)


def _wrapped(text: str, width: int = 30) -> str:
    import textwrap

    return textwrap.fill(text, width, break_long_words=False)


def plot_grid(
    rows: pd.DataFrame,
    metrics: Sequence[tuple[str, str]],
    styles,
    title: str,
    *,
    panel_title,
    finish,
    decorate=None,
) -> plt.Figure:
    """``metrics`` (rows of panels) x models (columns) of overall rows, a line per method.

    Args:
        rows: Overall rows (no depth, no layer) of one corpus.
        metrics: The (task, metric) pairs, one row of panels each, in order.
        styles: The report's `MethodStyles`.
        title: The figure's title.
        panel_title: Model -> its panel title (flags tiny random models).
        finish: ``finish(ax, metric, model, panel_rows)`` sets the length axis (and draws chance lines).
        decorate: Optional ``decorate(ax, metric, model) -> list[Line2D]`` extra legend handles.
    """
    models = sorted(rows["model"].unique())
    methods = [m for m in styles.methods if m in set(rows["method"])]
    size = (PANEL[0] * len(models) + 1.8, PANEL[1] * len(metrics) + 0.9)
    extra: dict[str, Line2D] = {}
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(
            len(metrics), len(models), figsize=size, sharex="col", sharey="row", squeeze=False
        )
        for i, (task, metric) in enumerate(metrics):
            for j, model in enumerate(models):
                ax = axes[i][j]
                panel = rows[(rows["task"] == task) & (rows["metric"] == metric) & (rows["model"] == model)]
                for k, method in enumerate(methods):
                    _line(ax, panel[panel["method"] == method], styles, method, k, len(methods))
                if is_contrast(metric):
                    ax.axhline(0.0, color="0.4", linewidth=0.8, zorder=0)
                finish(ax, metric, model, panel)
                for handle in decorate(ax, metric, model) if decorate else ():
                    extra[handle.get_label()] = handle
                if i == 0:
                    ax.set_title(panel_title(model))
                if j == 0:
                    ax.set_ylabel(
                        axis_label(metric, task if len({t for t, _ in metrics}) > 1 else ""), fontsize=9
                    )
                if i == len(metrics) - 1:
                    ax.set_xlabel("length (tokens)")
        handles = [_handle(styles, m, k, len(methods)) for k, m in enumerate(methods)] + list(extra.values())
        fig.legend(handles=handles, title="method", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.subplots_adjust(top=1 - 0.55 / size[1])  # room for the title above the panels' own titles
        fig.suptitle(title, x=0.01, y=1 - 0.12 / size[1], horizontalalignment="left", fontsize=12)
    return fig


def _size(k: int, n: int) -> float:
    """Marker size of the k-th of n methods: the first largest, so equal points leave rings."""
    return 8.0 - 4.0 * k / max(n - 1, 1)


def _line(ax, line: pd.DataFrame, styles, method: str, k: int, n: int) -> None:
    line = line.dropna(subset=["value"]).sort_values("length")
    if line.empty:
        return
    color = styles.color(method)
    if line["length"].nunique() > 1 and {"ci_low", "ci_high"} <= set(line) and line["ci_low"].notna().any():
        ax.fill_between(line["length"], line["ci_low"], line["ci_high"], color=color, alpha=0.12, linewidth=0)
    elif line["ci_low"].notna().any():
        below = np.maximum(line["value"] - line["ci_low"], 0.0)
        above = np.maximum(line["ci_high"] - line["value"], 0.0)
        ax.errorbar(line["length"], line["value"], yerr=[below, above], fmt="none", ecolor=color, capsize=3)
    (drawn,) = ax.plot(
        line["length"], line["value"], color=color, marker=styles.marker(method), markersize=_size(k, n),
        markerfacecolor="none" if k == 0 else color, linewidth=1.6, zorder=2 + k,
    )  # fmt: skip
    if dashes := styles.dashes(method):
        drawn.set_dashes(dashes)


def _handle(styles, method: str, k: int, n: int) -> Line2D:
    handle = styles.handle(method)
    handle.set_markersize(_size(k, n))
    if k == 0:
        handle.set_markerfacecolor("none")
    return handle


MODEL_DASHES: tuple[tuple[float, ...], ...] = ((), (5.0, 2.0), (1.5, 1.5), (4.0, 1.5, 1.5, 1.5))
MODEL_MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P")


def plot_overview(
    rows: pd.DataFrame, panels: Sequence[tuple[str, str]], styles, title: str, *, finish
) -> plt.Figure:
    """The report's first figure, one row: a panel per (task, metric) of ``panels`` (a headline metric's
    interaction, or its difference from base, or its values), every model x method a line in it: colour =
    method (as in every figure of the report), line style and marker = model.

    Args:
        rows: Overall rows of one corpus.
        panels: (task, metric) per panel, in order.
        styles: The report's `MethodStyles`.
        title: The figure's title.
        finish: ``finish(ax, task, metric, panel_rows)`` sets the length axis (and a zero line).
    """
    models = sorted(rows["model"].unique())
    methods = [m for m in styles.methods if m in set(rows["method"])]
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels) + 2.2, 3.2), squeeze=False)
        for ax, (task, metric) in zip(axes[0], panels, strict=True):
            panel = rows[(rows["task"] == task) & (rows["metric"] == metric)]
            for i, model in enumerate(models):
                for method in methods:
                    line = panel[(panel["model"] == model) & (panel["method"] == method)]
                    line = line.dropna(subset=["value"]).sort_values("length")
                    if line.empty:
                        continue
                    (drawn,) = ax.plot(
                        line["length"], line["value"], color=styles.color(method),
                        marker=MODEL_MARKERS[i % len(MODEL_MARKERS)], markersize=5, linewidth=1.5,
                    )  # fmt: skip
                    if dashes := MODEL_DASHES[i % len(MODEL_DASHES)]:
                        drawn.set_dashes(dashes)
            own, what = _overview_axis(metric)
            ax.set_title(_wrapped(f"{task}: {metric_info(own).label}", 34), fontsize=9)
            ax.set_xlabel("length (tokens)")
            arrow = ARROWS.get(metric_info(metric).direction or "", "")
            ax.set_ylabel(_wrapped(f"{what} ({arrow})" if arrow else what, 26), fontsize=8)
            finish(ax, task, metric, panel)
        handles = [Line2D([], [], color=styles.color(m), label=shown(m)) for m in methods]
        handles += [
            Line2D([], [], color="0.3", marker=MODEL_MARKERS[i % len(MODEL_MARKERS)], label=model,
                   dashes=MODEL_DASHES[i % len(MODEL_DASHES)] or (None, None))
            for i, model in enumerate(models)
        ]  # fmt: skip
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        fig.tight_layout()
        fig.subplots_adjust(top=0.78)
        fig.suptitle(title, x=0.01, y=0.99, horizontalalignment="left", fontsize=11)
    return fig


def _overview_axis(metric: str) -> tuple[str, str]:
    """(the metric on its own scale, what the overview's y axis shows of it)."""
    if metric.endswith(VS_INTERACTION):
        return metric.removesuffix(VS_INTERACTION), "(method − base) − same at the shortest"
    if metric.endswith(VS_BASE):
        return metric.removesuffix(VS_BASE), "method − base"
    return metric, "value"
