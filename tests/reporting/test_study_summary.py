"""The study's answers: ``reports/study/answers.csv`` reproduced from ``items.parquet`` by independent code (scipy,
statsmodels, a Newcombe written out here), Holm within each family by hand, the table rendered from the file; and
the four verdicts, family scoping and declared/exploratory claims on constructed runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from llm_collapse.reporting.answer_spec import parse_answer
from llm_collapse.reporting.study import StudyError, load_questions

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "reports" / "study"
ANSWERS = STUDY / "answers.csv"
BINARY = {"acc@1", "knn_accuracy", "knn_cross_accuracy", "logistic_accuracy"}
# the reading of a positive change, per metric (the registry's directions, written out independently)
UP = {"global_centroid_distance": "less collapse", "centroid_distance": "less collapse",
      "within_length_sq_spread": "less collapse", "global_centroid_sq_distance": "less collapse",
      "pairwise_cosine": "more collapse", "centroid_cosine": "more collapse", "acc@1": "better",
      "knn_accuracy": "better", "knn_cross_accuracy": "better", "logistic_accuracy": "better",
      "cosine_to_fp32": "less drift",
      "attention_entropy_normalized": "higher", "attention_entropy": "higher", "hf_ratio": "higher",
      "hf_ratio_length_free": "higher", "socm": "more collapse", "socm_excess": "more collapse",
      "socm_d_mu": "higher", "socm_d_sigma": "higher", "token_concentration": "higher"}  # fmt: skip
DOWN = {"less collapse": "more collapse", "more collapse": "less collapse", "better": "worse",
        "less drift": "more drift", "higher": "lower"}  # fmt: skip


def _holm(p: list[float]) -> list[float]:
    """Holm's step-down by hand over the finite p-values: the i-th smallest of m times (m - i), running max."""
    order = sorted((i for i in range(len(p)) if math.isfinite(p[i])), key=lambda i: p[i])
    out, running = [math.nan] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, p[i] * (len(order) - rank)))
        out[i] = running
    return out


def _newcombe(a: np.ndarray, b: np.ndarray, alpha: float = 0.05) -> tuple[float, float, float]:
    """Newcombe's method 10 written out: statsmodels' Wilson limits, phi with the n/2 shift of its numerator."""
    n = len(a)
    e, f, g, h = (int(((a == x) & (b == y)).sum()) for x, y in ((1, 1), (1, 0), (0, 1), (0, 0)))
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = proportion_confint(e + f, n, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(e + g, n, alpha=alpha, method="wilson")
    product = (e + f) * (g + h) * (e + g) * (f + h)
    numerator = e * h - f * g
    numerator = max(numerator - n / 2, 0) if numerator > 0 else numerator
    phi = numerator / math.sqrt(product) if product else 0.0
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return p1 - p2, max(low, -1.0), min(high, 1.0)


def _cell(items: pd.DataFrame, row, method: str, length: int, column: str, model: str = "") -> pd.Series:
    depth = items["depth"].isna() if math.isnan(row.depth) else items["depth"] == row.depth
    cell = items[(items.model == (model or row.model)) & (items.method == method) & (items.task == row.metric.split("/")[0])
                 & (items.length == length) & depth & items.layer.isna()]  # fmt: skip
    return cell.set_index("item")[column]


def _trend(row) -> np.ndarray:
    """A trend answer's per-item values: each item's least-squares slope of its interaction over the swept values,
    negated (per unit decrease), by numpy's polyfit."""
    questions = {q.id: q for q in load_questions(ROOT / "experiments" / "study" / "questions.yaml")[2]}
    (trend,) = [a for a in questions[row.question].answers if a.claim == row.claim]
    items = pd.read_parquet(STUDY / row.run / "items.parquet")
    dids = np.stack(
        [_sides(items, row._replace(method=method, kind="value"))[1][0] for method, _ in trend.sweep]
    )
    values = [value for _, value in trend.sweep]
    return -np.array([np.polyfit(values, dids[:, i], 1)[0] for i in range(dids.shape[1])])


def _versus(row) -> np.ndarray:
    """A versus answer's per-item values: the row's paired differences minus the other run's, item by item."""
    run, model, method = row.versus.split("/")
    mine = _sides(pd.read_parquet(STUDY / row.run / "items.parquet"), row._replace(kind="row"), ids=True)
    other = row._replace(run=run, model=model, method=method, kind="row")
    theirs = _sides(pd.read_parquet(STUDY / run / "items.parquet"), other, ids=True)
    return mine - theirs.loc[mine.index].to_numpy()


def _sides(items: pd.DataFrame, row, ids: bool = False):
    """(quantity, per-item differences or the two sides) of an answer, from items.parquet alone (``ids``: the
    per-item differences as a Series by item id)."""
    task, metric = row.metric.split("/")
    quantity, _, contrast = metric.partition("_vs_")
    if ids:
        a = _cell(items, row, row.method, row.length, quantity)
        own = items[(items.model == row.model) & (items.method == row.method) & (items.task == task)]
        assert contrast == "shortest", row.metric
        return a - _cell(items, row, row.method, int(own.length.min()), quantity).loc[a.index]
    own = items[(items.model == row.model) & (items.method == row.method) & (items.task == task)]
    shortest = int(own.length.min())
    if contrast == "base":
        a, b = (
            _cell(items, row, row.method, row.length, quantity),
            _cell(items, row, "base", row.length, quantity),
        )
        return quantity, [a.to_numpy(float), b.loc[a.index].to_numpy(float)]
    if contrast == "shortest":
        a, b = (
            _cell(items, row, row.method, row.length, quantity),
            _cell(items, row, row.method, shortest, quantity),
        )
        return quantity, [a.to_numpy(float), b.loc[a.index].to_numpy(float)]
    if contrast == "reference":  # the same method of the run's reference model (echo against classical)
        other = json.loads((STUDY / row.run / "run.json").read_text())["config"]["reference_model"]
        a = _cell(items, row, row.method, row.length, quantity)
        b = _cell(items, row, row.method, row.length, quantity, model=other)
        return quantity, [a.to_numpy(float), b.loc[a.index].to_numpy(float)]
    assert contrast == "base_vs_shortest", row.metric
    cells = [_cell(items, row, m, n, quantity) for m, n in
             ((row.method, row.length), ("base", row.length), (row.method, shortest), ("base", shortest))]  # fmt: skip
    ids = cells[0].index
    m_long, b_long, m_short, b_short = (c.loc[ids].to_numpy(float) for c in cells)
    return quantity, [(m_long - b_long) - (m_short - b_short)]


@pytest.mark.skipif(not ANSWERS.is_file(), reason="no committed study answers")
def test_every_per_item_answer_reproduces_from_items_parquet_by_independent_code():
    answers = pd.read_csv(ANSWERS)
    checked = 0
    for row in answers.itertuples(index=False):
        if not row.per_item or row.test not in ("paired t", "McNemar", "sign-flip"):
            continue
        items = pd.read_parquet(STUDY / row.run / "items.parquet")
        if row.kind == "trend":
            quantity, sides = "", [_trend(row)]
        elif row.kind == "versus":
            quantity, sides = "", [_versus(row).to_numpy(float)]
        else:
            quantity, sides = _sides(items, row)
        if len(sides) == 2 and quantity in BINARY:
            a, b = sides
            estimate, low, high = _newcombe(a, b)
            table = [[int(((a == x) & (b == y)).sum()) for y in (1, 0)] for x in (1, 0)]
            p = mcnemar(table, exact=True).pvalue
            if row.p_equivalence == 1:  # not strictly inside the margins: no level makes it equivalent
                assert abs(estimate) >= row.margin, row.claim
            elif math.isfinite(
                row.p_equivalence
            ):  # the TOST p inverts the interval: inside above it, not below
                for level, inside in ((row.p_equivalence * 1.001, True), (row.p_equivalence * 0.999, False)):
                    _, lo, hi = _newcombe(a, b, 2 * level) if level < 0.5 else (0, -math.inf, math.inf)
                    assert (-row.margin < lo and hi < row.margin) == inside, row.claim
        else:
            d = sides[0] - sides[1] if len(sides) == 2 else sides[0]
            estimate, (low, high) = d.mean(), DescrStatsW(d).tconfint_mean()
            p = sps.ttest_1samp(d, 0).pvalue if row.test == "paired t" else row.p  # sign-flip: stored
            if math.isfinite(row.p_equivalence):
                se = d.std(ddof=1) / math.sqrt(len(d))
                tost = max(sps.t.sf((estimate + row.margin) / se, len(d) - 1),
                           sps.t.sf((row.margin - estimate) / se, len(d) - 1))  # fmt: skip
                assert row.p_equivalence == pytest.approx(tost, rel=1e-6, abs=1e-12), row.claim
        assert (row.estimate, row.ci_low, row.ci_high) == pytest.approx((estimate, low, high), abs=1e-8), (
            row.claim
        )
        assert row.p == pytest.approx(p, rel=1e-6, abs=1e-12) and row.n == len(sides[0]), row.claim
        checked += 1
    assert checked >= 30  # every answer but the set-level and aggregates ones


@pytest.mark.skipif(not ANSWERS.is_file(), reason="no committed study answers")
def test_every_verdict_is_holm_within_its_family_by_hand():
    answers = pd.read_csv(ANSWERS)
    _, _, questions = load_questions(ROOT / "experiments" / "study" / "questions.yaml")
    assert list(answers.question) == [q.id for q in questions for _ in q.answers]
    for _, family in answers.groupby("family", sort=False):
        holm = _holm(list(family.p))
        assert family.p_holm.to_numpy() == pytest.approx(holm, nan_ok=True)
        open_ = [
            q if math.isfinite(h) and h > 0.05 else math.nan
            for q, h in zip(family.p_equivalence, holm, strict=True)
        ]
        assert family.p_equivalence_holm.to_numpy() == pytest.approx(_holm(open_), nan_ok=True)
        for row, p in zip(family.itertuples(index=False), holm, strict=True):
            quantity = row.metric.split("/")[1].split("_vs_")[0]
            reads = UP[quantity] if row.estimate > 0 else DOWN[UP[quantity]]
            if p <= 0.05:
                assert row.verdict == ("yes" if reads == row.direction else "opposite"), row.claim
            elif row.p_equivalence_holm <= 0.05:
                assert row.verdict == "equivalent" and math.isfinite(row.margin), row.claim
            else:
                assert row.verdict == "inconclusive", row.claim


@pytest.mark.skipif(not ANSWERS.is_file(), reason="no committed study answers")
def test_the_answers_table_is_answers_csv():
    text = (STUDY / "report.md").read_text()
    section = text.split("\n## Answers\n", 1)[1].split("\n## ", 1)[0]
    first = next(block for block in section.split("\n\n") if block.startswith("| "))
    lines = first.splitlines()[2:]
    everything = pd.read_csv(ANSWERS)
    answers = everything[everything.kind != "value"]  # each value of a sweep: in the sweep table
    assert len(lines) == len(answers) and set(everything.kind) == {"row", "value", "trend", "versus"}
    words = {"yes": "yes", "inconclusive": "inconclusive"}
    for line, row in zip(lines, answers.itertuples(index=False), strict=True):
        question, claim, answer, interval, n, test, declared, source = (
            c.strip() for c in line.strip("|").split(" | ")
        )
        assert (question, claim, int(n)) == (row.question, row.claim, row.n)
        expected = words.get(row.verdict) or ("no, the opposite" if row.verdict == "opposite"
                                              else f"no, equivalent within ±{row.margin:g}")  # fmt: skip
        assert answer.startswith(expected), row.claim
        digits = len(interval.split(" ")[0].split(".")[1])
        numbers = [float(x) for x in re.findall(r"-?\d+\.\d+", interval)]
        assert numbers == [round(v, digits) + 0.0 for v in (row.estimate, row.ci_low, row.ci_high)], row.claim
        p = row.p_equivalence_holm if row.verdict == "equivalent" else row.p_holm
        assert test.endswith("Holm p<0.001" if p < 0.001 else f"Holm p={p:.3f}"), row.claim
        assert declared == ("declared" if row.declared else "exploratory")
        assert source.startswith(f"[report]({row.run}/report.md)")
        assert source.endswith("(aggregates)") != bool(row.per_item)


GOOD = {"claim": "x", "run": "r", "model": "m", "method": "base", "metric": "collapse/pairwise_cosine_vs_base",
        "length": 64, "asks": "more collapse"}  # fmt: skip  # a valid answer; each bad case changes one key


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"claim": "x"}, "exactly the keys"),
        ({**GOOD, "metric": "collapse/pairwise_cosine"}, "must be 'task/<paired metric>'"),
        ({**GOOD, "length": "64"}, "must be a positive integer"),
        ({**GOOD, "asks": "bigger"}, "is not one of"),
        (
            {**GOOD, "metric": "layerwise/hf_ratio_vs_shortest", "asks": "lower", "layer": "last"},
            "must be a non-negative integer",
        ),  # fmt: skip
        ({**GOOD, "depth": 1.5}, "from 0 \\(start\\) to 1 \\(end\\)"),
        ({**GOOD, "depth": True}, "from 0 \\(start\\) to 1 \\(end\\)"),
        ({**GOOD, "side": 0}, "exactly the keys"),
    ],
)
def test_bad_answers_are_one_line_errors(value, message):
    assert (
        parse_answer(GOOD, "q1", StudyError).length == 64
    )  # the cases differ from a valid answer in one key
    with pytest.raises(StudyError, match=message) as err:
        parse_answer(value, "q1", StudyError)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("overview", "message"),
    [
        ("overview: [minilm]\n", "overview must be a mapping with the keys"),
        ("overview: {run: r, model: m, metric: pairwise_cosine, methods: [base]}\n", "metric 'task/metric'"),
        ("overview: {run: r, model: m, metric: collapse/pairwise_cosine, methods: []}\n", "non-empty list"),
    ],
)
def test_bad_overview_is_one_line(tmp_path, overview, message):
    from llm_collapse.reporting.study import load_overview

    path = tmp_path / "q.yaml"
    path.write_text("questions: []\n" + overview)
    with pytest.raises(StudyError, match=message) as err:
        load_overview(path)
    assert "\n" not in str(err.value)


def test_committed_overview_figure_is_the_questions_files():
    from llm_collapse.reporting.study import load_overview

    overview = load_overview(ROOT / "experiments" / "study" / "questions.yaml")
    assert overview is not None and (STUDY / "figures" / "overview.png").is_file()
    assert "![overview](figures/overview.png)" in (STUDY / "report.md").read_text()


def test_an_answer_with_a_depth_cites_that_depth_and_without_one_the_row_over_all_depths(tmp_path):
    from llm_collapse.reporting.study_summary import answer_row

    rows = [
        {"model": "m", "method": "base", "task": "position", "corpus": "c", "metric": "acc@1_vs_base", "length": 2048,
         "depth": depth, "layer": math.nan, "value": value, "ci_low": value - 0.1, "ci_high": value + 0.1,
         "n": n, "p_value": 0.5}
        for depth, value, n in ((math.nan, 0.05, 96), (0.0, 0.2, 48), (1.0, -0.1, 48))
    ]  # fmt: skip
    (tmp_path / "r").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "r" / "results.parquet")
    spec = {**GOOD, "run": "r", "metric": "position/acc@1_vs_base", "length": 2048, "asks": "better"}
    early = parse_answer({**spec, "depth": 0}, "q1", StudyError)
    assert early.label == "r: m / `base`, `position/acc@1_vs_base` depth 0 @2k"
    assert answer_row(tmp_path, early, StudyError)["value"] == 0.2
    assert (
        answer_row(tmp_path, parse_answer({**spec, "depth": 1}, "q1", StudyError), StudyError)["value"]
        == -0.1
    )
    assert answer_row(tmp_path, parse_answer(spec, "q1", StudyError), StudyError)["n"] == 96


# --- verdicts, families and declared claims on constructed runs ------------------------------------------------

FALLS = {**GOOD, "metric": "collapse/global_centroid_distance_vs_shortest", "length": 512, "asks": "more collapse",
         "margin": 0.01, "margin_reason": "test"}  # fmt: skip


def _contrast(estimate: float, sd: float, n: int = 40):
    """The paired t contrast of n differences with this mean and standard deviation."""
    from llm_collapse.metrics.contrasts import mean_difference

    d = np.linspace(-1, 1, n)
    d = estimate + sd * (d - d.mean()) / d.std(ddof=1)
    return mean_difference(d)


def test_the_four_verdicts_of_a_directional_claim_including_a_rise_read_against_falls():
    from llm_collapse.reporting.study_summary import read_family

    claim = parse_answer(FALLS, "q", StudyError)  # "the paper's distance falls": asks more collapse (lower)
    cases = {
        "yes": _contrast(-0.05, 0.02),  # falls, clearly
        "opposite": _contrast(+0.05, 0.02),  # rises, clearly: the data point the other way
        "equivalent": _contrast(0.0005, 0.005, n=200),  # inside ±0.01, tightly
        "inconclusive": _contrast(0.004, 0.05),  # wide
    }
    read = read_family([claim] * 4, list(cases.values()))
    assert [r["verdict"] for r in read] == list(cases)
    assert read[0]["p_holm"] <= 0.05 and read[1]["p_holm"] <= 0.05 and math.isnan(read[0]["p_equivalence"])
    # the same data without a declared margin cannot be equivalent
    bare = parse_answer({k: v for k, v in FALLS.items() if not k.startswith("margin")}, "q", StudyError)
    assert read_family([bare], [cases["equivalent"]])[0]["verdict"] == "inconclusive"


def _study(tmp_path: Path, families: dict[str, list[float]], claims: list[dict] | None = None) -> Path:
    """A study root with one run whose base falls by each given value (paired t rows, 40 items, sd 0.02)."""
    rows = []
    for i, value in enumerate(v for values in families.values() for v in values):
        c = _contrast(value, 0.02)
        rows.append(dict(model="m", method=f"x{i}", task="collapse", corpus="c", length=512, depth=math.nan,
                         layer=math.nan, metric="global_centroid_distance_vs_shortest", value=c.estimate,
                         ci_low=c.low, ci_high=c.high, n=c.n, p_value=c.p))  # fmt: skip
    run = tmp_path / "r"
    run.mkdir(exist_ok=True)
    pd.DataFrame(rows).to_parquet(run / "results.parquet")
    (run / "run.json").write_text(json.dumps({"config": {"claims": claims or []}}))
    return tmp_path


def _claims(families: dict[str, list[float]]):
    """``(question, family, answer)`` per value: one question (and family) per key of ``families``."""
    out, i = [], 0
    for family, values in families.items():
        for _ in values:
            answer = parse_answer({**FALLS, "run": "r", "model": "m", "method": f"x{i}"}, "q", StudyError)
            out.append((family, family, answer))
            i += 1
    return out


def test_a_claim_added_to_one_question_changes_no_verdict_or_p_of_another(tmp_path):
    from llm_collapse.reporting.study_summary import answers_frame

    before = {"a": [-0.012, -0.011], "b": [-0.0095]}
    after = {"a": [-0.012, -0.011], "b": [-0.0095, 0.0, 0.001, -0.02]}  # three more claims in family b
    first = answers_frame(_study(tmp_path, before), _claims(before), StudyError)
    second = answers_frame(_study(tmp_path, after), _claims(after), StudyError)
    a1, a2 = first[first.family == "a"], second[second.family == "a"]
    assert list(a1.verdict) == list(a2.verdict) and list(a1.p_holm) == list(a2.p_holm)
    assert (
        first.loc[first.family == "b", "p_holm"].iloc[0] < second.loc[second.family == "b", "p_holm"].iloc[0]
    )
    # one family across both questions would have moved family a's Holm p-values
    from llm_collapse.reporting.study_summary import read_family

    pooled = read_family(
        [parse_answer(FALLS, "q", StudyError)] * 6, [_contrast(v, 0.02) for v in sum(after.values(), [])]
    )
    assert pooled[0]["p_holm"] != a2.p_holm.iloc[0]


def test_a_claim_is_declared_only_where_its_run_stated_it_before_running(tmp_path):
    from llm_collapse.reporting.study_summary import answers_frame

    values = {"q": [-0.05, -0.04]}
    stated = {"metric": FALLS["metric"], "model": "m", "method": "x0", "length": 512, "asks": "more collapse",
              "margin": 0.01, "claim": "falls"}  # fmt: skip
    frame = answers_frame(_study(tmp_path, values, claims=[stated]), _claims(values), StudyError)
    assert list(frame.declared) == [
        True,
        False,
    ]  # x1's claim was written into the questions file after the run
    # a stated claim with another margin (or direction) is not the claim the report reads
    changed = answers_frame(
        _study(tmp_path, values, claims=[{**stated, "margin": 0.05}]), _claims(values), StudyError
    )
    assert list(changed.declared) == [False, False]


def _loo(quantity: str, x: np.ndarray) -> tuple[float, np.ndarray]:
    """A set-level statistic and its delete-one values from its per-item terms, written out: the mean pairwise
    cosine (and SOCM's pair means) from each item's mean over its pairs; the spread 1 - |c|^2 from each item's
    squared distance."""
    n = len(x)
    if quantity == "pairwise_cosine" or quantity.startswith("socm"):
        return x.mean(), np.array([(n * x.mean() - 2 * x[k]) / (n - 2) for k in range(n)])
    c2 = 1 - x.mean()
    dots = (1 + c2 - x) / 2
    return x.mean(), np.array([1 - (n * n * c2 - 2 * n * dots[k] + 1) / (n - 1) ** 2 for k in range(n)])


@pytest.mark.skipif(not ANSWERS.is_file(), reason="no committed study answers")
def test_every_set_level_answer_with_items_is_the_jackknife_of_its_per_item_terms():
    """Set-level answers (the within-length spread, the pairwise cosine, SOCM's pair means: 'jackknife t') reproduce
    from items.parquet: each cell's delete-one values from its per-item terms, combined with the answer's weights (a
    row's contrast or a sweep's least-squares trend, written out here), then the t(n - 1) interval and test."""
    answers = pd.read_csv(ANSWERS)
    questions = {q.id: q for q in load_questions(ROOT / "experiments" / "study" / "questions.yaml")[2]}
    checked = 0
    for row in answers.itertuples(index=False):
        if not row.per_item or row.test != "jackknife t" or row.kind == "versus":
            continue
        items = pd.read_parquet(STUDY / row.run / "items.parquet")
        quantity, _, contrast = row.metric.split("/")[1].partition("_vs_")
        own = items[
            (items.model == row.model) & (items.task == row.metric.split("/")[0]) & items[quantity].notna()
        ]
        shortest = int(own.length.min())
        if row.kind == "trend":
            (answer,) = [a for a in questions[row.question].answers if a.claim == row.claim]
            values = np.array([v for _, v in answer.sweep])
            weights = -(values - values.mean()) / np.sum((values - values.mean()) ** 2)
            methods = [m for m, _ in answer.sweep]
        else:
            weights, methods = np.array([1.0]), [row.method]
        total_point, total_loo = 0.0, 0.0
        for weight, method in zip(weights, methods, strict=True):
            cells = {"shortest": [(1, method, row.length), (-1, method, shortest)],
                     "base": [(1, method, row.length), (-1, "base", row.length)],
                     "base_vs_shortest": [(1, method, row.length), (-1, "base", row.length),
                                          (-1, method, shortest), (1, "base", shortest)]}[contrast]  # fmt: skip
            ids = None
            for sign, m, length in cells:
                cell = _cell(items, row, m, length, quantity)
                ids = cell.index if ids is None else ids
                point, loo = _loo(quantity, cell.loc[ids].to_numpy(float))
                total_point, total_loo = total_point + weight * sign * point, total_loo + weight * sign * loo
        n = len(total_loo)
        se = math.sqrt((n - 1) / n * np.sum((total_loo - total_loo.mean()) ** 2))
        t = sps.t.ppf(0.975, n - 1)
        expected = (total_point, total_point - t * se, total_point + t * se)
        assert (row.estimate, row.ci_low, row.ci_high) == pytest.approx(expected, abs=1e-9), row.claim
        assert row.p == pytest.approx(2 * sps.t.sf(abs(total_point) / se, n - 1), rel=1e-6, abs=1e-12), (
            row.claim
        )
        checked += 1
    assert checked >= 20


@pytest.mark.skipif(not ANSWERS.is_file(), reason="no committed study answers")
def test_every_welch_answer_is_scipys_welch_test_on_items_parquet():
    """The bins design's interactions (other texts per length): (method - base) per item at the length against the
    same at the shortest length, by scipy's Welch t-test on items.parquet."""
    answers = pd.read_csv(ANSWERS)
    welch = answers[answers.test == "Welch t"]
    for row in welch.itertuples(index=False):
        items = pd.read_parquet(STUDY / row.run / "items.parquet")
        quantity = row.metric.split("/")[1].split("_vs_")[0]
        task_items = items[(items.method == row.method) & (items.task == row.metric.split("/")[0])]
        shortest = int(task_items.length.min())
        d = {}
        for length in (row.length, shortest):
            a = _cell(items, row, row.method, length, quantity)
            d[length] = (a - _cell(items, row, "base", length, quantity).loc[a.index]).to_numpy(float)
        assert not set(_cell(items, row, "base", row.length, quantity).index) & set(
            _cell(items, row, "base", shortest, quantity).index
        )  # other texts at each length
        test = sps.ttest_ind(d[row.length], d[shortest], equal_var=False)
        assert row.estimate == pytest.approx(d[row.length].mean() - d[shortest].mean(), abs=1e-9), row.claim
        assert row.p == pytest.approx(test.pvalue, rel=1e-6) and row.n == len(d[row.length]) + len(
            d[shortest]
        )
        assert (row.ci_low, row.ci_high) == pytest.approx(tuple(test.confidence_interval()), rel=1e-6)
    assert len(welch) >= 5
