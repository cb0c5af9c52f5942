"""Reports from synthetic run directories: files, self-contained HTML, determinism, merging, caveats, CLI."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from llm_collapse.cli.report import main as report_main
from llm_collapse.records.results import result_row
from llm_collapse.reporting import SchemaError, build_report, figures, load_runs
from llm_collapse.reporting.build import report_markdown
from llm_collapse.reporting.figures import MethodStyles
from llm_collapse.reporting.frames import HEADLINE, RESULT_COLUMNS, overall_rows, validate_results
from llm_collapse.reporting.synthetic_runs import synthetic_results, write_synthetic_run
from llm_collapse.reporting.tables import Table, inline_html
from llm_collapse.tasks.registry import TASKS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DATA_URI = "data:image/png;base64,"


class _Images(HTMLParser):
    """Collects every <img> src and all text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs).get("src") or "")
        for name, value in attrs:
            assert not (name in ("src", "href") and value and value.startswith(("http:", "https:", "//")))

    def handle_data(self, data):
        self.text.append(data)


def _parse(path: Path) -> _Images:
    parser = _Images()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser


def _pngs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "figures").glob("*.png"))}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One full synthetic run, reported into its own directory (the CLI default)."""
    run = write_synthetic_run(tmp_path_factory.mktemp("runs") / "run-a")
    files = build_report([run], run)
    return run, files


# ------------------------------------------------------------------------------------------- full report


def test_report_files_exist_and_cover_every_figure_kind(built):
    run, files = built
    assert files["report.md"] == run.absolute() / "report.md" and files["report.md"].is_file()
    assert files["report.html"].is_file()
    figures = sorted(p.name for p in (run / "figures").glob("*.png"))
    assert figures == sorted(k.split("/", 1)[1] for k in files if k.startswith("figures/"))
    assert figures[0] == "collapse-values-synthetic.png" and "overview-synthetic.png" in figures
    assert {
        "knn-values-synthetic.png",
        "passkey-values-synthetic.png",
        "passkey-acc-1-depth-synthetic.png",
    } <= set(
        figures
    )  # a task's metrics in one figure of small multiples; its depth heatmaps (every model) in one
    assert {"layerwise-synth-decoder-synthetic.png", "layerwise-synth-encoder-synthetic.png"} <= set(figures)
    assert "tempsweep-collapse-pairwise-cosine-synthetic.png" in figures
    assert not list(run.glob(".report-tmp-*")), "staging folder left behind"
    md = files["report.md"].read_text(encoding="utf-8")
    for name in figures:
        assert f"(figures/{name})" in md
    headings = ("## Summary", "## Run summary", "## Collapse geometry", "## Passkey retrieval", "## Caveats")
    positions = [md.find(heading) for heading in headings]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)  # the answer opens the report
    assert md.split("\n## ", 2)[1].startswith("Summary")


def test_html_is_self_contained_with_one_png_per_figure(built):
    run, files = built
    page = _parse(files["report.html"])
    n_figures = len(list((run / "figures").glob("*.png")))
    assert len(page.srcs) == n_figures > 0
    for src in page.srcs:
        assert src.startswith(DATA_URI)
        assert base64.b64decode(src[len(DATA_URI) :], validate=True).startswith(PNG_MAGIC)
    embedded = sorted(base64.b64decode(s[len(DATA_URI) :]) for s in page.srcs)
    assert embedded == sorted(_pngs(run).values())
    text = "".join(page.text)
    assert "Caveats" in text and "synth-decoder" in text and "<table>" not in text  # tables are real HTML


def test_summary_and_caveats_content(built):
    _, files = built
    md = files["report.md"].read_text(encoding="utf-8")
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "| model | method | pairwise_cosine @256 | pairwise_cosine @2k | Δ pairwise_cosine |" in summary
    assert "more collapse" in summary and "[" in summary  # direction words and CIs
    caveats = md.split("## Caveats", 1)[1]
    assert "Truncation: synth-encoder / `base`: 8 of 256 texts truncated to max_length 1024." in caveats
    assert "synth-decoder has a 512-token sliding window" in caveats and "1k, 2k" in caveats
    assert "tiny_random" not in md  # nothing flagged
    assert "seed 0" in md and "float32" in md and "synthetic/synth-decoder" in md


def test_a_one_length_run_shows_one_value_per_metric_and_no_change(tmp_path):
    run = write_synthetic_run(
        tmp_path / "one", methods=("base", "tempscale:0.9"), lengths=(2048,), tasks=("knn",)
    )
    md = build_report([run], run)["report.md"].read_text(encoding="utf-8")
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "Value at the run's one length per row" in summary and "Δ" not in summary
    header = next(line for line in summary.splitlines() if line.startswith("| model"))
    assert header == "| model | method | knn_accuracy @2k |"
    rows = [line for line in summary.splitlines() if line.startswith("| synth-")]
    assert rows and all(line.count(" | ") == 2 and "[" in line for line in rows)


def test_rebuild_elsewhere_is_byte_identical(built, tmp_path):
    run, files = built
    copy = build_report([run], tmp_path / "copy")  # a new output folder, created on publish
    assert copy["report.md"].read_bytes() == files["report.md"].read_bytes()
    assert copy["report.html"].read_bytes() == files["report.html"].read_bytes()
    assert _pngs(tmp_path / "copy") == _pngs(run)


def test_report_markdown_plans_the_figures_it_does_not_draw(built, tmp_path):
    """`report_markdown` (figures planned, not drawn) gives the drawn report's report.md, byte for byte, and writes
    nothing: the committed-report checks rely on it."""
    from llm_collapse.reporting.build import report_markdown

    run, files = built
    data, before = load_runs([run]), _snapshot(run)
    assert report_markdown(data, run) == files["report.md"].read_text(encoding="utf-8")
    assert _snapshot(run) == before
    planned = figures.make_figures(data, tmp_path / "planned", draw=False)
    assert sorted(f.path.name for f in planned) == sorted(_pngs(run))
    assert not (tmp_path / "planned").exists()


def test_rebuild_in_place_is_byte_identical_and_drops_stale_figures(tmp_path):
    run = write_synthetic_run(
        tmp_path / "r", models=("m",), methods=("base", "tempscale:0.5"), tasks=("knn", "passkey")
    )
    first = build_report([run], run)
    before = _snapshot(run)
    (run / "figures" / "stale.png").write_bytes(PNG_MAGIC)
    again = build_report([run], run)
    assert again == first
    assert _snapshot(run) == before


# ------------------------------------------------------------------------------ merging and tiny models


def test_merging_two_runs_mentions_both(tmp_path):
    small = {"methods": ("base",), "tasks": ("knn", "passkey")}
    a = write_synthetic_run(tmp_path / "gpu-run", seed=1, hardware={"device": "cuda", "gpu": "H100"}, **small)
    b = write_synthetic_run(
        tmp_path / "cpu-run", seed=2, models=("synth-decoder",), hardware={"device": "cpu"}, **small
    )
    data = load_runs([a, b])
    assert [r.label for r in data.runs] == ["gpu-run", "cpu-run"]
    assert "synth-decoder [cpu-run]" in data.models and "synth-decoder [gpu-run]" in data.models
    assert "synth-encoder" in data.models  # measured once: keeps its name
    out = tmp_path / "merged"
    files = build_report([a, b], out)
    md = files["report.md"].read_text(encoding="utf-8")
    assert md.startswith("# Length-collapse report: gpu-run, cpu-run\n")
    assert "Run **gpu-run**" in md and "Run **cpu-run**" in md
    caveats = md.split("## Caveats", 1)[1]
    assert "Merged 2 runs from several machines" in caveats and "gpu=H100" in caveats
    assert "synth-decoder from cpu-run shown as synth-decoder [cpu-run]" in caveats
    assert len(_parse(files["report.html"]).srcs) == len(_pngs(out))


def test_tiny_random_caveat_and_summary_exclusion(tmp_path):
    small = {"methods": ("base",), "tasks": ("knn",)}
    run = write_synthetic_run(tmp_path / "mixed", tiny_random=["synth-encoder"], **small)
    md = build_report([run], run)["report.md"].read_text(encoding="utf-8")
    assert "**their numbers are code-path checks only and are never findings**" in md
    assert "they are left out of the summary table" in md
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "| synth-decoder |" in summary and "synth-encoder" in summary.split("left out:", 1)[1]
    assert "| synth-encoder" not in summary

    only_tiny = write_synthetic_run(tmp_path / "tiny", tiny_random=True, **small)
    md = build_report([only_tiny], only_tiny)["report.md"].read_text(encoding="utf-8")
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in summary.splitlines() if line.startswith("| synth-")]
    assert len(rows) == 2 and all("**(tiny random)**" in row for row in rows)
    assert "no real model is present, so every summary row is marked" in md


def test_missing_data_skips_figures_cleanly(tmp_path, caplog):
    run = write_synthetic_run(tmp_path / "knn-only", methods=("base", "ntk:1e5+window:off"), tasks=("knn",))
    meta = json.loads((run / "run.json").read_text())
    meta["models"]["synth-encoder"]["not_applicable"] = {"selfextend-g9-w512": "needs a RoPE model"}
    # what the runner writes (each halving) and a bare count (hand-made records); before, a list was dropped
    meta["models"]["synth-encoder"]["oom_retries"] = {"base": 2, "tempscale-0.8": ["OOM: 8", "OOM: 4"]}
    meta["models"]["synth-decoder"]["describe"] = "not a dict"  # bad metadata must not crash the report
    (run / "run.json").write_text(json.dumps(meta))
    with caplog.at_level("INFO", logger="llm_collapse.reporting"):
        files = build_report([run], run)
    assert sorted(k for k in files if k.startswith("figures/")) == [
        "figures/knn-values-synthetic.png",
        "figures/overview-synthetic.png",
    ]
    assert "skipping the temperature sweep" in caplog.text
    md = files["report.md"].read_text(encoding="utf-8")
    assert "`ntk:1e5+window:off`" in md and "ntk-theta1e5" not in md  # as --methods wrote it, never its slug
    assert "Not measured: synth-encoder / `selfextend-g9-w512`: needs a RoPE model" in md
    assert "Out-of-memory retries: synth-encoder / `base`: 2 (smaller batches)." in md
    assert "Out-of-memory retries: synth-encoder / `tempscale-0.8`: 2 (smaller batches; last: OOM: 4)." in md


def test_needle_from_depth_rows_without_run_json(tmp_path):
    run = write_synthetic_run(tmp_path / "needle", models=("m",), methods=("base",), tasks=("passkey",))
    frame = pd.read_parquet(run / "results.parquet").assign(task="needle")
    frame[frame["depth"].notna()].to_parquet(run / "results.parquet", index=False)  # per-depth rows only
    (run / "run.json").unlink()
    files = build_report([run], run)
    assert sorted(k for k in files if k.startswith("figures/")) == [
        "figures/needle-acc-1-depth-synthetic.png",
        "figures/needle-values-synthetic.png",
        "figures/overview-synthetic.png",
    ]
    md = files["report.md"].read_text(encoding="utf-8")
    assert "## Needle retrieval" in md and "Run needle has no run.json" in md
    assert "| m | `base` | " in md.split("## Summary", 1)[1]


def test_depth_heatmap_is_followed_by_its_paired_rows_read_after_holm_across_the_table(tmp_path):
    run = write_synthetic_run(
        tmp_path / "r",
        models=("m",),
        methods=("base", "tempscale:0.9"),
        tasks=("passkey",),
        lengths=(256, 512),
    )
    frame = pd.read_parquet(run / "results.parquet")
    p_values = {(256, 0.1): 0.001, (512, 0.1): 0.03, (256, 0.9): 0.3}  # 3 cells: Holm x3, x2, x1
    paired = [
        result_row(model="m", method="tempscale-0.9", task="passkey", corpus="synthetic", length=n,
                   metric="acc@1_vs_base", value=0.25, ci=(0.1, 0.4), n=20, depth=d, p_value=p)
        for (n, d), p in p_values.items()
    ]  # fmt: skip
    pd.concat([frame, pd.DataFrame(paired)]).to_parquet(run / "results.parquet", index=False)
    md = report_markdown(load_runs([run]), run)
    table = md.split("Acc@1 − base (paired) of m by key depth and length (tokens), 95% CIs:", 1)[1]
    lines = table.split("\n\n", 2)[1].splitlines()
    assert lines[0] == "| method | depth | 256 | 512 |"
    assert lines[2:] == [  # 0.03 alone would read "better"; Holm across the 3 cells makes it 0.06
        "| `tempscale:0.9` | 0.10 | 0.250 [0.100, 0.400]: (better; McNemar, Holm p=0.003) "
        "| 0.250 [0.100, 0.400]: (inconclusive; McNemar, Holm p=0.060) |",
        "| `tempscale:0.9` | 0.90 | 0.250 [0.100, 0.400]: (inconclusive; McNemar, Holm p=0.300) | — |",
    ]


# ------------------------------------------------------------------------------------------- figures


def _curve(models, methods, lengths, metric="acc@1", task="passkey", **extra):
    return pd.DataFrame(
        [
            result_row(model=m, method=method, task=task, corpus="c", length=n, metric=metric,
                       value=0.1 * i + 0.2, ci=(0.1 * i + 0.1, 0.1 * i + 0.3), n=10, **extra)
            for m in models for method in methods for i, n in enumerate(lengths)
        ]
    )  # fmt: skip


def test_length_figure_facets_keep_styles_bands_axes_and_one_legend():
    rows = _curve("abcd", ("tempscale-0.8", "base"), (256, 1024, 2048))
    rows = rows[~((rows["model"] == "c") & (rows["method"] != "base"))]  # panel c: base only
    styles = MethodStyles.of(["base", "tempscale-0.8", "ntk"])
    fig = figures.plot_metric_vs_length(rows, "acc@1", styles, {"d"}, "title")
    try:
        axes = fig.axes
        assert [ax.get_title() for ax in axes] == ["a", "b", "c", "d (tiny random)"]
        assert len({round(ax.get_position().y0, 3) for ax in axes[:3]}) == 1  # wrapped after MAX_COLUMNS
        assert axes[3].get_position().y0 < axes[0].get_position().y0
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ["base", "tempscale-0.8"]  # MethodStyles order
        for ax in axes:
            assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == [
                "256",
                "1k",
                "2k",
            ]
            assert ax.get_ylim() == (-0.02, 1.02) and ax.get_ylabel() and ax.get_xlabel() == "length (tokens)"
        methods = {"a": ["base", "tempscale-0.8"], "c": ["base"]}
        for ax, panel in zip(axes, "abc", strict=False):
            shown = methods.get(panel, methods["a"])
            drawn = {(mcolors.to_hex(line.get_color()), line.get_marker()) for line in ax.get_lines()}
            assert drawn == {(styles.color(m), styles.marker(m)) for m in shown}
            bands = ax.collections  # the rows' own CIs only: seaborn bootstraps nothing
            assert len(bands) == len(shown)
            for band in bands:
                ys = band.get_paths()[0].vertices[:, 1]
                assert ys.min() == pytest.approx(0.1) and ys.max() == pytest.approx(0.5)
    finally:
        plt.close(fig)
    contrast = _curve("ab", ("tempscale-0.8",), (256, 512), metric="acc@1_vs_base").assign(value=-3.0)
    fig = figures.plot_metric_vs_length(contrast, "acc@1_vs_base", styles, set(), "title")
    try:
        for ax in fig.axes:  # free axis with a zero line
            assert any(list(line.get_ydata()) == [0.0, 0.0] for line in ax.get_lines())
            assert ax.get_ylim()[0] < -3.0
    finally:
        plt.close(fig)


def test_position_layerwise_and_sweep_facets():
    styles = MethodStyles.of(["base", "tempscale-0.8"])
    rows = pd.concat(
        [_curve("ab", ("base", "tempscale-0.8"), (256, 1024), task="position", depth=d) for d in (0.0, 1.0)]
    )
    fig = figures.plot_position_vs_length(rows, "acc@1", styles, set(), "title")
    try:
        assert [t.get_text() for t in fig.legends[0].get_texts()] == [
            "base",
            "tempscale-0.8",
            "early",
            "late",
        ]
        lines = [line for line in fig.axes[0].get_lines() if len(line.get_xdata())]
        assert len(lines) == 4 == len(fig.axes[0].collections)
        by_style = {
            (mcolors.to_hex(line.get_color()), line.get_marker(), line.get_linestyle()) for line in lines
        }
        assert by_style == {
            (styles.color(m), styles.marker(m), ls) for m in styles.methods for ls in ("-", "--")
        }
    finally:
        plt.close(fig)
    layers = pd.concat(
        [_curve("m", ("base",), (256, 1024), task="layerwise", metric=k, layer=layer) for k in ("hf_ratio", "x") for layer in (0, 1, 2)]
    )  # fmt: skip
    fig = figures.plot_layerwise(layers, "title")
    try:
        assert [ax.get_title() for ax in fig.axes] == ["hf_ratio", "x"]
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["256", "1k"]
        assert all(len(ax.get_lines()) == 2 == len(ax.collections) for ax in fig.axes)
    finally:
        plt.close(fig)
    sweep = _curve("ab", ("tempscale-0.5", "base"), (256, 512)).assign(
        tau=lambda f: f["method"].map({"tempscale-0.5": 0.5, "base": 1.0})
    )
    fig = figures.plot_temperature_sweep(sweep, "acc@1", {"b"}, "title")
    try:
        assert [ax.get_title() for ax in fig.axes] == ["a", "b (tiny random)"]
        for ax in fig.axes:
            assert list(ax.get_xticks()) == [0.5, 1.0] and ax.get_ylim() == (-0.02, 1.02)
            assert any(list(line.get_xdata()) == [1.0, 1.0] for line in ax.get_lines())  # the tau = 1 line
    finally:
        plt.close(fig)


def test_depth_heatmap_facets_one_panel_per_method_and_one_colour_bar():
    rows = pd.concat([_curve("m", ("tempscale-0.8", "base"), (256, 1024), depth=d) for d in (0.1, 0.5, 0.9)])
    fig = figures.plot_depth_heatmap(rows, "acc@1", "title")
    try:
        panels, (bar,) = fig.axes[:2], fig.axes[2:]  # one colour bar, after the last panel of a row
        assert [ax.get_title() for ax in panels] == ["m / base", "m / tempscale-0.8"]
        assert bar.get_ylabel() == "Acc@1" and bar.get_ylim() == (0.0, 1.0)
        for ax in panels:
            assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "1k"]
            assert [t.get_text() for t in ax.get_yticklabels()] == ["0.10", "0.50", "0.90"]
    finally:
        plt.close(fig)


def test_declared_figure_kinds_drive_which_figures_a_task_gets(tmp_path, monkeypatch, caplog):
    """`make_figures` draws, per task and in its order, the kinds the registry declares (`TaskSpec.figures`)."""
    run = write_synthetic_run(tmp_path / "run", models=("m",), methods=("base",), tasks=("knn", "passkey"))
    data = load_runs([run])
    default = [(f.task, f.kind) for f in figures.make_figures(data, tmp_path / "default")]
    assert default == [("", "overview"), ("knn", "length"), ("passkey", "length"), ("passkey", "depth")]
    monkeypatch.setitem(TASKS, "passkey", replace(TASKS["passkey"], figures=("depth", "layerwise")))
    monkeypatch.setitem(TASKS, "knn", replace(TASKS["knn"], figures=("position", "length")))
    with caplog.at_level("INFO", logger="llm_collapse.reporting"):
        declared = figures.make_figures(data, tmp_path / "declared")
    assert [(f.task, f.kind) for f in declared] == [("", "overview"), ("knn", "length"), ("passkey", "depth")]
    assert "knn: no per-position rows; skipping position figures" in caplog.text
    assert "passkey: no base-method layer rows; skipping layerwise figures" in caplog.text


def test_registry_declares_known_figure_kinds_and_headline_metrics():
    assert {kind for spec in TASKS.values() for kind in spec.figures} <= set(figures.FIGURE_KINDS)
    assert HEADLINE == [(name, metric) for name, spec in TASKS.items() for metric in spec.headline]
    assert tuple(HEADLINE[:3]) == (
        ("collapse", "pairwise_cosine"),
        ("collapse", "global_centroid_distance"),
        ("collapse", "centroid_distance"),
    )
    assert all(spec.headline for name, spec in TASKS.items() if name != "layerwise")
    with pytest.raises(ValueError, match="headline metrics"):
        replace(TASKS["knn"], headline=("acc@1",))


# ------------------------------------------------------------------------------------- schema and CLI


def test_validate_names_missing_columns_and_rejects_duplicates():
    frame = synthetic_results(methods=("base",), tasks=("knn",))
    with pytest.raises(SchemaError, match="missing columns ci_low, n"):
        validate_results(frame.drop(columns=["ci_low", "n"]), "x")
    with pytest.raises(SchemaError, match="share a key"):
        validate_results(pd.concat([frame, frame.iloc[:1]]), "x")
    with pytest.raises(SchemaError, match="length must hold whole numbers"):
        validate_results(frame.assign(length=frame["length"] + 0.5), "x")
    assert list(validate_results(frame.assign(extra=1), "x").columns) == list(RESULT_COLUMNS)


def test_overall_rows_average_depths_when_no_overall_row():
    frame = synthetic_results(models=("m",), methods=("base",), tasks=("passkey",))
    depth_only = frame[frame["depth"].notna()]
    flat = overall_rows(depth_only)
    assert len(flat) == frame["length"].nunique() and flat["depth"].isna().all()
    first = depth_only[depth_only["length"] == flat["length"].iloc[0]]
    assert math.isclose(flat["value"].iloc[0], first["value"].mean())  # equal n per depth


def test_table_renders_same_cells_to_markdown_and_html():
    table = Table(("a", "b|c"), (("**x** <y>", "`1`"),), (False, True))
    assert table.to_markdown().splitlines()[1] == "| --- | ---: |"
    assert "b\\|c" in table.to_markdown()
    assert inline_html("**x** <y>") == "<strong>x</strong> &lt;y&gt;"
    assert '<td class="num"><code>1</code></td>' in table.to_html()


def test_cli_missing_dir_exits_2_with_one_line(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert report_main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such run directory" in err
    assert not missing.exists()


def test_cli_missing_results_exits_2(tmp_path, capsys):
    assert report_main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path}: no results.parquet\n"
    assert list(tmp_path.iterdir()) == []


def test_cli_missing_columns_exits_2_and_writes_nothing(tmp_path, capsys):
    run = write_synthetic_run(tmp_path / "bad", methods=("base",), tasks=("knn",))
    frame = pd.read_parquet(run / "results.parquet").drop(columns=["ci_high", "metric"])
    frame.to_parquet(run / "results.parquet", index=False)
    before = _snapshot(tmp_path)
    assert report_main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing columns metric, ci_high" in err
    assert _snapshot(tmp_path) == before


def test_cli_requires_out_when_merging_and_succeeds_with_it(tmp_path, capsys):
    small = {"methods": ("base",), "tasks": ("knn",)}
    a = write_synthetic_run(tmp_path / "a", **small)
    b = write_synthetic_run(tmp_path / "b", models=("other",), **small)
    assert report_main([str(a), str(b)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert report_main([str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    assert "report.html" in capsys.readouterr().out
    assert (tmp_path / "out" / "report.html").is_file() and not (a / "report.md").exists()


def test_failure_while_rendering_leaves_nothing(tmp_path, monkeypatch):
    from llm_collapse.reporting import build

    run = write_synthetic_run(tmp_path / "r", methods=("base",), tasks=("knn",))
    build_report([run], run)
    before = _snapshot(tmp_path)

    def boom(*args, **kwargs):
        raise RuntimeError("render failed")

    monkeypatch.setattr(build, "render_html", boom)
    with pytest.raises(RuntimeError):
        build_report([run], run)
    with pytest.raises(RuntimeError):
        build_report([run], tmp_path / "new" / "out")
    assert _snapshot(tmp_path) == before
    assert not (tmp_path / "new").exists()
