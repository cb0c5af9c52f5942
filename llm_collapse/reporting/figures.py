"""One seaborn function per figure kind, one declaration per kind (`FIGURE_KINDS`), and `make_figures`, which
draws, task by task in report order, the kinds each task declares in the registry (`Task.figures`), then
the temperature sweep over every task (`sweep_kind`). Adding a kind: write its plot function, declare it in
`FIGURE_KINDS` and name it in the tasks' `Task.figures`.

Figures (file names are slugified, deterministic, and unique within a report):

- ``{task}-{metric}-{corpus}.png`` (``length``): value vs length (log2 axis), one panel per model, one line
  per method, CI bands where ``ci_low``/``ci_high`` exist (error bars for a line of one length). For every
  metric of every task that declares it (all but ``layerwise``; passkey/needle use their overall rows: depth
  NaN, or the n-weighted mean over depths). Acc@1 of a retrieval task gets a grey dashed line labelled
  "chance": 1 / the candidate documents at each length, as the run recorded them (run.json
  ``inputs.retrieval``; runs without that record get no line).
- ``{task}-{metric}-depth-{model}-{corpus}.png`` (``depth``): passkey/needle Acc@1 heatmap, depth (rows) x
  length (columns), one panel per method of that model, each cell its value and n, empty cells hatched.
- ``{task}-{metric}-position-{corpus}.png`` (``position``): position task Acc@1 vs length, one panel per
  model, colour = method, solid = early / dashed = late (the rows' depth 0.0 / 1.0; `POSITION_LABELS`).
- ``layerwise-{model}-{corpus}.png`` (``layerwise``): hf_ratio and attention entropy vs layer, one line per
  length bin, one panel per metric, ``base`` method only.
- ``tempsweep-{task}-{metric}-{corpus}.png`` (the sweep): metric vs tau, one line per length, one panel per
  model; only when at least two plain ``tempscale-<tau>`` methods exist (``base`` joins as tau = 1), and
  only for the headline metrics (`HEADLINE`, the summary table's, declared per task in the registry; all
  metrics when none of them is present) so that the sweep section stays readable.

Decisions:

- The Agg backend is selected before pyplot is imported; styles are applied with context managers only,
  so importing this module changes no global seaborn/matplotlib style.
- Panel grids are seaborn facets, ``MAX_COLUMNS`` a row with their own x and y axes (lengths, taus and
  layers may differ between panels): line figures via `_facets` (``relplot(kind="line", col=...)``),
  heatmaps via ``FacetGrid`` (a pivot per panel, the colour bar on the last one).
- Each method keeps one colour/dash/marker across all figures of a report (`MethodStyles`, passed to
  seaborn as palette/dashes/markers dicts); the one legend per figure is built from those styles, so it
  never depends on which panel happened to have which lines.
- Lines are drawn with ``errorbar=None`` (one row per point; seaborn must not bootstrap anything) and the
  bands come from the results' own CIs (``fill_between`` per facet, `_ci_bands`).
- Accuracy-type metrics whose values in a figure all lie in [0, 1] get a fixed 0..1 y axis (heatmaps:
  colour scale); geometry metrics get a free y axis per panel because baseline anisotropy differs a lot
  between models and the question is the trend with length.
- Bytes are reproducible: fixed size and dpi, ``metadata={"Software": None}`` (PNG then carries no version
  or time), sorted iteration everywhere.
- Paired contrasts (``*_vs_base``: method − base) plot like any metric, one line per non-base method, with
  a zero line and a free y axis; they are left out of the temperature sweep.
- Missing data never raises: a figure whose rows are absent is skipped with an INFO log.
- A line of one point (a single length) gets an error bar instead of a band (a band over one x is invisible),
  and where a panel has one length its methods are dodged a little apart on the log2 axis so that their
  bars do not hide each other (`_dodge`).
- Heatmap cells print the value and its n (queries); a cell without a value is hatched and marked "–", so
  an empty cell never reads as a low one.
- Titles and axis labels are wrapped to the figure's width and the panel's height (`_wrap`): a long label
  never runs into the title or past its panel. The figure's title is drawn once, in the PNG (the report
  names the figure by its alt text and caption only), because the PNGs are also shown on their own (the
  study report, the README).
"""

from __future__ import annotations

import io
import logging
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator  # noqa: E402

from llm_collapse.interventions import InterventionError, parse_method  # noqa: E402
from llm_collapse.interventions.tempscale import plain_tau  # noqa: E402
from llm_collapse.reporting.frames import (  # noqa: E402
    HEADLINE,
    HIGHER_IS_BETTER,
    METRICS,
    ReportData,
    is_contrast,
    metric_info,
    overall_rows,
    sorted_methods,
)
from llm_collapse.reporting.names import shown
from llm_collapse.tasks.registry import (  # noqa: E402
    DEFAULT_FIGURES,
    TASKS,
    VS_BASE,
    VS_INTERACTION,
    VS_SHORTEST,
    tasks_with,
)

logger = logging.getLogger(__name__)

DPI = 120
PANEL_SIZE = (4.2, 3.2)
MAX_COLUMNS = 3
RC = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
}
PNG_METADATA = {"Software": None}
TITLE_SIZE = 12  # pt: matplotlib's "large" at font.size 10, the suptitle's size
CHAR_WIDTH = 0.55  # average glyph width of DejaVu Sans in em (measured on the labels), to wrap text to inches
DODGE_LOG2 = 0.12  # how far apart (log2 units) the methods of a one-length panel are drawn
EMPTY_CELL = "–"
POSITION_LABELS: dict[float, str] = {0.0: "early", 1.0: "late"}  # depth of a position row -> its name
_POSITION_DASHES: tuple[tuple[float, ...], ...] = ((), (5.0, 2.0))
HEATMAP_METRIC = "acc@1"
CHANCE_METRIC = "acc@1"
CHANCE_LABEL = "chance"
_CHANCE_STYLE = {"color": "0.35", "linestyle": "--", "linewidth": 1.0, "zorder": 1}
SWEEP_SECTION = "temperature"
OVERVIEW_SECTION = "overview"
_COLORS = sns.color_palette("tab10").as_hex()
_DASHES: tuple[tuple[float, ...], ...] = ((), (5.0, 2.0), (1.5, 1.5), (4.0, 1.5, 1.5, 1.5))
_MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class FigureFile:
    """A written figure.

    Attributes:
        path: The PNG.
        section: Report section (a task name, or ``"temperature"``).
        title: Short title.
        caption: One-sentence description for the report.
        kind: ``"length"``, ``"depth"``, ``"position"``, ``"layerwise"`` or ``"sweep"``.
        task: The task plotted.
        metric: The metric plotted ("" for several).
        corpus: The corpus plotted.
        model: The model plotted ("" for a figure with a panel per model).
    """

    path: Path
    section: str
    title: str
    caption: str
    kind: str = ""
    task: str = ""
    metric: str = ""
    corpus: str = ""
    model: str = ""
    metrics: tuple[str, ...] = ()  # a figure of several metrics: the ones it draws, in order


@dataclass(frozen=True)
class MethodStyles:
    """Fixed colour, dash pattern and marker per method (``base`` first)."""

    methods: tuple[str, ...]

    @classmethod
    def of(cls, methods: Iterable[str]) -> MethodStyles:
        """Styles for these methods, in canonical order."""
        return cls(tuple(sorted_methods(methods)))

    def color(self, method: str) -> str:
        """Hex colour."""
        return _COLORS[self.methods.index(method) % len(_COLORS)]

    def dashes(self, method: str) -> tuple[float, ...]:
        """Dash pattern (empty: solid): each method its own, so lines that coincide stay visible."""
        return _DASHES[self.methods.index(method) % len(_DASHES)]

    def marker(self, method: str) -> str:
        """Marker symbol."""
        return _MARKERS[self.methods.index(method) % len(_MARKERS)]

    def handle(self, method: str) -> Line2D:
        """Legend handle drawn like the method's lines."""
        line = Line2D([], [], color=self.color(method), marker=self.marker(method), label=shown(method))
        if self.dashes(method):
            line.set_dashes(self.dashes(method))
        return line


# --------------------------------------------------------------------------------------------- helpers


def slugify(*parts: object) -> str:
    """File-name slug: lowercase, runs of anything but ``[a-z0-9.]`` become ``-``, parts joined by ``-``."""
    words = [re.sub(r"[^a-z0-9.]+", "-", str(p).lower()).strip("-.") for p in parts]
    return "-".join(w for w in words if w) or "figure"


def length_label(length: float) -> str:
    """Tick label for a length: 512, 1k, 32k (multiples of 1024 as k)."""
    length = int(length)
    return f"{length // 1024}k" if length >= 1024 and length % 1024 == 0 else str(length)


def _log2_lengths(ax, lengths: Sequence[float]) -> None:
    ticks = sorted({float(x) for x in lengths})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([length_label(t) for t in ticks])
    if len(ticks) == 1:
        ax.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)


def _wrap(text: str, inches: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``inches`` at ``fontsize`` (pt), at spaces only."""
    width = max(12, int(inches * 72 / (CHAR_WIDTH * fontsize)))
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def _wrap_ylabel(ax, label: str) -> None:
    """The y label, wrapped to the panel's height (it runs along the axis, so a longer one overlaps the title)."""
    height = ax.get_position().height * ax.figure.get_figheight()
    ax.set_ylabel(_wrap(label, 0.95 * height, RC["axes.labelsize"]))


def _suptitle(fig: plt.Figure, title: str) -> None:
    """The figure's one title, left-aligned and wrapped to the width of the figure and its legend (placed
    outside on the right, so that a one-panel figure's title may run above the legend)."""
    renderer = fig.canvas.get_renderer()
    legends = sum(legend.get_window_extent(renderer).width for legend in fig.legends) / fig.dpi
    text = _wrap(title, fig.get_figwidth() + legends, TITLE_SIZE)
    fig.suptitle(text, fontsize=TITLE_SIZE, x=0.01, horizontalalignment="left")


def _ci_bands(ax, data: pd.DataFrame, x: str, by: str, colors: dict) -> None:
    """One band per line (``by`` value) from the rows' own CIs; a line of one point gets an error bar."""
    band = data.dropna(subset=["ci_low", "ci_high"]).sort_values(x)
    for key, color in colors.items():
        line = band[band[by] == key]
        if line[x].nunique() == 1:
            below = np.maximum(line["value"] - line["ci_low"], 0.0)
            above = np.maximum(line["ci_high"] - line["value"], 0.0)
            ax.errorbar(
                line[x],
                line["value"],
                yerr=[below, above],
                fmt="none",
                ecolor=color,
                elinewidth=1.3,
                capsize=4,
            )
        elif len(line):
            ax.fill_between(line[x], line["ci_low"], line["ci_high"], color=color, alpha=0.12, linewidth=0)


def _dodge(rows: pd.DataFrame, col: str, x: str, by: str, order: Sequence[str]) -> pd.DataFrame:
    """``rows`` with the ``x`` (a length, log2 axis) of each panel that has one length moved apart per line.

    The lines (``by`` values, in ``order``) of such a panel sit `DODGE_LOG2` apart, centred on the length;
    panels with several lengths are left as they are.
    """
    single = rows.groupby(col)[x].transform("nunique") == 1
    if not single.any():
        return rows
    rank = {key: i for i, key in enumerate(order)}
    out = rows.assign(**{x: rows[x].astype(float)})
    for _, panel in rows[single].groupby(col):
        keys = sorted(panel[by].unique(), key=lambda k: rank.get(k, len(rank)))
        if len(keys) < 2:
            continue
        step = min(DODGE_LOG2, 0.8 / (len(keys) - 1))
        shift = {k: (i - (len(keys) - 1) / 2) * step for i, k in enumerate(keys)}
        out.loc[panel.index, x] = panel[x] * np.exp2(panel[by].map(shift).astype(float))
    return out


def _facets(
    rows: pd.DataFrame,
    col: str,
    x: str,
    hue: str,
    palette: dict,
    col_order: list | None = None,
    band_colors: dict | None = None,
    **line_kws: object,
) -> sns.FacetGrid:
    """One panel per ``col`` value (`MAX_COLUMNS` a row, own axes), one line per ``hue`` (or ``style``) value.

    A panel with one length has its lines dodged apart (`_dodge`; the caller sets the ticks from its own
    rows). seaborn draws the lines from one row per point (``errorbar=None``: nothing is bootstrapped); the bands
    are the rows' CIs in the colour of their line (``band_colors``, keyed like ``style``, else ``palette``).
    FacetGrid needs a unique index; merged rows may repeat one, so they get a fresh one. Panels are filled
    in a loop rather than with ``map_dataframe``, which runs one more ``tight_layout`` (slow) per call.
    """
    col_order = col_order or sorted(rows[col].unique())
    rows = rows.reset_index(drop=True)
    if x == "length":
        by = str(line_kws.get("style", hue))
        rows = _dodge(rows, col, x, by, list(line_kws.get("style_order") or palette))
    g = sns.relplot(
        data=rows, kind="line", x=x, y="value", col=col, col_order=col_order,
        col_wrap=min(len(col_order), MAX_COLUMNS), hue=hue, hue_order=list(palette), palette=palette,
        errorbar=None, legend=False, height=PANEL_SIZE[1], aspect=PANEL_SIZE[0] / PANEL_SIZE[1],
        facet_kws={"sharex": False, "sharey": False, "despine": False}, **line_kws,
    )  # fmt: skip
    for name, ax in g.axes_dict.items():
        _ci_bands(ax, rows[rows[col] == name], x, line_kws.get("style", hue), band_colors or palette)
    return g.set_titles("{col_name}")


def _panels(g: sns.FacetGrid, rows: pd.DataFrame, col: str) -> list[tuple[str, pd.DataFrame, object]]:
    """(``col`` value, its rows, its axes) per panel."""
    return [(name, rows[rows[col] == name], ax) for name, ax in g.axes_dict.items()]


def _finish(
    g: sns.FacetGrid, title: str, legend_title: str, handles: list[Line2D], **labels: str
) -> plt.Figure:
    """The same axis ``labels`` on every panel, one legend (``handles``, in order) and the figure title.

    Layout runs twice: the y labels are wrapped to the panels' heights once the first layout has set them.
    """
    ylabel = labels.pop("ylabel", None)
    g.set(**labels)
    g.figure.legend(handles=handles, title=legend_title, loc="center left", bbox_to_anchor=(1.0, 0.5))
    _suptitle(g.figure, title)
    g.tight_layout()
    for ax in g.axes.flat:
        _wrap_ylabel(ax, ylabel if ylabel is not None else ax.get_ylabel())
    g.tight_layout()
    return g.figure


def _is_fraction(metric: str, values: pd.Series) -> bool:
    """Accuracy-type metric whose values (and CIs) all lie in [0, 1]: it gets a fixed 0..1 scale."""
    finite = values[np.isfinite(values)]
    return metric_info(metric).direction == HIGHER_IS_BETTER and bool(((finite >= 0) & (finite <= 1)).all())


def _metric_axes(g: sns.FacetGrid, metric: str, rows: pd.DataFrame) -> None:
    """Fixed 0..1 axes for fractions; a paired difference against base gets free axes and a zero line."""
    if is_contrast(metric):
        g.refline(y=0.0, color="0.4", linestyle="-", linewidth=0.8, zorder=0)
    elif _is_fraction(metric, pd.concat([rows["value"], rows["ci_low"], rows["ci_high"]])):
        g.set(ylim=(-0.02, 1.02))


def _panel_title(model: str, tiny: set[str]) -> str:
    return f"{model} (tiny random)" if model in tiny else model


PNG_COLORS = 256
"""Colours of a saved figure's palette: a plot's few colours and their anti-aliased edges fit 256 with no visible
change, and the file is 3-4x smaller than matplotlib's RGBA (the committed reports' figures are tracked files)."""


def _save(fig, path: Path) -> None:
    """Writes ``fig`` as a palette PNG (`PNG_COLORS`, no dithering: deterministic bytes) and closes it."""
    from PIL import Image as PILImage

    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata=PNG_METADATA)
    plt.close(fig)
    image = PILImage.open(buffer).convert("RGB")
    palette = image.quantize(PNG_COLORS, method=PILImage.Quantize.MEDIANCUT, dither=PILImage.Dither.NONE)
    palette.save(path, format="PNG", optimize=True)


def _metric_order(metrics: Iterable[str]) -> list[str]:
    known = list(METRICS)
    return sorted(set(metrics), key=lambda m: (known.index(m) if m in known else len(known), m))


def task_order(tasks: Iterable[str]) -> list[str]:
    """Tasks in report order: collapse, knn, passkey, needle, layerwise, then others by name."""
    order = list(TASKS)  # read now: a task registered after import sorts in its place
    return sorted(set(tasks), key=lambda t: (order.index(t) if t in order else len(order), t))


def chance_levels(data: ReportData, task: str) -> dict[str, list[dict[int, float]]]:
    """Chance Acc@1 of ``task`` per display model: the distinct ``{length: 1 / candidates}`` maps of its runs.

    Read from each run's ``run.json`` (``inputs.retrieval[task]``: candidate documents per length); a run
    without that record (or with a malformed one) contributes nothing.
    """
    out: dict[str, list[dict[int, float]]] = {}
    for model in sorted(data.results["model"].unique()):
        maps: list[dict[int, float]] = []
        for run, _ in data.model_sources(model):
            counts = run.record.inputs.retrieval.get(task)
            if not counts:
                continue
            try:
                levels = {int(length): 1.0 / n for length, n in counts.items() if n > 0}
            except (TypeError, ValueError):
                logger.info("run %s: unreadable candidate counts for %s; no chance line", run.label, task)
                continue
            if levels and levels not in maps:
                maps.append(levels)
        if maps:
            out[model] = maps
    return out


def _draw_chance(ax, levels: Sequence[dict[int, float]], lengths: Iterable[float]) -> bool:
    """Dashed chance line(s) over the panel's lengths; True when one was drawn."""
    shown = sorted({int(x) for x in lengths})
    drawn = False
    for level in levels:
        xs = [n for n in shown if n in level]
        if not xs:
            continue
        ys = [level[n] for n in xs]
        if len(set(ys)) == 1:  # one value (the usual case; also visible with a single length)
            ax.axhline(ys[0], label=CHANCE_LABEL, **_CHANCE_STYLE)
        else:
            ax.plot(xs, ys, label=CHANCE_LABEL, **_CHANCE_STYLE)
        drawn = True
    return drawn


# ------------------------------------------------------------------------------------ figure functions


def plot_metric_vs_length(
    rows: pd.DataFrame,
    metric: str,
    styles: MethodStyles,
    tiny: set[str],
    title: str,
    chance: dict[str, list[dict[int, float]]] | None = None,
) -> plt.Figure:
    """Value vs length (log2), one panel per model, one line per method, CI bands.

    Args:
        rows: Overall rows (no depth, no layer) of one task, metric and corpus.
        metric: The metric (axis label, y range).
        styles: Method styles of the report.
        tiny: Models marked tiny_random (flagged in panel titles).
        title: Figure title.
        chance: Per model, ``{length: chance value}`` maps (`chance_levels`), drawn dashed as "chance".

    Returns:
        The figure (caller saves and closes it).
    """
    methods = sorted_methods(rows["method"].unique())
    with_chance = False
    with sns.axes_style("whitegrid"), plt.rc_context(RC):
        g = _facets(
            rows, col="model", x="length", hue="method", palette={m: styles.color(m) for m in methods},
            style="method", style_order=methods, dashes={m: styles.dashes(m) for m in methods},
            markers={m: styles.marker(m) for m in methods},
        )  # fmt: skip
        for model, sub, ax in _panels(g, rows, "model"):
            ax.set_title(_panel_title(model, tiny))
            _log2_lengths(ax, sub["length"].unique())
            if chance and chance.get(model):
                with_chance |= _draw_chance(ax, chance[model], sub["length"].unique())
        _metric_axes(g, metric, rows)
        handles = [styles.handle(m) for m in methods]
        if with_chance:
            handles.append(Line2D([], [], label=CHANCE_LABEL, **_CHANCE_STYLE))
        return _finish(
            g, title, "method", handles, xlabel="length (tokens)", ylabel=metric_info(metric).label
        )


def plot_depth_heatmap(
    rows: pd.DataFrame, metric: str, title: str, tiny: set[str] = frozenset()
) -> plt.Figure:
    """Heatmaps of ``metric`` over depth (rows) x length (columns): a row of panels per model, a panel per method.

    Every panel has every depth and length of the figure; a cell without a value is hatched and marked "–".
    Cells print the value over its n; one colour bar per row of panels.

    Args:
        rows: Per-depth rows of one task, metric and corpus.
        metric: The metric (colour bar label).
        title: Figure title.
        tiny: Models marked tiny_random (flagged in panel titles).

    Returns:
        The figure.
    """
    methods = sorted_methods(rows["method"].unique())
    models = sorted(rows["model"].unique())
    with sns.axes_style("white"), plt.rc_context(RC):
        fig, axes = plt.subplots(
            len(models), len(methods), figsize=(4.3 * len(methods), 3.3 * len(models)), squeeze=False
        )
        bounded, label = _is_fraction(metric, rows["value"]), metric_info(metric).label
        depths = sorted(float(d) for d in rows["depth"].unique())
        lengths = sorted(int(n) for n in rows["length"].unique())
        for i, model in enumerate(models):
            for j, method in enumerate(methods):
                ax = axes[i][j]
                mine = rows[(rows["model"] == model) & (rows["method"] == method)]
                _heatmap(ax, mine, depths, lengths, bounded, label if j == len(methods) - 1 else None)
                ax.set_title(f"{_panel_title(model, tiny)} / {shown(method)}")
                ax.set_xlabel("length (tokens)" if i == len(models) - 1 else "")
                ax.set_ylabel("depth" if j == 0 else "")
        _suptitle(fig, title)
        fig.tight_layout()
    return fig


def _heatmap(
    ax, data: pd.DataFrame, depths: list[float], lengths: list[int], bounded: bool, bar_label: str | None
) -> None:
    """One method's depth x length grid (0..1 colours when ``bounded``), with a colour bar if ``bar_label``.

    Each cell prints its value over ``n=``; a cell without a finite value is hatched and prints `EMPTY_CELL`.
    """
    data = data.assign(value=data["value"].where(np.isfinite(data["value"])))
    grid = data.pivot_table(index="depth", columns="length", values="value", aggfunc="mean", dropna=False)
    grid = grid.reindex(index=depths, columns=lengths)
    counts = data.dropna(subset=["value"]).pivot_table(
        index="depth", columns="length", values="n", aggfunc="sum"
    )
    counts = counts.reindex(index=depths, columns=lengths)
    text = [
        [_cell_text(grid.iat[i, j], counts.iat[i, j]) for j in range(len(lengths))]
        for i in range(len(depths))
    ]
    sns.heatmap(
        grid, ax=ax, annot=np.array(text, dtype=object), fmt="", annot_kws={"fontsize": 7.5 if len(depths) <= 6 else 6},
        cmap="viridis", vmin=0.0 if bounded else None, vmax=1.0 if bounded else None, cbar=bar_label is not None,
        cbar_kws={"label": bar_label},
    )  # fmt: skip
    for i, j in zip(*np.nonzero(grid.isna().to_numpy()), strict=True):
        ax.add_patch(Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="0.75", linewidth=0))
        ax.text(j + 0.5, i + 0.5, EMPTY_CELL, ha="center", va="center", color="0.2", fontsize=14)
    ax.set_xticklabels([length_label(c) for c in lengths], rotation=0)
    ax.set_yticklabels([f"{d:.2f}" for d in depths], rotation=0)


def _cell_text(value: float, n: float) -> str:
    """A heatmap cell: the value over its n (no n line when n is unknown); "" for an empty cell."""
    if pd.isna(value):
        return ""
    return f"{value:.2f}" if pd.isna(n) else f"{value:.2f}\nn={int(n)}"


def position_label(depth: float) -> str:
    """``early``/``late`` for the position task's depths 0.0/1.0, else ``depth 0.50``."""
    return POSITION_LABELS.get(float(depth), f"depth {depth:.2f}")


def plot_position_vs_length(
    rows: pd.DataFrame, metric: str, styles: MethodStyles, tiny: set[str], title: str
) -> plt.Figure:
    """Value vs length (log2), one panel per model; colour = method, dash = position (early solid), CI bands.

    Args:
        rows: Per-position rows (depth set, no layer) of one task, metric and corpus.
        metric: The metric (axis label, y range).
        styles: Method styles of the report.
        tiny: Models marked tiny_random (flagged in panel titles).
        title: Figure title.

    Returns:
        The figure.
    """
    methods = sorted_methods(rows["method"].unique())
    depths = sorted(float(d) for d in rows["depth"].unique())
    dashes = {d: _POSITION_DASHES[min(i, len(_POSITION_DASHES) - 1)] for i, d in enumerate(depths)}
    lines = {f"{m} @ {d!r}": (m, d) for m in methods for d in depths}  # style level: marker of m, dash of d
    rows = rows.assign(
        line=[f"{shown(m)} @ {float(d)!r}" for m, d in zip(rows["method"], rows["depth"], strict=True)]
    )
    with sns.axes_style("whitegrid"), plt.rc_context(RC):
        g = _facets(
            rows, col="model", x="length", hue="method", palette={m: styles.color(m) for m in methods},
            band_colors={k: styles.color(m) for k, (m, _) in lines.items()}, style="line", style_order=list(lines),
            dashes={k: dashes[d] for k, (_, d) in lines.items()},
            markers={k: styles.marker(m) for k, (m, _) in lines.items()}, markersize=5,
        )  # fmt: skip
        for model, sub, ax in _panels(g, rows, "model"):
            ax.set_title(_panel_title(model, tiny))
            _log2_lengths(ax, sub["length"].unique())
        _metric_axes(g, metric, rows)
        handles = [styles.handle(m) for m in methods]
        handles += [Line2D([], [], color="0.3", dashes=dashes[d], label=position_label(d)) for d in depths]
        return _finish(
            g, title, "method / position", handles, xlabel="length (tokens)", ylabel=metric_info(metric).label
        )


def plot_layerwise(rows: pd.DataFrame, title: str) -> plt.Figure:
    """Per-layer metrics (hf_ratio, attention entropy, ...), one panel per metric, one line per length.

    Args:
        rows: Layer rows of one model, method and corpus.
        title: Figure title (names the model).

    Returns:
        The figure.
    """
    lengths = sorted(int(x) for x in rows["length"].unique())
    palette = dict(zip(lengths, sns.color_palette("viridis", len(lengths)).as_hex(), strict=True))
    with sns.axes_style("whitegrid"), plt.rc_context(RC):
        g = _facets(
            rows, col="metric", col_order=_metric_order(rows["metric"].unique()), x="layer", hue="length",
            palette=palette, marker="o", markersize=4,
        )  # fmt: skip
        for metric, ax in g.axes_dict.items():
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(metric_info(metric).label)
        handles = [Line2D([], [], color=c, marker="o", label=length_label(n)) for n, c in palette.items()]
        return _finish(g, title, "length", handles, xlabel="layer")


def plot_temperature_sweep(rows: pd.DataFrame, metric: str, tiny: set[str], title: str) -> plt.Figure:
    """Metric vs temperature tau, one panel per model, one line per length bin.

    Args:
        rows: Overall rows of one task, metric and corpus with a ``tau`` column.
        metric: The metric.
        tiny: Models marked tiny_random.
        title: Figure title.

    Returns:
        The figure.
    """
    lengths = sorted(int(x) for x in rows["length"].unique())
    palette = dict(zip(lengths, sns.color_palette("viridis", len(lengths)).as_hex(), strict=True))
    with sns.axes_style("whitegrid"), plt.rc_context(RC):
        g = _facets(rows, col="model", x="tau", hue="length", palette=palette, marker="o")
        g.refline(x=1.0, color="0.5", linestyle=":", linewidth=1)
        for model, sub, ax in _panels(g, rows, "model"):
            ax.set_title(_panel_title(model, tiny))
            ax.set_xticks(sorted(sub["tau"].unique()))
        _metric_axes(g, metric, rows)
        handles = [Line2D([], [], color=c, marker="o", label=length_label(n)) for n, c in palette.items()]
        return _finish(g, title, "length", handles, xlabel="tau (1 = base)", ylabel=metric_info(metric).label)


def plot_overview(rows: pd.DataFrame, metric: str, methods: Sequence[str], title: str) -> plt.Figure:
    """The study's overview: ``metric`` against length per method with CI bands (left), and each non-base
    method's interaction ``<metric>_vs_base_vs_shortest`` against length (right: the method's effect on the
    change that comes with length; 0 = none), on a log2 length axis.

    Args:
        rows: Overall rows (depth and layer NaN) of one model, task and corpus.
        metric: The metric.
        methods: Methods to draw, ``base`` first.
        title: Figure title.
    """
    styles = MethodStyles.of(methods)
    colors = {m: styles.color(m) for m in methods}
    with sns.axes_style("whitegrid"), plt.rc_context(RC):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        panels = (
            (left, metric, list(methods)),
            (right, metric + VS_INTERACTION, [m for m in methods if m != "base"]),
        )
        for ax, name, drawn in panels:
            data = rows[(rows["metric"] == name) & rows["method"].isin(drawn)]
            _ci_bands(ax, data, "length", "method", {m: colors[m] for m in drawn})
            for method in drawn:
                line = data[data["method"] == method].sort_values("length")
                ax.plot(
                    line["length"],
                    line["value"],
                    color=colors[method],
                    marker=styles.marker(method),
                    label=shown(method),
                )
            _log2_lengths(ax, rows["length"].unique())
            ax.set_xlabel("length (tokens)")
        right.axhline(0.0, color="0.5", linestyle=":", linewidth=1)
        left.set_title("each method")
        right.set_title("method x length interaction (paired)")
        fig.legend(handles=[styles.handle(m) for m in methods], loc="center left", bbox_to_anchor=(1.0, 0.5))
        _suptitle(fig, title)
        fig.tight_layout()
        _wrap_ylabel(left, metric_info(metric).label)
        _wrap_ylabel(right, "(method − base) − same at shortest")
        fig.tight_layout()
        return fig


def save_figure(fig: plt.Figure, path: Path) -> None:
    """Writes ``fig`` as the reports' PNGs are written (same DPI and metadata) and closes it."""
    _save(fig, path)


# ------------------------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class _Figure:
    """One figure to draw: what it shows (task, metric, model, corpus), its rows and the report's styles.

    Attributes:
        task: The task plotted.
        metric: The metric plotted ("" for a figure of several).
        model: The model plotted ("" for a figure with a panel per model).
        corpus: The corpus plotted.
        rows: Its rows.
        styles: Method styles of the report.
        tiny: Models marked tiny_random.
        chance: The task's chance Acc@1 per model (`chance_levels`).
    """

    task: str
    metric: str
    model: str
    corpus: str
    rows: pd.DataFrame
    styles: MethodStyles
    tiny: set[str]
    chance: dict[str, list[dict[int, float]]]
    group: str = ""  # a figure of a group of metrics (`LENGTH_GROUPS`): its name

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics a group figure draws, in order (its own metric otherwise)."""
        if not self.group:
            return (self.metric,) if self.metric else ()
        return tuple(_metric_order(self.rows["metric"].unique()))

    @property
    def label(self) -> str:
        """The metric's label."""
        return metric_info(self.metric).label

    @property
    def panel(self) -> str:
        """The model as a panel title names it (flagged when tiny random)."""
        return _panel_title(self.model, self.tiny)

    @property
    def chance_lines(self) -> dict[str, list[dict[int, float]]] | None:
        """The chance levels to draw: the task's for Acc@1 (`CHANCE_METRIC`), else None."""
        return self.chance if self.metric == CHANCE_METRIC else None


@dataclass(frozen=True)
class FigureKind:
    """How one kind of figure is made.

    `make_figures` takes the kind's ``rows`` from a task's rows (the sweep's: every task's); when none are
    left it logs ``skip`` and moves on. Otherwise it draws one figure per entry of ``each`` x corpus whose
    rows ``keep`` accepts.

    Attributes:
        name: What `Task.figures` names and `FigureFile.kind` says.
        rows: The rows it plots, from a task's rows.
        skip: Logged when ``rows`` leaves none (``{task}`` is filled in).
        each: One figure's column values per entry, in order: a metric (`_each_metric`), a model
            (`_each_model`) or a task and metric (`_each_headline`); the figure's corpus is added to it.
        draw: The figure, from a `_Figure` and its title.
        title: The figure's title.
        caption: Its one-sentence description.
        slug: Its file name's parts (`slugify`).
        metric: The metric of its figures when ``each`` names none ("" for figures of several metrics).
        section: The report section; "" for the task's own.
        keep: Whether a figure's (non-empty) rows are enough to draw.
        note: A line logged before the figures, from the task's rows ("" for none).
    """

    name: str
    rows: Callable[[pd.DataFrame], pd.DataFrame]
    skip: str
    each: Callable[[pd.DataFrame], list[dict[str, str]]]
    draw: Callable[[_Figure, str], plt.Figure]
    title: Callable[[_Figure], str]
    caption: Callable[[_Figure], str]
    slug: Callable[[_Figure], tuple[str, ...]]
    metric: str = ""
    section: str = ""
    keep: Callable[[pd.DataFrame], bool] = lambda rows: True
    note: Callable[[pd.DataFrame], str] = lambda rows: ""


def _each_metric(rows: pd.DataFrame) -> list[dict[str, str]]:
    return [{"metric": metric} for metric in _metric_order(rows["metric"].unique())]


def _each_model(rows: pd.DataFrame) -> list[dict[str, str]]:
    return [{"model": model} for model in sorted(rows["model"].unique())]


def _each_headline(rows: pd.DataFrame) -> list[dict[str, str]]:
    """The (task, metric) pairs present, in `HEADLINE` order; every pair present when none is a headline."""
    present = sorted(set(map(tuple, rows[["task", "metric"]].drop_duplicates().to_numpy().tolist())))
    pairs = [pair for pair in HEADLINE if pair in present] or present
    return [{"task": task, "metric": metric} for task, metric in pairs]


def _placed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Per-depth (per-position) rows: depth set, no layer."""
    return rows[rows["depth"].notna() & rows["layer"].isna()]


def _heatmap_rows(rows: pd.DataFrame) -> pd.DataFrame:
    placed = _placed_rows(rows)
    return placed[placed["metric"] == HEATMAP_METRIC]


def _layer_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["layer"].notna() & ~rows["metric"].map(is_contrast)]


def _base_layer_rows(rows: pd.DataFrame) -> pd.DataFrame:
    layered = _layer_rows(rows)
    return layered[layered["method"] == "base"]


def _other_layer_methods(rows: pd.DataFrame) -> str:
    others = sorted_methods(set(_layer_rows(rows)["method"]) - {"base"})
    return (
        f"layerwise figures show the base method only (also measured: {', '.join(others)})" if others else ""
    )


LENGTH_GROUPS: dict[str, tuple[str, str]] = {
    "values": ("each metric", "each metric's value"),
    "vs-base": ("method − base", "each method's paired difference from base on the same texts (0: none)"),
    "vs-shortest": (
        "change from the shortest length",
        "the paired change from the shortest length, and that change's difference from base's (the method x "
        "length interaction; 0: none)",
    ),
    "vs-other": (
        "other paired contrasts",
        "the paired differences from a reference model or a control method",
    ),
}
"""The value-vs-length figures of a task: one per group of its metrics (name -> title, what it draws)."""


def _group_of(metric: str) -> str:
    if not is_contrast(metric):
        return "values"
    if metric.endswith(VS_SHORTEST):
        return "vs-shortest"
    return "vs-base" if metric.endswith(VS_BASE) else "vs-other"


def _grouped_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Overall rows with their `LENGTH_GROUPS` name in a ``group`` column."""
    chosen = overall_rows(rows)
    return chosen.assign(group=chosen["metric"].map(_group_of))


def _each_group(rows: pd.DataFrame) -> list[dict[str, str]]:
    return [{"group": group} for group in LENGTH_GROUPS if (rows["group"] == group).any()]


def _draw_group(f: _Figure, title: str) -> plt.Figure:
    """A group's metrics as small multiples (`llm_collapse.reporting.small_multiples.plot_grid`)."""
    from llm_collapse.reporting.small_multiples import plot_grid

    def finish(ax, metric: str, model: str, panel: pd.DataFrame) -> None:
        _log2_lengths(ax, f.rows["length"].unique())
        if metric == CHANCE_METRIC and f.chance.get(model):
            _draw_chance(ax, f.chance[model], panel["length"].unique())
        if _is_fraction(metric, pd.concat([panel["value"], panel["ci_low"], panel["ci_high"]])) and not (
            is_contrast(metric)
        ):
            ax.set_ylim(-0.02, 1.02)

    def chance(ax, metric: str, model: str) -> list[Line2D]:
        drawn = metric == CHANCE_METRIC and bool(f.chance.get(model))
        return [Line2D([], [], label=CHANCE_LABEL, **_CHANCE_STYLE)] if drawn else []

    with plt.rc_context(RC):
        return plot_grid(
            f.rows, [(f.task, m) for m in f.metrics], f.styles, title,
            panel_title=lambda model: _panel_title(model, f.tiny), finish=finish, decorate=chance,
        )  # fmt: skip


def _group_caption(f: _Figure) -> str:
    bands = "error bars" if f.rows["length"].nunique() == 1 else "bands"
    chance = "; dashed: chance (1 / candidate documents)" if CHANCE_METRIC in f.metrics and f.chance else ""
    return (
        f"{LENGTH_GROUPS[f.group][1][0].upper()}{LENGTH_GROUPS[f.group][1][1:]} vs length (log2 axis) on corpus "
        f"{f.corpus}: a row per metric (its axis says which way is more collapse), a column per model, a line "
        f"per method; {bands} are the reported CIs{chance}."
    )


FIGURE_KINDS: dict[str, FigureKind] = {
    kind.name: kind
    for kind in (
        FigureKind(
            "length",
            rows=_grouped_rows,
            skip="{task}: no overall rows; skipping value-vs-length figures",
            each=_each_group,
            draw=_draw_group,
            title=lambda f: f"{f.task}: {LENGTH_GROUPS[f.group][0]} vs length ({f.corpus})",
            caption=_group_caption,
            slug=lambda f: (f.task, f.group, f.corpus),
        ),
        FigureKind(
            "depth",
            rows=_heatmap_rows,
            skip=f"{{task}}: no per-depth {HEATMAP_METRIC} rows; skipping depth heatmaps",
            each=lambda rows: [{}],
            metric=HEATMAP_METRIC,
            draw=lambda f, title: plot_depth_heatmap(f.rows, f.metric, title, f.tiny),
            title=lambda f: f"{f.task}: {f.label} by depth and length ({f.corpus})",
            caption=lambda f: (
                f"{f.label} on {f.corpus} by needle depth (rows of a panel, bin centres) and length (columns), "
                "each cell its value over n (queries), hatched where there is none; a row of panels per model, "
                "a panel per method."
            ),
            slug=lambda f: (f.task, f.metric, "depth", f.corpus),
        ),
        FigureKind(
            "position",
            rows=_placed_rows,
            skip="{task}: no per-position rows; skipping position figures",
            each=_each_metric,
            draw=lambda f, title: plot_position_vs_length(f.rows, f.metric, f.styles, f.tiny, title),
            title=lambda f: f"{f.task}: {f.label} vs length, early vs late ({f.corpus})",
            caption=lambda f: (
                f"{f.label} vs document length (log2 axis) when the discriminating sentence opens the document "
                "(early, solid) or closes it (late, dashed); one panel per model, colour = method, bands are "
                "the reported CIs."
            ),
            slug=lambda f: (f.task, f.metric, "position", f.corpus),
        ),
        FigureKind(
            "layerwise",
            rows=_base_layer_rows,
            skip="{task}: no base-method layer rows; skipping layerwise figures",
            note=_other_layer_methods,
            each=_each_model,
            draw=lambda f, title: plot_layerwise(f.rows, title),
            title=lambda f: f"{f.task}: {f.panel}, base ({f.corpus})",
            caption=lambda f: (
                f"Per-layer statistics of {f.model} (base method) on {f.corpus}: one panel per metric, one line "
                "per length bin."
            ),
            slug=lambda f: (f.task, f.model, f.corpus),
        ),
    )
}
"""The figure kinds a task can declare (`Task.figures`), each drawn from that task's rows."""


def temperatures(data: ReportData) -> dict[str, float]:
    """tau of each method that is one plain `TempScale` (a point of the sweep), by slug, from the parsed
    ``methods`` of each run's config (`parse_method`), never decoded from a slug; ``base`` is 1."""
    taus = {"base": 1.0}
    for run in data.runs:
        config = run.record.config if isinstance(run.record.config, dict) else {}
        for text in config.get("methods") or ():
            try:
                method = parse_method(text)
            except InterventionError as err:
                logger.warning(
                    "%s: method %r does not parse (%s); left out of the temperature sweep",
                    run.label,
                    text,
                    err,
                )
                continue
            if (tau := plain_tau(method.stack.parts)) is not None:
                taus[method.slug] = tau
    return taus


def sweep_rows(results: pd.DataFrame, taus: dict[str, float]) -> pd.DataFrame:
    """Overall rows of ``base`` and the plain temperature methods with a ``tau`` column.

    Empty unless at least two distinct temperature methods exist. Where a ``tempscale-1`` exists next to
    ``base``, the explicit one is kept for tau = 1.

    Args:
        results: Tidy results.
        taus: tau by method slug (`temperatures`).

    Returns:
        Rows (tasks with layerwise figures excluded) with ``tau``.
    """
    methods = [m for m in results["method"].unique() if m != "base" and m in taus]
    if len(methods) < 2:
        return results.iloc[0:0].assign(tau=pd.Series(dtype=float))
    layerwise = tasks_with(figure="layerwise")
    plain = results[~results["task"].isin(layerwise) & ~results["metric"].map(is_contrast)]
    rows = overall_rows(plain)
    rows = rows[rows["method"].isin(taus)].assign(tau=lambda f: f["method"].map(taus))
    explicit_one = set(rows.loc[(rows["method"] != "base") & (rows["tau"] == 1.0), "model"])
    rows = rows[~((rows["method"] == "base") & rows["model"].isin(explicit_one))]
    return rows


def sweep_kind(taus: dict[str, float]) -> FigureKind:
    """The temperature sweep over the methods of ``taus`` (`temperatures`): drawn once, after every task,
    from every task's rows."""
    return FigureKind(
        "sweep",
        rows=partial(sweep_rows, taus=taus),
        skip="fewer than two tempscale-<tau> methods; skipping the temperature sweep",
        each=_each_headline,
        keep=lambda rows: rows["tau"].nunique() >= 2,
        draw=lambda f, title: plot_temperature_sweep(f.rows, f.metric, f.tiny, title),
        title=lambda f: f"temperature sweep: {f.task} {f.label} ({f.corpus})",
        caption=lambda f: (
            f"Task {f.task}: {f.label} on {f.corpus} vs attention temperature tau (base = 1, tau < 1 sharpens); "
            "one panel per model, one line per length bin."
        ),
        slug=lambda f: ("tempsweep", f.task, f.metric, f.corpus),
        section=SWEEP_SECTION,
    )


def _overview_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Overall rows of each headline metric (`HEADLINE`) as the overview draws it (`_overview_panels`)."""
    chosen = overall_rows(rows)
    keys = set(_overview_panels(chosen))
    return chosen[[(t, m) in keys for t, m in zip(chosen["task"], chosen["metric"], strict=True)]]


def _overview_panels(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """Per headline metric present: its method x length interaction where the run has it (what the verdict table
    tests), else its paired difference from base, else its values."""
    present = set(zip(rows["task"], rows["metric"], strict=True))
    panels = []
    for task, metric in HEADLINE:
        for name in (metric + VS_INTERACTION, metric + VS_BASE, metric):
            if (task, name) in present:
                panels.append((task, name))
                break
    return panels


def overview_kind() -> FigureKind:
    """The report's first figure: a panel per headline metric, as the verdict table reads it (the interaction),
    every model x method a line (`llm_collapse.reporting.small_multiples.plot_overview`)."""

    def draw(f: _Figure, title: str) -> plt.Figure:
        from llm_collapse.reporting.small_multiples import plot_overview

        def finish(ax, task: str, metric: str, panel: pd.DataFrame) -> None:
            _log2_lengths(ax, f.rows["length"].unique())
            if is_contrast(metric):
                ax.axhline(0.0, color="0.4", linewidth=0.8, zorder=0)
            elif _is_fraction(metric, pd.concat([panel["value"], panel["ci_low"], panel["ci_high"]])):
                ax.set_ylim(-0.02, 1.02)

        with plt.rc_context(RC):
            return plot_overview(f.rows, _overview_panels(f.rows), f.styles, title, finish=finish)

    return FigureKind(
        "overview",
        rows=_overview_rows,
        skip="no headline metric; no overview figure",
        each=lambda rows: [{}],
        draw=draw,
        title=lambda f: f"Overview ({f.corpus}): does a method change the collapse that comes with length?",
        caption=lambda f: (
            f"Per headline metric on {f.corpus} vs length (log2 axis): (method − base) − the same at the shortest "
            "length where the run has it (0: the method leaves the change with length as base has it; the axis "
            "says which way is more collapse), else method − base, else the values; colour = method, line style "
            "and marker = model. The task figures below draw every metric with its CIs."
        ),
        slug=lambda f: ("overview", f.corpus),
        section=OVERVIEW_SECTION,
    )


def figure_kinds(task: str) -> tuple[FigureKind, ...]:
    """The kinds of figure ``task`` gets, in order: its `Task.figures` (`DEFAULT_FIGURES` if unknown)."""
    return tuple(FIGURE_KINDS[name] for name in (TASKS[task].figures if task in TASKS else DEFAULT_FIGURES))


class _Writer:
    """Saves figures under one folder with unique slugs and collects `FigureFile` records; with ``draw`` off it
    only collects them (the figure is never drawn)."""

    def __init__(self, fig_dir: Path, *, draw: bool = True) -> None:
        self.fig_dir = fig_dir
        self.draw = draw
        self.files: list[FigureFile] = []
        self._used: set[str] = set()

    def save(
        self, figure: Callable[[], Any], slug: str, section: str, title: str, caption: str, **what: str
    ) -> None:
        """Record one figure under a slug unique in the folder; when drawing, call ``figure()`` and write its PNG."""
        name, k = slug, 1
        while name in self._used:
            k += 1
            name = f"{slug}-{k}"
        self._used.add(name)
        path = self.fig_dir / f"{name}.png"
        if self.draw:
            _save(figure(), path)
            logger.info("figure %s", path.name)
        self.files.append(FigureFile(path=path, section=section, title=title, caption=caption, **what))


def make_figures(data: ReportData, fig_dir: Path, *, draw: bool = True) -> list[FigureFile]:
    """Write every figure the data supports into ``fig_dir``: each task's kinds, then the temperature sweep.

    Args:
        data: Loaded results.
        fig_dir: Output folder (created when drawing).
        draw: False plans the same figures (paths, titles, captions) without drawing or writing any: what
            report.md needs, at a fraction of the cost (drawing is most of a report's time).

    Returns:
        The figures in report order (tasks in the registry's order, each its kinds in order, then the sweep).
    """
    if draw:
        fig_dir.mkdir(parents=True, exist_ok=True)
    writer = _Writer(fig_dir, draw=draw)
    styles = MethodStyles.of(data.results["method"])
    tiny = set(data.tiny_models)
    results = data.results
    _make_kind(writer, overview_kind(), "", results, styles, tiny, {})
    for task in task_order(results["task"].unique()):
        rows, chance = results[results["task"] == task], chance_levels(data, task)
        for kind in figure_kinds(task):
            _make_kind(writer, kind, task, rows, styles, tiny, chance)
    _make_kind(writer, sweep_kind(temperatures(data)), "", results, styles, tiny, {})
    return writer.files


def _make_kind(
    writer: _Writer,
    kind: FigureKind,
    task: str,
    rows: pd.DataFrame,
    styles: MethodStyles,
    tiny: set[str],
    chance: dict[str, list[dict[int, float]]],
) -> None:
    """Every figure of ``kind`` from one task's ``rows`` (the sweep: every task's, ``task`` "")."""
    chosen = kind.rows(rows)
    if chosen.empty:
        logger.info(kind.skip.format(task=task))
        return
    if note := kind.note(rows):
        logger.info(note)
    for key in kind.each(chosen):
        for corpus in sorted(chosen["corpus"].unique()):
            picked = {**key, "corpus": corpus}
            sub = chosen
            for column, value in picked.items():
                sub = sub[sub[column] == value]
            if sub.empty or not kind.keep(sub):
                continue
            what = {"task": task, "metric": kind.metric, "model": "", **picked}
            f = _Figure(**what, rows=sub, styles=styles, tiny=tiny, chance=chance)
            title = kind.title(f)
            writer.save(
                partial(kind.draw, f, title), slugify(*kind.slug(f)), kind.section or f.task, title, kind.caption(f),
                kind=kind.name, task=f.task, metric=f.metric, corpus=corpus, model=f.model, metrics=f.metrics,
            )  # fmt: skip
