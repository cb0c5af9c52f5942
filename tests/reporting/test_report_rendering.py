"""How reports look: inline markdown read by markdown-it-py (real links), tables that scroll, figure titles
drawn once, error bars for a single length, heatmap cells with n and marked empty cells, and labels that
stay clear of the title."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection
from matplotlib.patches import Rectangle

from llm_collapse.records.results import result_row
from llm_collapse.reporting import build_report, figures
from llm_collapse.reporting.blocks import Paragraph, render_html
from llm_collapse.reporting.figures import EMPTY_CELL, MethodStyles
from llm_collapse.reporting.markup import inline_html
from llm_collapse.reporting.synthetic_runs import write_synthetic_run
from llm_collapse.reporting.tables import Table

pytest.importorskip("seaborn")


class _Text(HTMLParser):
    """The visible text of a page (no alt attributes, no style)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._style = False

    def handle_starttag(self, tag, attrs):
        self._style = tag == "style"

    def handle_endtag(self, tag):
        self._style = False

    def handle_data(self, data):
        if not self._style:
            self.parts.append(data)


def _visible(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    return " ".join("".join(parser.parts).split())


# ---------------------------------------------------------------------------------------------- markup


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**x** <y>", "<strong>x</strong> &lt;y&gt;"),
        ("[minilm](minilm/report.md) and `a|b`", '<a href="minilm/report.md">minilm</a> and <code>a|b</code>'),
        ("[run](report.md#caveats), [site](https://example.org/x)",
         '<a href="report.md#caveats">run</a>, <a href="https://example.org/x">site</a>'),
        ("*Mean pairwise cosine*; pairwise_cosine @256 [0.1, 0.2]",
         "<em>Mean pairwise cosine</em>; pairwise_cosine @256 [0.1, 0.2]"),
        ('<script>alert("x")</script> & co', "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"),
    ],
)  # fmt: skip
def test_inline_markdown_is_read_by_commonmark(text, expected):
    assert inline_html(text) == expected


def test_tables_scroll_and_links_in_every_block_are_anchors(tmp_path):
    wide = Table(tuple(f"column {i}" for i in range(40)), (tuple(f"[r{i}](r{i}/report.md)" for i in range(40)),),
                 (False,) * 40)  # fmt: skip
    page = render_html([Paragraph("See [a](a/report.md)."), wide], "t")
    assert ".scroll{overflow-x:auto" in page
    assert re.search(r'<div class="scroll">\n<table>.*?</table>\n</div>', page, re.DOTALL)
    assert page.count("<table>") == page.count('<div class="scroll">') == 1
    anchors = re.findall(r'<a href="([^"]+)">', page)
    assert anchors == ["a/report.md", *(f"r{i}/report.md" for i in range(40))]
    assert "](" not in _visible(page)  # no markdown link left as text


# --------------------------------------------------------------------------------------- figure titles


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    run = write_synthetic_run(
        tmp_path_factory.mktemp("render") / "run", models=("m",), methods=("base", "tempscale:0.5"),
        tasks=("collapse", "passkey"),
    )  # fmt: skip
    return build_report([run], run)


def test_each_figure_title_appears_once_in_the_report(small_report):
    md = small_report["report.md"].read_text(encoding="utf-8")
    images = re.findall(r"!\[([^\]]+)\]\((figures/[^)]+)\)", md)
    assert len(images) == sum(1 for key in small_report if key.startswith("figures/")) > 3
    visible = _visible(small_report["report.html"].read_text(encoding="utf-8"))
    for title, _ in images:
        assert md.count(title) == 1, title  # the alt text only: no heading, no caption repeats it
        assert title not in visible


def test_the_png_draws_its_title_once():
    rows = _curve(("a", "b"), ("base", "tempscale-0.5"), (256, 1024))
    fig = figures.plot_metric_vs_length(
        rows, "acc@1", MethodStyles.of(["base", "tempscale-0.5"]), set(), "T: x"
    )
    try:
        assert fig.get_suptitle() == "T: x"
        assert [ax.get_title() for ax in fig.axes] == ["a", "b"]
    finally:
        plt.close(fig)


# ------------------------------------------------------------------------------------------- error bars


def _curve(models, methods, lengths, metric="acc@1", task="passkey", **extra):
    return pd.DataFrame(
        [
            result_row(model=m, method=method, task=task, corpus="c", length=n, metric=metric,
                       value=0.2 + 0.1 * j + 0.05 * i, ci=(0.1 + 0.1 * j, 0.4 + 0.1 * j + 0.05 * i), n=10, **extra)
            for m in models for j, method in enumerate(methods) for i, n in enumerate(lengths)
        ]
    )  # fmt: skip


def test_one_length_draws_error_bars_dodged_apart():
    methods = ("base", "tempscale-0.5", "tempscale-0.9")
    rows = _curve(("m",), methods, (32768,))
    styles = MethodStyles.of(methods)
    fig = figures.plot_metric_vs_length(rows, "acc@1", styles, set(), "title")
    try:
        (ax,) = fig.axes
        bars = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert len(bars) == len(methods)
        drawn = {}
        for bar in bars:
            ((x0, y0), (x1, y1)) = bar.get_segments()[0]
            assert x0 == x1
            drawn[tuple(bar.get_color()[0][:3])] = (x0, y0, y1)
        xs = []
        for method in methods:
            row = rows[rows["method"] == method].iloc[0]
            x, low, high = drawn[tuple(plt.matplotlib.colors.to_rgb(styles.color(method)))]
            assert (low, high) == pytest.approx((row["ci_low"], row["ci_high"]))
            xs.append(x)
        assert xs == sorted(xs) and len(set(xs)) == 3  # apart, in method order
        assert np.log2(xs) == pytest.approx(np.log2(32768) + np.array([-1, 0, 1]) * figures.DODGE_LOG2)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["32k"]
        assert ax.get_xlim()[0] < min(xs) and max(xs) < ax.get_xlim()[1]
    finally:
        plt.close(fig)


def test_several_lengths_keep_bands_and_no_dodge():
    rows = _curve(("m",), ("base", "tempscale-0.5"), (256, 1024))
    fig = figures.plot_metric_vs_length(rows, "acc@1", MethodStyles.of(["base", "tempscale-0.5"]), set(), "t")
    try:
        (ax,) = fig.axes
        assert not [c for c in ax.collections if isinstance(c, LineCollection)]
        for line in ax.get_lines():
            if len(line.get_xdata()) == 2:
                assert list(line.get_xdata()) == [256, 1024]
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------- heatmap


def test_heatmap_cells_show_n_and_mark_empty_cells():
    rows = pd.concat(
        [_curve(("m",), ("base", "tempscale-0.8"), (256, 1024), depth=d) for d in (0.1, 0.5, 0.9)]
    )
    rows["n"] = range(3, 3 + len(rows))
    gone = (rows["method"] == "tempscale-0.8") & (rows["depth"] == 0.5) & (rows["length"] == 1024)
    nan = (rows["method"] == "base") & (rows["depth"] == 0.9) & (rows["length"] == 256)
    rows = rows[~gone].assign(value=lambda f: f["value"].mask(nan[~gone]))
    fig = figures.plot_depth_heatmap(rows, "acc@1", "title")
    try:
        for ax, method, empty in zip(fig.axes[:2], ("base", "tempscale-0.8"), ((2, 0), (1, 1)), strict=True):
            texts = {(round(t.get_position()[1] - 0.5), round(t.get_position()[0] - 0.5)): t.get_text()
                     for t in ax.texts}  # fmt: skip
            expected = {}
            for i, depth in enumerate((0.1, 0.5, 0.9)):
                for j, length in enumerate((256, 1024)):
                    cell = rows[
                        (rows["method"] == method) & (rows["depth"] == depth) & (rows["length"] == length)
                    ]
                    if (i, j) != empty:
                        expected[(i, j)] = f"{cell['value'].iloc[0]:.2f}\nn={cell['n'].iloc[0]}"
            expected[empty] = EMPTY_CELL
            assert {k: v for k, v in texts.items() if v} == expected
            hatched = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch()]
            assert [(round(p.get_y()), round(p.get_x())) for p in hatched] == [empty]
            assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "1k"]
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------------------------- layout


def _box(fig, artist):
    return artist.get_window_extent(fig.canvas.get_renderer())


@pytest.mark.parametrize("models", [("m",), ("a", "b", "c", "d")])
def test_long_y_labels_stay_beside_their_panel_and_below_the_title(models):
    metric = "global_centroid_sq_distance_vs_base_vs_shortest"  # the longest label of the registry's metrics
    rows = _curve(models, ("tempscale-0.5",), (64, 256, 512), metric=metric, task="collapse")
    label = figures.metric_info(metric).label
    title = f"collapse: {label} vs length (sotu)"
    fig = figures.plot_metric_vs_length(
        rows, metric, MethodStyles.of(["base", "tempscale-0.5"]), set(), title
    )
    try:
        fig.canvas.draw()
        top = _box(fig, fig._suptitle)
        assert " ".join(fig.get_suptitle().split()) == title
        for ax in fig.axes:
            assert " ".join(ax.get_ylabel().split()) == label
            ylabel, panel = _box(fig, ax.yaxis.label), _box(fig, ax)
            assert ylabel.height <= panel.height + 1  # no longer than its axis
            assert ylabel.y1 < top.y0 and _box(fig, ax.title).y1 < top.y0
        assert top.x0 >= 0 and top.x1 <= fig.bbox.width + sum(_box(fig, g).width for g in fig.legends)
    finally:
        plt.close(fig)
