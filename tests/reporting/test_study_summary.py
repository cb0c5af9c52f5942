"""The study report's answers table: every cell of the committed reports/study/report.md checked against the
row it cites (value, interval, N), and its verdict recomputed by hand (Holm across the table, TOST margins)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as sps

from llm_collapse.reporting.study import StudyError, load_questions
from llm_collapse.reporting.study_summary import parse_answer

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "reports" / "study"
ROW = re.compile(
    r"^(?P<run>[\w-]+): (?P<model>[\w.-]+) / `(?P<method>[^`]+)`, `(?P<task>[\w-]+)/(?P<metric>[^`]+)`(?: layer (?P<layer>\d+))?(?: depth (?P<depth>[\d.]+))? @(?P<length>\w+)(?P<aggregates> \(aggregates\))?$"
)
Z = sps.norm.ppf(0.975)
MARGINS = {"pairwise_cosine": 0.01, "centroid_distance": 0.01, "global_centroid_distance": 0.01,
           "centroid_cosine": 0.01, "acc@1": 0.10, "knn_accuracy": 0.10, "knn_cross_accuracy": 0.10}  # fmt: skip
# the reading of a positive change, per metric (the registry's directions, written out independently)
UP = {"global_centroid_distance": "less collapse", "centroid_distance": "less collapse",
      "within_length_sq_spread": "less collapse", "global_centroid_sq_distance": "less collapse",
      "pairwise_cosine": "more collapse", "centroid_cosine": "more collapse", "acc@1": "better",
      "knn_accuracy": "better", "knn_cross_accuracy": "better", "cosine_to_fp32": "less drift"}  # fmt: skip
DOWN = {"less collapse": "more collapse", "more collapse": "less collapse", "better": "worse",
        "less drift": "more drift", "higher": "lower"}  # fmt: skip
# metrics without a collapse or quality direction read as higher/lower (the per-layer ones)
UP |= {"attention_entropy_normalized": "higher", "attention_entropy": "higher", "hf_ratio": "higher",
       "hf_ratio_length_free": "higher"}  # fmt: skip


def _answers_table() -> list[list[str]]:
    text = (STUDY / "report.md").read_text()
    section = text.split("\n## Answers\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def _length(text: str) -> int:
    return int(text[:-1]) * 1024 if text.endswith("k") else int(text)


def _holm(p: list[float]) -> list[float]:
    """Holm's step-down by hand: the i-th smallest of m times (m - i), running maximum, capped at 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [math.nan] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, p[i] * (len(p) - rank)))
        out[i] = running
    return out


def _reading(metric: str, value: float) -> str:
    return UP[metric] if value > 0 else DOWN[UP[metric]]


@pytest.mark.skipif(not (STUDY / "report.md").is_file(), reason="no committed study report")
def test_every_answer_cell_matches_the_row_it_cites():
    table = _answers_table()
    _, _, questions = load_questions(ROOT / "experiments" / "study" / "questions.yaml")
    asks = {f"{q.id}: {a.claim}": a.asks for q in questions for a in q.answers}
    assert table and len(table) == len(asks)
    cited = []
    for claim, answer, interval, n, test, row in table:
        where = ROW.match(row.replace("\\|", "|"))
        assert where, row
        assert bool(where["aggregates"]) != (STUDY / where["run"] / "items.parquet").is_file(), row
        frame = pd.read_parquet(STUDY / where["run"] / "results.parquet")
        match = frame[(frame.model == where["model"]) & (frame.method == where["method"])
                      & (frame.task == where["task"]) & (frame.metric == where["metric"])
                      & (frame.length == _length(where["length"]))
                      & (frame.depth.isna() if where["depth"] is None else frame.depth == float(where["depth"]))
                      & (frame.layer.isna() if where["layer"] is None else frame.layer == int(where["layer"]))]  # fmt: skip
        assert len(match) == 1, row
        cited.append((claim, answer, interval, n, test, match.iloc[0]))
    # p-values: the stored paired test, else a Wald test from the paired interval
    p = [r.p_value if math.isfinite(r.p_value) else 2 * sps.norm.sf(abs(r.value) / ((r.ci_high - r.ci_low) / (2 * Z)))
         for *_, r in cited]  # fmt: skip
    holm = _holm(p)
    for (claim, answer, interval, n, test, r), adjusted in zip(cited, holm, strict=True):
        numbers = [float(x) for x in re.findall(r"-?\d+\.\d+", interval)]
        digits = len(interval.split(" ")[0].split(".")[1])
        assert numbers == [round(v, digits) + 0.0 for v in (r.value, r.ci_low, r.ci_high)], claim
        assert int(n) == r.n, claim
        base = r.metric.split("_vs_", 1)[0]
        if adjusted <= 0.05:
            words = _reading(base, r.value)
            assert answer == ("yes" if words == asks[claim] else f"no: {words}"), claim
            assert test.endswith("Holm p<0.001" if adjusted < 0.001 else f"Holm p={adjusted:.3f}"), claim
        else:
            assert answer.startswith(("inconclusive", "no: equivalent within")), claim
            if answer.startswith("no: equivalent"):
                assert f"±{MARGINS[base]:g}" in answer and test.startswith("TOST"), claim


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
        {"model": "m", "method": "base", "task": "position", "metric": "acc@1_vs_base", "length": 2048,
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
