"""Paired contrasts against ``base``: the paired statistics, the runner's ``*_vs_base`` rows, the report."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from llm_collapse.metrics.collapse import centroid_distance, mean_pairwise_cosine, normalize_rows
from llm_collapse.metrics.probes import knn_label_accuracy
from llm_collapse.metrics.stats import (
    jackknife_ci,
    mcnemar_exact_p,
    paired_jackknife_ci,
)
from llm_collapse.records.results import CellKey
from llm_collapse.tasks.base import EMBEDDINGS, PairedItems, contrast_rows, paired_key
from llm_collapse.tasks.knn import knn_correct


def _width(ci: tuple[float, float, float]) -> float:
    return ci[2] - ci[1]


def _correlated(rng, n=40, d=16, noise=0.05):
    base = rng.normal(size=(n, d)) + 0.5  # some common direction: positive mean cosine
    method = base + noise * rng.normal(size=(n, d))
    return method, base


def test_paired_known_answers():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 8))
    assert paired_jackknife_ci(X, X, centroid_distance) == (0.0, 0.0, 0.0)


def test_paired_points_equal_differences_of_the_unpaired_points():
    X, Y = _correlated(np.random.default_rng(5))
    assert paired_jackknife_ci(X, Y, centroid_distance)[0] == pytest.approx(
        jackknife_ci(X, centroid_distance)[0] - jackknife_ci(Y, centroid_distance)[0], abs=1e-14
    )


def test_paired_intervals_are_narrower_than_unpaired_on_correlated_data():
    rng = np.random.default_rng(6)
    X, Y = _correlated(rng)
    paired = _width(paired_jackknife_ci(X, Y, centroid_distance))
    assert (
        paired
        < min(_width(jackknife_ci(X, centroid_distance)), _width(jackknife_ci(Y, centroid_distance))) / 3
    )


def test_paired_inputs_must_have_the_same_items():
    with pytest.raises(ValueError, match="same items"):
        paired_jackknife_ci(np.ones((4, 3)), np.ones((5, 3)), centroid_distance)


def test_knn_correct_mirrors_the_probe():
    rng = np.random.default_rng(7)
    for n in (12, 40):
        X = rng.normal(size=(n, 6))
        labels = rng.choice(["a", "b", "c"], size=n)
        assert knn_correct(X, labels, k=5).mean() == pytest.approx(knn_label_accuracy(X, labels, k=5))


def test_contrast_rows_skip_missing_and_mismatched_bins():
    rng = np.random.default_rng(8)
    X, Y = _correlated(rng, n=10)
    mine = {
        paired_key("collapse", 32): PairedItems(EMBEDDINGS, X),
        paired_key("passkey", 32, 0.3): PairedItems("acc@1", np.array([1, 0, 1])),
        paired_key("knn", 32): PairedItems("knn_accuracy", np.array([1, 1, 0, 1])),
    }
    base = {
        paired_key("collapse", 32): PairedItems(EMBEDDINGS, Y),
        paired_key("passkey", 32, 0.3): PairedItems("acc@1", np.array([0, 0, 1])),
        paired_key("knn", 32): PairedItems("knn_accuracy", np.array([1, 1, 0])),  # other items: skipped
    }
    rows = {r["metric"]: r for r in contrast_rows(CellKey("m", "tempscale-0.5", "sotu"), mine, base)}
    assert set(rows) == {"pairwise_cosine_vs_base", "centroid_distance_vs_base", "acc@1_vs_base"}
    assert rows["acc@1_vs_base"]["value"] == pytest.approx(1 / 3)
    assert rows["acc@1_vs_base"]["depth"] == 0.3 and rows["acc@1_vs_base"]["n"] == 3
    assert math.isnan(rows["pairwise_cosine_vs_base"]["depth"])
    assert rows["acc@1_vs_base"]["p_value"] == 1.0  # one discordant pair: the exact McNemar p is 1

    # the geometry contrasts carry the jackknife's t-test (n - 1 df), written out here from the delete-one values
    def cosine(U):
        U = U / np.linalg.norm(U, axis=1, keepdims=True)
        G = U @ U.T
        return (G.sum() - np.trace(G)) / (len(U) * (len(U) - 1))

    loo = np.array([cosine(np.delete(X, i, 0)) - cosine(np.delete(Y, i, 0)) for i in range(10)])
    se = np.sqrt(9 / 10 * np.sum((loo - loo.mean()) ** 2))
    t = (cosine(X) - cosine(Y)) / se
    assert rows["pairwise_cosine_vs_base"]["p_value"] == pytest.approx(
        2 * scipy.stats.t.sf(abs(t), 9), rel=1e-9
    )
    half = scipy.stats.t.ppf(0.975, 9) * se
    assert rows["pairwise_cosine_vs_base"]["ci_high"] - rows["pairwise_cosine_vs_base"][
        "ci_low"
    ] == pytest.approx(2 * half)
    assert contrast_rows(CellKey("m", "x", "sotu"), mine, {}) == []


# ------------------------------------------------------------------------------------ end to end


RUN = dict(
    tiny="mistral",
    tasks="collapse,knn,passkey,position",
    lengths=[80, 128],
    max_per_bin=8,
    retrieval_docs=6,
    retrieval_queries=4,
    batch_size=4,
    dtype="fp32",
)


KEYS = ["model", "task", "length", "depth"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_compare_writes_contrasts_consistent_with_per_method_rows(run_compare, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, **RUN, methods="tempscale:0.5,base") == 0  # base last: order does not matter
    frame = pd.read_parquet(out / "results.parquet")
    contrasts = frame[frame.metric.str.endswith("_vs_base")]
    assert set(contrasts.method) == {"tempscale-0.5"}  # none for base
    expected = {
        ("collapse", "pairwise_cosine_vs_base"),
        ("collapse", "centroid_distance_vs_base"),
        ("collapse", "global_centroid_distance_vs_base"),
        ("collapse", "global_centroid_sq_distance_vs_base"),
        ("collapse", "within_length_sq_spread_vs_base"),
        ("collapse", "length_centroid_offset_sq_vs_base"),
        ("passkey", "acc@1_vs_base"),
        ("position", "acc@1_vs_base"),
    }
    knn = frame[frame.metric == "knn_accuracy"]
    if knn.value.notna().all():
        expected.add(("knn", "knn_accuracy_vs_base"))
    if frame[frame.metric == "knn_cross_accuracy"].value.notna().all():
        expected.add(("knn", "knn_cross_accuracy_vs_base"))
    if (frame.metric == "knn_longer_neighbour_share").any():
        expected.add(("knn", "knn_longer_neighbour_share_vs_base"))
    assert set(map(tuple, contrasts[["task", "metric"]].drop_duplicates().to_numpy().tolist())) == expected
    for (task, metric), group in contrasts.groupby(["task", "metric"]):
        plain = metric.removesuffix("_vs_base")
        per_method = frame[(frame.task == task) & (frame.metric == plain)]
        wide = per_method.pivot_table(index=KEYS, columns="method", values="value", dropna=False)
        merged = group.merge(wide.reset_index(), on=KEYS, how="left", validate="one_to_one")
        assert len(merged) == len(group) and merged["base"].notna().all()
        np.testing.assert_allclose(
            merged["value"], merged["tempscale-0.5"] - merged["base"], rtol=0, atol=1e-12
        )
        finite = merged.dropna(subset=["ci_low", "ci_high"])
        assert (finite.ci_low <= finite.value + 1e-12).all() and (
            finite.value <= finite.ci_high + 1e-12
        ).all()
    # collapse: one contrast per length bin; passkey: overall + depth bins; position: early, late, overall
    assert len(contrasts[contrasts.metric == "pairwise_cosine_vs_base"]) == 2
    assert contrasts[(contrasts.task == "position")].depth.isna().sum() == 2
    report = (out / "report.md").read_text()
    summary = report.split("## Summary", 1)[1].split("\n## ", 1)[0]
    table = summary.split("\n### ", 1)[0]  # the summary table (the interaction table follows it, about base)
    assert "vs_base" not in table and "− base" not in table
    assert "pairwise cosine − base (paired)" in report
    assert list((out / "figures").glob("collapse-vs-base-*.png"))  # the contrasts' figure of small multiples


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_compare_without_base_writes_no_contrasts(run_compare, tmp_path):
    out = tmp_path / "run"
    flags = RUN | dict(methods="tempscale:0.5,tempscale:0.8", no_report=True, tasks="collapse,passkey")
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert not frame.metric.str.endswith("_vs_base").any()
    assert {"pairwise_cosine", "acc@1"} <= set(frame.metric)


def test_length_contrasts_pair_each_length_with_the_shortest():
    """Independent computation: the difference of the per-length statistics on the same items."""
    from llm_collapse.tasks.base import length_contrast_rows

    rng = np.random.default_rng(3)
    X = {n: normalize_rows(rng.normal(size=(12, 8)) + 0.1 * n) for n in (16, 32, 64)}
    hits = {n: (rng.random(12) < 0.3 + n / 100).astype(int) for n in (16, 32, 64)}
    items = {paired_key("collapse", n): PairedItems(EMBEDDINGS, X[n]) for n in X}
    items |= {paired_key("passkey", n, 0.5): PairedItems("acc@1", hits[n]) for n in hits}
    items[paired_key("other", 16)] = PairedItems("acc@1", hits[16])  # a task not nested: no rows
    rows = pd.DataFrame(length_contrast_rows(CellKey("m", "base", "c"), items, {"collapse", "passkey"}))
    assert set(rows.metric) == {
        "pairwise_cosine_vs_shortest",
        "centroid_distance_vs_shortest",
        "acc@1_vs_shortest",
    }
    assert sorted(rows.length.unique()) == [32, 64]
    for n in (32, 64):
        cos = rows[(rows.metric == "pairwise_cosine_vs_shortest") & (rows.length == n)].iloc[0]
        assert cos.value == pytest.approx(mean_pairwise_cosine(X[n]) - mean_pairwise_cosine(X[16]))
        dist = rows[(rows.metric == "centroid_distance_vs_shortest") & (rows.length == n)].iloc[0]
        assert dist.value == pytest.approx(centroid_distance(X[n]) - centroid_distance(X[16]))
        acc = rows[(rows.metric == "acc@1_vs_shortest") & (rows.length == n)].iloc[0]
        assert acc.value == pytest.approx(hits[n].mean() - hits[16].mean())
        assert acc.depth == 0.5 and acc.p_value == pytest.approx(mcnemar_exact_p(hits[n], hits[16]))


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_prefix_design_run_writes_paired_length_contrasts(run_compare, tmp_path):
    out = tmp_path / "run"
    flags = dict(
        tiny="gemma3-270m", methods="base,tempscale:0.8", tasks="collapse", lengths=[32, 64, 128],
        dtype="fp32", no_report=True, design="prefix", prefix_docs=6, batch_size=8,
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    vs = frame[frame.metric == "pairwise_cosine_vs_shortest"]
    assert sorted(map(tuple, vs[["method", "length"]].to_numpy().tolist())) == [
        ("base", 64), ("base", 128), ("tempscale-0.8", 64), ("tempscale-0.8", 128)
    ]  # fmt: skip
    plain = frame[frame.metric == "pairwise_cosine"].set_index(["method", "length"]).value
    for _, row in vs.iterrows():
        expected = plain[(row.method, row.length)] - plain[(row.method, 32)]
        assert row.value == pytest.approx(expected, abs=1e-9)
        assert row.ci_low <= row.value <= row.ci_high and row.n == 6


def test_only_designs_with_the_same_items_get_length_contrasts():
    from llm_collapse.tasks.registry import length_paired_tasks

    assert "collapse" not in length_paired_tasks("bins")
    assert {"collapse", "knn"} <= length_paired_tasks("prefix")


def test_global_centroid_distance_contrast_is_the_mean_of_per_item_differences():
    """Independent computation: per-item distances to each side's own global centroid, their mean
    difference and scipy's paired t-test."""
    from scipy.stats import ttest_rel

    from llm_collapse.tasks.base import length_contrast_rows

    rng = np.random.default_rng(7)
    X = {n: normalize_rows(rng.normal(size=(10, 6)) + 0.2 * n) for n in (8, 16)}
    c = normalize_rows(np.concatenate(list(X.values()))).mean(0)
    items = {paired_key("collapse", n): PairedItems(EMBEDDINGS, X[n], reference=c) for n in X}
    rows = pd.DataFrame(length_contrast_rows(CellKey("m", "base", "c"), items, {"collapse"}))
    row = rows[rows.metric == "global_centroid_distance_vs_shortest"].iloc[0]
    d16 = [np.linalg.norm(x - c) for x in normalize_rows(X[16])]
    d8 = [np.linalg.norm(x - c) for x in normalize_rows(X[8])]
    assert row.value == pytest.approx(np.mean(d16) - np.mean(d8))
    assert row.p_value == pytest.approx(ttest_rel(d16, d8).pvalue)
    assert row.ci_low <= row.value <= row.ci_high


def test_contrast_rows_of_0_1_outcomes_carry_newcombes_interval_and_the_exact_mcnemar_p():
    from scipy.stats import binomtest

    from llm_collapse.metrics.proportions import newcombe_paired_interval

    # 20 pairs, 4 discordant all one way: the exact McNemar p is 0.125 and Newcombe's interval [0.0001, 0.371]
    mine = np.array([1] * 11 + [0] * 9, dtype=float)
    theirs = np.array([1] * 7 + [0] * 13, dtype=float)
    key = paired_key("passkey", 512)
    (row,) = contrast_rows(
        CellKey("m", "t", "c"), {key: PairedItems("acc@1", mine)}, {key: PairedItems("acc@1", theirs)}
    )
    assert (row["value"], row["ci_low"], row["ci_high"]) == newcombe_paired_interval(mine, theirs)
    assert row["ci_low"] == pytest.approx(0.0001, abs=5e-5) and row["ci_high"] == pytest.approx(
        0.371, abs=5e-4
    )
    assert row["p_value"] == pytest.approx(binomtest(4, 4).pvalue)
