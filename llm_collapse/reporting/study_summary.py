"""The study report's opening table: one row per question, its answer at the length that settles it.

A question's ``answer`` (in the questions file; a mapping, or a list of them for a question with several claims)
states one ``claim`` in a few words and names the paired row that tests it: the run, model, method, metric (a
``*_vs_shortest``, ``*_vs_base``, ``*_vs_base_vs_shortest`` or ``*_vs_reference`` row: the same items on both
sides) and length, and the reading that means "yes" (``asks``: one of `ASKS`; ``higher``/``lower`` for a
metric without a collapse or quality direction, such as the per-layer ones). A per-layer row also names its
``layer`` (optional key; the hidden state or attention layer index of the run's rows), and a row of one key
depth or sentence position its ``depth`` (optional key, the run's ``depth`` column: 0 is the start of the
document, 1 its end; the position task's early sentence is 0, its late one 1). Without it the row is the one
over all depths.
The row's test (`llm_collapse.reporting.significance.paired_test`) is Holm-adjusted across the table, like
every table of the reports:

- ``yes``: the change survives and reads as ``asks``;
- ``no: <reading>``: it survives and reads the other way;
- ``no: equivalent within ±m``: it does not survive and the equivalence test against the metric's margin
  (`llm_collapse.metrics.proportions.margin_for`; Holm across the table's equivalence tests) does;
- ``inconclusive``: neither.

Nothing is recomputed: the cells are the run's row (value, 95% interval, N) and its stored test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from llm_collapse.reporting.significance import holm_verdicts, paired_test
from llm_collapse.reporting.tables import Table, fmt_ci, judge, length_text
from llm_collapse.run.results import ITEMS_FILE
from llm_collapse.tasks.registry import metric_info

ASKS = ("more collapse", "less collapse", "better", "worse", "more drift", "less drift", "higher", "lower")
ANSWER_KEYS = ("claim", "run", "model", "method", "metric", "length", "asks")
OPTIONAL_KEYS = ("layer", "depth")
HEADERS = ("question: claim", "answer", "difference [95% CI]", "N", "test, Holm p", "row")


@dataclass(frozen=True)
class Answer:
    """The paired row that answers a question's claim (module docstring)."""

    claim: str
    run: str
    model: str
    method: str
    task: str
    metric: str
    length: int
    asks: str
    layer: int | None = None
    depth: float | None = None

    @property
    def label(self) -> str:
        """How the row is cited: ``run: model / method, task/metric @length`` (and ``layer k``, ``depth d``)."""
        where = "" if self.layer is None else f" layer {self.layer}"
        where += "" if self.depth is None else f" depth {self.depth:g}"
        return (
            f"{self.run}: {self.model} / `{self.method}`, `{self.task}/{self.metric}`{where} "
            f"{length_text(self.length)}"
        )


def parse_answers(value: object, where: str, error: type[Exception]) -> tuple[Answer, ...]:
    """A question's ``answer``: one mapping or a list of them."""
    items = value if isinstance(value, list) else [value]
    return tuple(parse_answer(item, f"{where} answer {i}", error) for i, item in enumerate(items, start=1))


def parse_answer(value: object, where: str, error: type[Exception]) -> Answer:
    """One ``answer`` mapping; every problem is one ``error`` line naming ``where``."""
    example = (
        "e.g. {claim: collapse at 32k, run: tau32k, model: gemma3-270m, method: base, metric: "
        "collapse/global_centroid_distance_vs_shortest, length: 32768, asks: more collapse}"
    )
    if (
        not isinstance(value, dict)
        or not set(ANSWER_KEYS) <= set(value)
        or not set(value) <= set(ANSWER_KEYS + OPTIONAL_KEYS)
    ):
        raise error(
            f"{where} answer must be a mapping with exactly the keys {', '.join(ANSWER_KEYS)} (and optionally "
            f"{', '.join(OPTIONAL_KEYS)}), {example}"
        )
    if not all(isinstance(value[k], str) and value[k].strip() for k in ANSWER_KEYS if k != "length"):
        raise error(f"{where}: every key but length must be a non-empty string, {example}")
    task, _, metric = value["metric"].partition("/")
    if not (task and metric and "_vs_" in metric):
        raise error(f"{where} answer metric {value['metric']!r} must be 'task/<paired metric>', {example}")
    if isinstance(value["length"], bool) or not isinstance(value["length"], int) or value["length"] < 1:
        raise error(f"{where} answer length {value['length']!r} must be a positive integer, {example}")
    if value["asks"] not in ASKS:
        raise error(f"{where} answer asks {value['asks']!r} is not one of {', '.join(ASKS)}")
    layer = value.get("layer")
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
        raise error(
            f"{where} answer layer {layer!r} must be a non-negative integer (a layer index), {example}"
        )
    depth = value.get("depth")
    if depth is not None and (
        isinstance(depth, bool) or not isinstance(depth, int | float) or not 0 <= depth <= 1
    ):
        raise error(f"{where} answer depth {depth!r} must be a number from 0 (start) to 1 (end), {example}")
    return Answer(
        value["claim"],
        value["run"],
        value["model"],
        value["method"],
        task,
        metric,
        value["length"],
        value["asks"],
        layer,
        None if depth is None else float(depth),
    )


def answer_row(root: Path, answer: Answer, error: type[Exception]) -> pd.Series:
    """The one results row an answer cites (``error`` where there is none or several)."""
    frame = pd.read_parquet(root / answer.run / "results.parquet")
    match = frame[
        (frame["model"] == answer.model)
        & (frame["method"] == answer.method)
        & (frame["task"] == answer.task)
        & (frame["metric"] == answer.metric)
        & (frame["length"] == answer.length)
        & (frame["depth"].isna() if answer.depth is None else (frame["depth"] - answer.depth).abs() < 1e-9)
        & (frame["layer"].isna() if answer.layer is None else frame["layer"] == answer.layer)
    ]
    if len(match) != 1:
        raise error(
            f"answer {answer.label}: {len(match)} rows in {answer.run}/results.parquet, need exactly 1"
        )
    return match.iloc[0]


def verdicts(rows: list[pd.Series], asks: list[str]) -> list[tuple[str, str]]:
    """``(answer, "test, Holm p")`` per row, Holm-adjusted across ``rows`` (module docstring; the same
    decision as every report table, `llm_collapse.reporting.significance.holm_verdicts`)."""
    tests = [paired_test(row) for row in rows]
    base = [str(row["metric"]).split("_vs_", 1)[0] for row in rows]
    decided = holm_verdicts([(m, float(r["value"]), t) for m, r, t in zip(base, rows, tests, strict=True)])
    out = []
    for row, metric, test, verdict, wanted in zip(rows, base, tests, decided, asks, strict=True):
        if verdict.kind == "untested":
            out.append(("inconclusive (untested)", "—"))
        elif verdict.kind == "survives":
            sign = "higher" if row["value"] > 0 else "lower"
            words = sign if wanted in ("higher", "lower") else judge(metric, float(row["value"])) or sign
            out.append(("yes" if words == wanted else f"no: {words}", f"{test.kind}, Holm p{_p(verdict.p)}"))
        elif verdict.kind == "equivalent":
            out.append((f"no: equivalent within ±{verdict.margin:g}", f"TOST, Holm p{_p(verdict.q)}"))
        else:
            out.append(("inconclusive", f"{test.kind}, Holm p{_p(verdict.p)}"))
    return out


AGGREGATES = " (aggregates)"
"""Appended to a row whose run kept no per-item rows (no items.parquet): its test reads the paired rows it stored."""


def summary_table(root: Path, questions: list, error: type[Exception]) -> Table | None:
    """One row per claim of the questions' ``answer`` (None when no question has one)."""
    claims = [(q, answer) for q in questions for answer in q.answers]
    if not claims:
        return None
    rows = [answer_row(root, answer, error) for _, answer in claims]
    read = verdicts(rows, [answer.asks for _, answer in claims])
    body = []
    for (q, answer), row, (reading, test) in zip(claims, rows, read, strict=True):
        digits = metric_info(answer.metric).digits
        body.append(
            (
                f"{q.id}: {answer.claim}",
                reading,
                fmt_ci(float(row["value"]), float(row["ci_low"]), float(row["ci_high"]), digits),
                str(int(row["n"])),
                test,
                answer.label + ("" if (root / answer.run / ITEMS_FILE).is_file() else AGGREGATES),
            )
        )
    return Table(HEADERS, tuple(body), (False, False, True, True, False, False))


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"={p:.3f}"
