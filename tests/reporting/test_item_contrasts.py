"""Contrasts computed from items.parquet (trends over a sweep, contrasts across runs) and the sweep answers that use
them: the set-level jackknife from per-item terms equals the rows the runs computed from their embeddings, a trend
is the least-squares slope, and a sweep expands into its values and its trend."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from llm_collapse.reporting.answer_spec import parse_answers
from llm_collapse.reporting.item_contrasts import Cell, Items, combine, contrast_terms, trend_weights
from llm_collapse.reporting.study import StudyError

STUDY = Path(__file__).resolve().parents[2] / "reports" / "study"
SET_LEVEL_ROWS = ("within_length_sq_spread_vs_shortest", "within_length_sq_spread_vs_base",
                  "within_length_sq_spread_vs_base_vs_shortest", "pairwise_cosine_vs_base_vs_shortest")  # fmt: skip


@pytest.mark.parametrize("run", ["tau32k_below1", "minilm", "tau8k"])
def test_set_level_rows_from_items_equal_the_runs_jackknife_from_embeddings(run):
    """Every stored jackknife row of the spread (and the pairwise cosine's interaction) of a committed run, computed
    at run time from the embeddings, comes back from items.parquet's per-item terms to 1e-9 (estimate and standard error)."""
    results = pd.read_parquet(STUDY / run / "results.parquet")
    rows = results[results.metric.isin(SET_LEVEL_ROWS) & results.depth.isna() & results.layer.isna()]
    items, checked = Items(STUDY), 0
    for row in rows.itertuples(index=False):
        quantity, _, rest = row.metric.partition("_vs_")
        shortest = int(results[(results.model == row.model) & (results.metric == quantity)].length.min())
        cell = Cell(run, row.model, row.method, row.task, int(row.length))
        contrast = combine(items, contrast_terms(cell, "_vs_" + rest, shortest), quantity)
        assert contrast is not None, row
        # these runs stored the jackknife's normal interval (before 2026-12-08): its standard error, read with t
        stored_se = (row.ci_high - row.ci_low) / (2 * scipy.stats.norm.ppf(0.975))
        assert (contrast.estimate, contrast.se) == pytest.approx((row.value, stored_se), abs=1e-9), row
        assert contrast.test == "jackknife t" and contrast.df == row.n - 1
        checked += 1
    assert checked >= 20


def test_trend_weights_give_the_least_squares_slope_per_unit_decrease():
    rng = np.random.default_rng(0)
    values = [0.5, 0.6, 0.7, 0.9, 1.1, 1.2]
    y = rng.normal(size=len(values))
    assert np.dot(trend_weights(values), y) == pytest.approx(-np.polyfit(values, y, 1)[0], abs=1e-12)
    assert sum(trend_weights(values)) == pytest.approx(0.0, abs=1e-12)  # base's cells cancel
    with pytest.raises(ValueError, match="two different"):
        trend_weights([0.7, 0.7])


SWEEP = {"claim": "tau shrinks the fall", "run": "r", "model": "m", "metric": "collapse/x_vs_base_vs_shortest",
         "length": 512, "asks": "less collapse", "margin": 0.01, "margin_reason": "test",
         "sweep": {"parameter": "tau", "identity": 1, "values": {"t-0.5": 0.5, "t-0.9": 0.9, "t-1.1": 1.1}}}  # fmt: skip


def test_a_sweep_becomes_one_answer_per_value_and_a_trend():
    answers = parse_answers([SWEEP], "q", StudyError)
    assert [a.kind for a in answers] == ["value", "value", "value", "trend"]
    assert [a.asks for a in answers] == ["less collapse", "less collapse", "more collapse", "less collapse"]
    assert [a.method for a in answers[:3]] == ["t-0.5", "t-0.9", "t-1.1"]
    assert answers[1].claim == "tau shrinks the fall (tau 0.9)" and answers[3].sweep[2] == ("t-1.1", 1.1)
    assert all(a.margin == 0.01 for a in answers) and answers[3].reads_items and not answers[0].reads_items


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sweep": {"parameter": "tau", "values": {"t-0.5": 0.5}}}, "sweep must be a mapping"),
        ({"sweep": {"parameter": "tau", "identity": 1, "values": {"a": 0.5, "b": 0.5}}}, "not all equal"),
        ({"method": "t-0.5"}, "in place of method"),
        ({"sweep": None, "versus": {"run": "r"}}, "versus must be a mapping of run, model and method"),
    ],
)
def test_a_bad_sweep_or_versus_is_one_line(change, message):
    value = {key: v for key, v in {**SWEEP, **change}.items() if v is not None}
    with pytest.raises(StudyError, match=message) as err:
        parse_answers([value], "q", StudyError)
    assert "\n" not in str(err.value)


def test_the_sweep_table_shows_every_value_row_of_answers_csv():
    answers = pd.read_csv(STUDY / "answers.csv")
    text = (STUDY / "report.md").read_text()
    table = text.split("**Every value of each sweep**", 1)[1].split("\n\n")[1].splitlines()
    header = [c.strip() for c in table[0].strip("|").split(" | ")]
    values = [float(h.split(" ")[-1]) for h in header[2:]]
    cells = 0
    for line in table[2:]:
        question, claim, *rest = (c.strip() for c in line.strip("|").split(" | "))
        for value, cell in zip(values, rest, strict=True):
            match = answers[(answers.kind == "value") & (answers.question == question)
                            & (answers.claim == f"{claim} (tau {value:g})")]  # fmt: skip
            if cell == "—":
                assert match.empty
                continue
            (row,) = match.itertuples(index=False)
            symbol = {"yes": "yes", "opposite": "opposite", "equivalent": "≈", "inconclusive": "?"}[
                row.verdict
            ]
            digits = len(cell.split(" ")[0].split(".")[1])
            assert cell == f"{row.estimate:+.{digits}f} ({symbol})"
            cells += 1
    assert cells == int((answers.kind == "value").sum()) and not math.isnan(values[0])
