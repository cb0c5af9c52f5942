"""The tests behind the reports' readings: each against scipy or a hand computation, and Holm across a table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from llm_collapse.metrics.contrasts import interval_tost_p as equivalence_p
from llm_collapse.reporting.significance import (
    kinds_used,
    mark_survivors,
    paired_test,
    read_changes,
    table_legend,
    unpaired_test,
)
from llm_collapse.reporting.study import metric_table
from llm_collapse.reporting.tables import judge


def _row(value, low=math.nan, high=math.nan, n=20, p=math.nan, **extra) -> pd.Series:
    return pd.Series(dict(value=value, ci_low=low, ci_high=high, n=n, p_value=p, **extra))


def test_paired_row_uses_its_stored_p_else_wald_from_its_interval():
    assert paired_test(_row(0.1, -0.2, 0.4, p=0.03, metric="acc@1_vs_base")).p == 0.03
    assert paired_test(_row(0.1, -0.2, 0.4, p=0.03, metric="acc@1_vs_base")).test == "McNemar"
    # a stored p of a continuous metric came from a paired t-test (global-centroid distance, layerwise)
    for metric in ("global_centroid_distance_vs_base", "attention_entropy_normalized_vs_shortest"):
        assert paired_test(_row(0.1, -0.2, 0.4, p=0.03, metric=metric)).test == "paired t"
    se = 0.1 / (2 * 1.959964)  # interval width / (2 z)
    wald = paired_test(_row(0.15, 0.1, 0.2))
    assert wald.test == "paired Wald"
    assert wald.p == pytest.approx(2 * (1 - sps.norm.cdf(0.15 / se)), rel=1e-5)
    assert paired_test(_row(0.1)) is None  # no interval, no p: untested


def test_set_level_rows_are_read_with_t_on_n_minus_1_df():
    """A set-level row (the pairwise cosine, the spread, SOCM's pair means) is the jackknife's: stored with its
    t-test p it is named so; stored before 2026-12-08 with a normal interval and no p, its standard error comes
    from that interval and is read with t(n - 1), interval and test."""
    se = 0.1 / (2 * sps.norm.ppf(0.975))
    old = paired_test(_row(0.15, 0.1, 0.2, n=20, metric="within_length_sq_spread_vs_shortest"))
    assert old.test == "jackknife t" and old.df == 19 and old.se == pytest.approx(se)
    assert old.p == pytest.approx(2 * sps.t.sf(0.15 / se, 19), rel=1e-9)
    assert old.high - old.low == pytest.approx(2 * sps.t.ppf(0.975, 19) * se)
    new = paired_test(_row(0.15, 0.1, 0.2, n=20, p=0.01, metric="socm_vs_base_vs_shortest"))
    assert new.test == "jackknife t" and new.df == 19
    assert new.se == pytest.approx(0.15 / sps.t.isf(0.005, 19))


def test_unpaired_proportions_use_fisher_on_the_counts_and_others_wald():
    a, b = _row(0.25, n=20), _row(0.75, n=20)  # 5/20 vs 15/20
    test = unpaired_test("acc@1", a, b)
    assert test.test == "Fisher"
    assert test.p == pytest.approx(sps.fisher_exact([[5, 15], [15, 5]]).pvalue)
    x, y = _row(0.5, 0.4, 0.6), _row(0.8, 0.7, 0.9)
    wald = unpaired_test("pairwise_cosine", x, y)
    se = math.hypot(0.1 / 1.959964, 0.1 / 1.959964)
    assert wald.test == "Wald" and wald.p == pytest.approx(2 * sps.norm.sf(0.3 / se), rel=1e-5)
    assert unpaired_test("effective_rank", _row(3.0), _row(2.0)) is None


def test_read_changes_applies_holm_across_the_table():
    tests = [paired_test(_row(0.2, p=p, metric="acc@1_vs_base")) for p in (0.01, 0.02, 0.04)]
    cells = read_changes([("acc@1", 0.2, t, 3) for t in tests] + [("acc@1", 0.1, None, 3)], judge)
    # Holm: 0.01*3 = 0.03, max(0.02*2, 0.03) = 0.04, max(0.04*1, 0.04) = 0.04: all survive.
    assert cells[:3] == [
        "+0.200 (better; McNemar, Holm p=0.030)",
        "+0.200 (better; McNemar, Holm p=0.040)",
        "+0.200 (better; McNemar, Holm p=0.040)",
    ]
    assert cells[3] == "+0.100 (untested)"
    lone = read_changes(
        [("acc@1", -0.2, paired_test(_row(-0.2, p=0.03, metric="acc@1_vs_base")), 3)] * 2, judge
    )
    # acc@1 has a margin (0.1) but these rows no interval: no equivalence test, so "inconclusive"
    assert lone == ["-0.200 (inconclusive; McNemar, Holm p=0.060)"] * 2  # 0.03 x 2 tests
    assert kinds_used(cells) == {"McNemar"}
    assert read_changes([("hf_ratio_no_direction", 0.5, paired_test(_row(0.5, p=0.001)), 3)], judge) == [
        "+0.500 (higher; paired t, Holm p=0.001)"
    ]


def test_equivalence_p_equals_statsmodels_ztost_from_the_data():
    from statsmodels.stats.weightstats import ztost

    rng = np.random.default_rng(0)
    for shift in (0.0, 0.004, -0.008, 0.02):
        d = rng.normal(shift, 0.02, size=40)
        se = d.std(ddof=1) / math.sqrt(len(d))
        z = sps.norm.ppf(0.975)
        mine = equivalence_p(d.mean(), d.mean() - z * se, d.mean() + z * se, 0.01)
        assert mine == pytest.approx(ztost(d, -0.01, 0.01)[0], rel=1e-9)


def test_equivalence_p_keeps_an_asymmetric_interval_per_side():
    # delta 0.02 with [0.0, 0.06]: the lower side's se is 0.02/1.96, the upper side's 0.04/1.96
    z = sps.norm.ppf(0.975)
    p = equivalence_p(0.02, 0.0, 0.06, 0.1)
    assert p == pytest.approx(max(sps.norm.sf(0.12 / (0.02 / z)), sps.norm.sf(0.08 / (0.04 / z))))
    assert equivalence_p(0.0, 0.0, 0.0, 0.1) == 0.0  # no spread, inside the margin
    assert equivalence_p(0.2, 0.2, 0.2, 0.1) == 1.0
    assert math.isnan(equivalence_p(0.0, math.nan, math.nan, 0.1))


def test_read_changes_gives_equivalent_or_inconclusive_where_a_margin_is_declared():
    tight = paired_test(_row(0.002, -0.003, 0.007, metric="pairwise_cosine_vs_base"))  # Wald p = 0.43
    wide = paired_test(_row(0.002, -0.03, 0.034, metric="pairwise_cosine_vs_base"))
    cells = read_changes([("pairwise_cosine", 0.002, t, 3) for t in (tight, wide)], judge)
    # a set-level row stored without a p (its jackknife's normal interval) is read with t(19): the TOST p of the
    # tight one is max(t19.sf(0.012/0.00255), t19.sf(0.008/0.00255)) = 0.0027 -> Holm x2 (two equivalence tests)
    assert cells[0] == "+0.002 (equivalent within ±0.01; TOST, Holm p=0.005)"
    assert cells[1].startswith("+0.002 (inconclusive; jackknife t, Holm p=")
    # a larger margin from the config makes the wide one equivalent too; a metric without a margin stays n.s.
    wider = read_changes([("pairwise_cosine", 0.002, wide, 3)], judge, {"pairwise_cosine": 0.1})
    assert wider[0].startswith("+0.002 (equivalent within ±0.1; TOST")
    plain = read_changes([("effective_rank", 0.002, wide, 3)], judge)
    assert plain[0].startswith("+0.002 (n.s.; jackknife t")
    legend = table_legend([cells])
    assert "'equivalent within ±m'" in legend and "TOST:" in legend
    assert "otherwise n.s." in table_legend([plain])


def test_mark_survivors():
    rows = [_row(0.1, p=0.001), _row(0.1, p=0.02), _row(0.1, 0.05, 0.15), _row(0.0, -0.1, 0.1)]
    # p: 0.001, 0.02, Wald(z = 0.1 / (0.05 / 1.96) = 3.92) = 8.9e-5, 1.0 -> Holm x4, x3, x2, x1
    assert mark_survivors(rows) == [True, True, True, False]


def test_study_table_reads_the_paired_row_when_the_run_has_one():
    lengths = (64, 512)
    rows = pd.DataFrame(
        [
            dict(model="m", method=meth, length=n, value=v, ci_low=v - 0.05, ci_high=v + 0.05, n=30,
                 depth=np.nan, layer=np.nan, p_value=np.nan, metric="pairwise_cosine")
            for meth, values in (("base", (0.2, 0.3)), ("tempscale-0.7", (0.2, 0.25)))
            for n, v in zip(lengths, values, strict=True)
        ]
    )  # fmt: skip
    paired = pd.DataFrame(
        [
            dict(model="m", method="base", length=512, value=0.1, ci_low=0.09, ci_high=0.11, n=30,
                 depth=np.nan, layer=np.nan, p_value=np.nan, metric="pairwise_cosine_vs_shortest"),
        ]
    )  # fmt: skip
    table = metric_table(rows, "pairwise_cosine", None, contrasts=paired)
    cells = {r[1]: r[-1] for r in table.rows}
    assert "jackknife t" in cells["`base`"] and "more collapse" in cells["`base`"]
    assert "; Wald," in cells["`tempscale-0.7`"]  # no paired row: unpaired test of the endpoints


def test_holm_verdicts_decide_each_kind_as_the_cells_read():
    """`holm_verdicts` is the one decision behind the report cells and the study's answers: a surviving change,
    an equivalent one, an inconclusive one (margin, neither), n.s. (no margin) and an untested one."""
    from llm_collapse.metrics.contrasts import Contrast
    from llm_collapse.reporting.significance import holm_verdicts

    changes = [
        ("pairwise_cosine", 0.30, Contrast(0.30, 0.25, 0.35, 0, "paired t", 1e-6)),  # survives
        (
            "pairwise_cosine",
            0.001,
            Contrast(0.001, -0.002, 0.004, 0, "paired t", 0.8),
        ),  # inside ±0.01: equivalent
        ("pairwise_cosine", 0.02, Contrast(0.02, -0.01, 0.05, 0, "paired t", 0.2)),  # neither
        ("attention_entropy", 0.02, Contrast(0.02, -0.01, 0.05, 0, "paired t", 0.2)),  # no margin
        ("pairwise_cosine", 0.02, None),
    ]
    verdicts = holm_verdicts(changes)
    assert [v.kind for v in verdicts] == ["survives", "equivalent", "inconclusive", "n.s.", "untested"]
    assert verdicts[0].p == pytest.approx(4e-6)  # Holm: the smallest of 4 tests times 4
    assert verdicts[1].margin == 0.01 and verdicts[1].q <= 0.05


def test_a_zero_width_interval_of_an_accuracy_is_no_evidence_of_equivalence():
    """Runs before Newcombe's interval stored a paired bootstrap's, [0, 0] when no query is discordant: with 24
    queries that still allows a 12% discordance rate, so it must not read "equivalent within ±0.1". A continuous
    metric's zero-width interval (identical vectors: the log schedule below its threshold) still can."""
    from llm_collapse.metrics.contrasts import Contrast
    from llm_collapse.reporting.significance import holm_verdicts

    changes = [
        ("acc@1", 0.0, Contrast(0.0, 0.0, 0.0, 0, "McNemar", 1.0)),
        (
            "acc@1",
            0.0,
            Contrast(0.0, -0.03, 0.03, 0, "McNemar", 1.0),
        ),  # Newcombe's, narrow: can be equivalent
        ("pairwise_cosine", 0.0, Contrast(0.0, 0.0, 0.0, 0, "paired t", 1.0)),
    ]
    assert [v.kind for v in holm_verdicts(changes)] == [
        "inconclusive",
        "equivalent",
        "equivalent",
    ]


def test_reread_gives_an_old_set_level_row_its_t_interval_and_test():
    """A set-level contrast stored before 2026-12-08 (the jackknife's normal interval, no p-value) is read again on
    loading with t(n - 1): interval, p-value, standard error and df; a per-length value row is left as stored."""
    from llm_collapse.reporting.reread import reread

    base = dict(model="m", method="base", task="collapse", depth=np.nan, layer=np.nan, n=12)
    stored = pd.DataFrame(
        [
            dict(base, length=512, metric="within_length_sq_spread_vs_shortest", value=-0.05, ci_low=-0.07,
                 ci_high=-0.03, p_value=np.nan),
            dict(base, length=512, metric="within_length_sq_spread", value=0.4, ci_low=0.38, ci_high=0.42,
                 p_value=np.nan),
        ]
    )  # fmt: skip
    out = reread(stored, None)
    se = 0.02 / sps.norm.ppf(0.975)
    half = sps.t.ppf(0.975, 11) * se
    row = out.iloc[0]
    assert (row.ci_low, row.ci_high) == pytest.approx((-0.05 - half, -0.05 + half))
    assert row.p_value == pytest.approx(2 * sps.t.sf(0.05 / se, 11)) and row.df == 11
    assert paired_test(row).test == "jackknife t"
    assert (out.iloc[1].ci_low, out.iloc[1].ci_high) == (0.38, 0.42) and np.isnan(out.iloc[1].p_value)
