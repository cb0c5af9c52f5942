"""Wilson, Newcombe's paired interval, TOST and verdicts against statsmodels, scipy and the paper's table.

statsmodels (0.15.0 here) has no paired Newcombe interval, so method 10 is checked against the paper's
Table III, against a second implementation written below from Pearson's phi (``np.corrcoef``) and
statsmodels' Wilson limits, and against statsmodels' independent Newcombe interval where phi is 0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint
from statsmodels.stats.weightstats import DescrStatsW, ttost_paired

from llm_collapse.metrics.proportions import (
    TostResult,
    newcombe_paired_interval,
    tost_paired_mean,
    tost_paired_proportions,
    verdict,
    wilson_interval,
)
from llm_collapse.metrics.stats import mcnemar_exact_p


def _vectors(e: int, f: int, g: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Paired 0/1 vectors with e (1,1), f (1,0), g (0,1) and h (0,0) items."""
    a = np.repeat([1, 1, 0, 0], [e, f, g, h])
    b = np.repeat([1, 0, 1, 0], [e, f, g, h])
    return a, b


def _newcombe_reference(a, b, alpha, corrected=True):
    """Method 10 written independently: Pearson's phi of the two vectors, statsmodels' Wilson limits."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n = len(a)
    p1, p2 = a.mean(), b.mean()
    l1, u1 = proportion_confint(int(a.sum()), n, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(int(b.sum()), n, alpha=alpha, method="wilson")
    if a.std() == 0 or b.std() == 0:
        phi = 0.0
    else:
        phi = np.corrcoef(a, b)[0, 1]  # = (eh - fg) / sqrt(product of the margin totals)
        if corrected and phi > 0:  # numerator eh - fg -> max(eh - fg - n/2, 0)
            scale = math.sqrt(a.sum() * (n - a.sum()) * b.sum() * (n - b.sum()))
            phi = max(phi - (n / 2) / scale, 0.0)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return p1 - p2, low, high


# --- Wilson -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.01, 0.05 / 8])
def test_wilson_equals_statsmodels_and_the_closed_form(alpha):
    z = sps.norm.ppf(1 - alpha / 2)
    for n in (1, 2, 7, 20, 148):
        for k in range(n + 1):
            low, high = wilson_interval(k, n, alpha)
            assert (low, high) == pytest.approx(
                proportion_confint(k, n, alpha=alpha, method="wilson"), abs=1e-12
            )
            p = k / n
            centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
            closed = ((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n))
            assert (low, high) == pytest.approx(closed, abs=1e-12)


# Newcombe (1998) Statist. Med. 17:857, method 3 (Wilson, no continuity correction), as in ratesci's tests
SINGLE_PROPORTION_EXAMPLES = {(15, 148): (0.0624, 0.1605), (0, 20): (0.0, 0.1611), (1, 29): (0.0061, 0.1718)}


def test_wilson_reproduces_newcombes_single_proportion_examples_and_rejects_bad_arguments():
    for (k, n), expected in SINGLE_PROPORTION_EXAMPLES.items():
        assert tuple(round(v, 4) for v in wilson_interval(k, n)) == expected
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    for args in [(3, 2), (-1, 5), (1.5, 5), (1, 5, 0.0), (1, 5, 1.0)]:
        with pytest.raises(ValueError):
            wilson_interval(*args)


# --- Newcombe's paired interval ----------------------------------------------------------------------

# Newcombe (1998) Statist. Med. 17:2635, Table III, method 10, 95% limits; (e, f, g, h) as in the paper
# (e = both succeed, f = first only, g = second only, h = neither), theta = (f - g) / n. Transcribed from
# secondary sources (ratesci's tests quote row 2; the primary PDF was not available here).
TABLE_III_METHOD_10 = [
    ((36, 12, 2, 0), (0.0569, 0.3404)),
    ((20, 12, 2, 16), (0.0562, 0.3292)),
    ((18, 12, 2, 18), (0.0562, 0.3290)),
    ((36, 14, 0, 0), (0.1528, 0.4167)),
    ((35, 14, 0, 1), (0.1461, 0.4175)),
    ((18, 14, 0, 18), (0.1441, 0.3963)),
    ((2, 97, 1, 0), (0.8721, 0.9854)),
    ((1, 97, 1, 1), (0.8736, 0.9850)),
    ((0, 29, 1, 0), (0.6666, 0.9882)),
    ((2, 98, 0, 0), (0.9178, 0.9945)),
    ((1, 98, 0, 1), (0.9171, 0.9916)),
    ((0, 30, 0, 0), (0.8395, 1.0)),
    ((54, 0, 0, 0), (-0.0664, 0.0664)),
    ((53, 0, 0, 1), (-0.0729, 0.0729)),
    ((30, 0, 0, 24), (-0.0358, 0.0358)),
    ((29, 0, 0, 25), (-0.0354, 0.0354)),
    ((28, 0, 0, 26), (-0.0352, 0.0352)),
    ((27, 0, 0, 27), (-0.0351, 0.0351)),
]


@pytest.mark.parametrize(("table", "expected"), TABLE_III_METHOD_10)
def test_newcombe_reproduces_table_iii_of_the_paper(table, expected):
    point, low, high = newcombe_paired_interval(*_vectors(*table))
    e, f, g, h = table
    assert point == pytest.approx((f - g) / sum(table), abs=1e-15)
    # to the printed 4 decimals; (1, 97, 1, 1) prints 0.8736 for 0.873672 (z = 1.96 gives 0.873670 too)
    tolerance = 1.0e-4 if table == (1, 97, 1, 1) else 0.5e-4
    assert low == pytest.approx(expected[0], abs=tolerance + 1e-12)
    assert high == pytest.approx(expected[1], abs=tolerance + 1e-12)


def test_the_plain_phi_does_not_reproduce_method_10():
    """Without the n/2 shift of phi's numerator the table is missed (and (27, 0, 0, 27) collapses to [0, 0])."""
    _, low, high = _newcombe_reference(*_vectors(20, 12, 2, 16), 0.05, corrected=False)
    assert (round(low, 4), round(high, 4)) == (0.0618, 0.3242) != TABLE_III_METHOD_10[1][1]
    _, low, high = _newcombe_reference(*_vectors(27, 0, 0, 27), 0.05, corrected=False)
    assert high - low == pytest.approx(0.0, abs=1e-6)


def test_newcombe_equals_an_independent_implementation_on_random_tables():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        p = rng.dirichlet(np.ones(4))
        kind = rng.choice(4, size=n, p=p)
        a, b = (kind < 2).astype(int), np.isin(kind, (0, 2)).astype(int)
        alpha = float(rng.choice([0.05, 0.1, 0.2, 0.01]))
        got = newcombe_paired_interval(a, b, alpha)
        assert got == pytest.approx(_newcombe_reference(a, b, alpha), abs=1e-10)


@pytest.mark.parametrize(
    "table", [(6, 4, 4, 3), (10, 5, 5, 3), (3, 7, 2, 5), (8, 2, 3, 1), (0, 0, 4, 16), (7, 3, 0, 0)]
)
def test_newcombe_is_the_independent_square_and_add_where_phi_is_zero(table):
    """phi = 0 when eh - fg lies in [0, n/2] or a margin total is 0: statsmodels' unpaired Newcombe."""
    e, f, g, h = table
    n = sum(table)
    assert 0 <= e * h - f * g <= n / 2 or min(e + f, g + h, e + g, f + h) == 0
    low, high = confint_proportions_2indep(e + f, n, e + g, n, method="newcomb", compare="diff", alpha=0.05)
    assert newcombe_paired_interval(*_vectors(*table))[1:] == pytest.approx((low, high), abs=1e-12)


def test_newcombe_is_antisymmetric_and_handles_edges():
    a, b = _vectors(9, 6, 2, 3)
    point, low, high = newcombe_paired_interval(a, b)
    assert newcombe_paired_interval(b, a) == pytest.approx((-point, -high, -low), abs=1e-15)
    assert all(math.isnan(v) for v in newcombe_paired_interval([], []))
    # all 5 items one way: p1 = 0, p2 = 1, so L = -1 and U = -1 + sqrt(2) * (Wilson upper limit of 0/5)
    upper = -1 + math.sqrt(2) * proportion_confint(0, 5, method="wilson")[1]
    assert newcombe_paired_interval(*_vectors(0, 0, 5, 0)) == pytest.approx((-1.0, -1.0, upper), abs=1e-12)
    with pytest.raises(ValueError, match="0/1"):
        newcombe_paired_interval([0, 2], [1, 1])
    with pytest.raises(ValueError, match="one length"):
        newcombe_paired_interval([0, 1], [1])
    with pytest.raises(ValueError, match="alpha"):
        newcombe_paired_interval(a, b, alpha=1.5)


def test_issue_43_background_case_newcombe_excludes_zero_where_mcnemar_cannot_reject():
    """20 passkey queries at 16k, tau 1.1 vs base: 7 both right, 4 tau only, 0 base only, 9 neither."""
    tau, base = _vectors(7, 4, 0, 9)
    point, low, high = newcombe_paired_interval(tau, base)
    assert (round(point, 3), round(low, 3), round(high, 3)) == (0.2, 0.0, 0.371)
    assert 0 < low < 1e-3  # "0.000" is positive: the interval just excludes 0 ...
    p = mcnemar_exact_p(tau, base)
    assert p == pytest.approx(0.125)  # ... while the exact test cannot reject
    assert verdict(low, high, p, None) == "inconclusive"


# --- TOST ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_tost_paired_mean_equals_statsmodels_ttost_paired(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 200))
    x2 = rng.normal(size=n)
    x1 = x2 + rng.normal(loc=rng.normal(scale=0.02), scale=rng.uniform(0.005, 0.1), size=n)
    for margin in (0.005, 0.01, 0.05):
        for alpha in (0.05, 0.1):
            got = tost_paired_mean(x1 - x2, margin, alpha)
            p, _, _ = ttost_paired(x1, x2, -margin, margin)
            assert got.p_value == pytest.approx(p, abs=1e-10)
            low, high = DescrStatsW(x1 - x2).tconfint_mean(alpha=2 * alpha)
            assert (got.point, got.low, got.high) == pytest.approx(((x1 - x2).mean(), low, high), abs=1e-12)
            assert got.equivalent == (p < alpha) == (-margin < low and high < margin)
            assert got.margin == margin


def test_tost_paired_mean_edges():
    assert tost_paired_mean([0.001] * 5, 0.01) == TostResult(0.001, 0.001, 0.001, 0.0, 0.01, True)
    assert tost_paired_mean([0.02] * 5, 0.01).p_value == 1.0
    single = tost_paired_mean([0.0], 0.01)
    assert single.point == 0.0 and math.isnan(single.p_value) and not single.equivalent
    for bad in (0, -0.1, float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(ValueError, match="margin"):
            tost_paired_mean([0.0, 0.1], bad)
    with pytest.raises(ValueError, match="alpha"):
        tost_paired_mean([0.0, 0.1], 0.1, alpha=0.5)
    with pytest.raises(ValueError, match="finite"):
        tost_paired_mean([0.0, float("nan")], 0.1)


def test_tost_paired_proportions_is_inclusion_of_the_1_minus_2_alpha_newcombe_interval():
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(200):
        n = int(rng.integers(5, 400))
        kind = rng.choice(4, size=n, p=rng.dirichlet([8, 1, 1, 4]))
        a, b = (kind < 2).astype(int), np.isin(kind, (0, 2)).astype(int)
        margin, alpha = float(rng.choice([0.05, 0.1, 0.2])), float(rng.choice([0.05, 0.1]))
        got = tost_paired_proportions(a, b, margin, alpha)
        point, low, high = _newcombe_reference(a, b, 2 * alpha)
        assert (got.point, got.low, got.high) == pytest.approx((point, low, high), abs=1e-10)
        assert got.equivalent == (-margin < low and high < margin)
        assert got.margin == margin
        # the p-value inverts the interval test: p <= alpha exactly where the (1 - 2 alpha) interval is inside
        for level in (0.01, 0.05, 0.1, 0.2):
            _, lo, hi = _newcombe_reference(a, b, 2 * level)
            inside = -margin < lo and hi < margin
            assert (got.p_value <= level) == inside or abs(got.p_value - level) < 1e-8
        seen.add(got.equivalent)
    assert seen == {True, False}  # both outcomes exercised


def test_tost_paired_proportions_reads_identical_runs_as_equivalent_only_with_enough_items():
    assert tost_paired_proportions(*_vectors(8, 0, 0, 8), 0.1).equivalent  # 90% limits +-0.095
    assert not tost_paired_proportions(*_vectors(6, 0, 0, 6), 0.1).equivalent  # +-0.124
    assert not tost_paired_proportions(*_vectors(10, 0, 0, 10), 0.05).equivalent  # +-0.077


def test_tost_paired_proportions_size_at_the_margin_by_exact_enumeration():
    """The documented gotcha: P(equivalent) at a true difference equal to the margin, summed exactly over
    all (e, f, g, h) of n = 20 items. With every discordant item one way (p11, p10, p01, p00) = (0.4, 0.1,
    0, 0.5) the nominal 0.05 becomes 0.119; with discordance both ways it stays below 0.05."""

    def size(n, probabilities):
        total = 0.0
        for e in range(n + 1):
            for f in range(n + 1 - e):
                for g in range(n + 1 - e - f):
                    counts = [e, f, g, n - e - f - g]
                    pmf = sps.multinomial.pmf(counts, n, probabilities)
                    if pmf > 1e-15 and tost_paired_proportions(*_vectors(*counts), 0.1).equivalent:
                        total += pmf
        return total

    assert size(20, [0.4, 0.1, 0.0, 0.5]) == pytest.approx(0.1188, abs=5e-5)
    assert size(20, [0.3, 0.15, 0.05, 0.5]) < 0.05


# --- verdicts and margins ----------------------------------------------------------------------------


def _tost(equivalent: bool, margin: float = 0.1) -> TostResult:
    return TostResult(0.0, -0.01, 0.01, float("nan"), margin, equivalent)


@pytest.mark.parametrize(
    ("low", "high", "p", "equivalence", "expected"),
    [
        (0.05, 0.4, 0.01, None, "different"),
        (-0.4, -0.05, 0.049, _tost(False), "different"),
        (0.05, 0.4, 0.125, None, "inconclusive"),  # interval excludes 0, the test does not reject
        (-0.1, 0.3, 0.01, None, "inconclusive"),  # the test rejects, the interval covers 0
        (-0.02, 0.02, 0.9, _tost(True), "equivalent within ±0.1"),
        (-0.02, 0.02, 0.9, _tost(True, 0.01), "equivalent within ±0.01"),
        (0.002, 0.004, 0.001, _tost(True, 0.01), "different (within ±0.01)"),
        (-0.02, 0.02, 0.9, _tost(False), "inconclusive"),
        (float("nan"), float("nan"), float("nan"), None, "inconclusive"),
        (0.05, 0.4, float("nan"), None, "inconclusive"),
    ],
)
def test_verdict(low, high, p, equivalence, expected):
    assert verdict(low, high, p, equivalence, alpha=0.05) == expected


def test_verdict_uses_the_given_level_and_checks_it():
    assert verdict(0.01, 0.2, 0.01, None, alpha=0.05 / 8) == "inconclusive"
    assert verdict(0.01, 0.2, 0.005, None, alpha=0.05 / 8) == "different"
    with pytest.raises(ValueError, match="alpha"):
        verdict(0.01, 0.2, 0.005, None, alpha=0)


def test_default_margins_and_overrides():
    """The margins the tasks declare with their metrics (`MetricInfo.margin`), and a run's overrides."""
    import dataclasses

    from llm_collapse.tasks.registry import METRICS, margin_for

    geometry = ("pairwise_cosine", "centroid_distance", "global_centroid_distance", "centroid_cosine")
    accuracies = ("acc@1", "knn_accuracy", "knn_cross_accuracy")
    declared = {metric: info.margin for metric, info in METRICS.items() if info.margin is not None}
    assert declared == {**dict.fromkeys(geometry, 0.01), **dict.fromkeys(accuracies, 0.10)}
    assert margin_for("acc@1") == 0.10 and margin_for("centroid_cosine") == 0.01
    assert margin_for("knn/knn_cross_accuracy") == 0.10
    assert margin_for("acc@1", {"acc@1": 0.05}) == 0.05
    assert margin_for("knn/knn_accuracy", {"knn/knn_accuracy": 0.2, "knn_accuracy": 0.3}) == 0.2
    assert margin_for("effective_rank") is None
    assert margin_for("effective_rank", {"effective_rank": 1}) == 1.0
    for bad in (0, -0.01, float("nan"), float("inf"), None, "0.1"):
        with pytest.raises(ValueError, match="positive finite"):
            margin_for("acc@1", {"pairwise_cosine": bad})
    with pytest.raises(dataclasses.FrozenInstanceError):
        METRICS["acc@1"].margin = 0.2  # read-only
