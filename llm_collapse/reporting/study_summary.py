"""The study's answers: one row per claim, its verdict within its question's family, ``answers.csv`` and its table.

A question's ``answer`` (in the questions file; a mapping, or a list of them) states one ``claim`` in a few words
and names the paired row that tests it: the run, model, method, metric (a ``*_vs_shortest``, ``*_vs_base``,
``*_vs_base_vs_shortest`` or ``*_vs_reference`` row: the same items on both sides), length, the direction that
means "yes" (``asks``: one of `llm_collapse.records.claims.ASKS`; ``higher``/``lower`` for a metric without a collapse or quality
direction), and optionally ``layer``, ``depth`` (0 the start of the document, 1 its end) and the equivalence
``margin`` with its ``margin_reason``. A claim the cited run declared in its config before it ran (the run's
``claims``, recorded in run.json) is *declared*; any other is *exploratory*, and the table says so.

Verdicts (the four outcomes of a directional claim), each from the row's `llm_collapse.metrics.contrasts.Contrast`
(read as `llm_collapse.reporting.reread` leaves it) with Holm's correction at 0.05 across the question's
*family* (the question's ``family`` key, else its id: adding a claim to one question changes no verdict of
another):

- ``yes``: the change survives in the direction asked;
- ``no, the opposite``: it survives the other way;
- ``no, equivalent within ±m``: it does not survive and its TOST against the declared margin does (Holm across
  the family's equivalence tests);
- ``inconclusive``: neither (always, where no margin is declared).

Intervals are unadjusted 95% intervals. ``answers.csv`` (`ANSWER_COLUMNS`) holds every number the table shows;
the table is rendered from the file as written.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from llm_collapse.metrics.contrasts import Contrast
from llm_collapse.metrics.stats import holm_adjust
from llm_collapse.records.results import ITEMS_FILE
from llm_collapse.reporting.answer_spec import Answer
from llm_collapse.reporting.blocks import Block, Bullets, Heading, Paragraph
from llm_collapse.reporting.frames import load_run
from llm_collapse.reporting.item_contrasts import (
    Cell,
    Items,
    combine,
    contrast_terms,
    merged,
    trend_terms,
)
from llm_collapse.reporting.names import method_cell
from llm_collapse.reporting.significance import ALPHA, equivalence_testable, p_text, paired_test
from llm_collapse.reporting.tables import Table, fmt_ci, judge, length_text
from llm_collapse.tasks.registry import metric_info

ANSWERS_FILE = "answers.csv"
ANSWER_COLUMNS = (
    "question", "claim", "kind", "run", "model", "method", "metric", "length", "depth", "layer", "parameter",
    "value", "sweep", "versus", "direction", "verdict", "estimate", "ci_low", "ci_high", "n", "test", "p", "p_holm",
    "p_equivalence", "p_equivalence_holm", "family", "margin", "margin_reason", "declared", "per_item",
)  # fmt: skip
"""The columns of ``answers.csv``: ``kind`` (`llm_collapse.reporting.answer_spec.KINDS`); ``parameter`` and
``value`` of a sweep's value rows, ``sweep`` the claim of the sweep a value or trend row belongs to; ``versus`` the run/model/method a versus row subtracts; p and p_holm the
difference test's, p_equivalence(_holm) the TOST's (NaN without a margin or where the difference survives);
``per_item``: the answer's run kept items.parquet."""
VERDICTS = {
    "yes": "the change survives Holm's correction in the direction the claim asks",
    "no, the opposite": "it survives the other way",
    "no, equivalent within ±m": "it does not survive and the TOST against the declared margin m does",
    "inconclusive": "neither (always, where no margin is declared)",
}
"""The four outcomes of a directional claim, for the legend."""
HEADERS = ("question", "claim", "answer", "estimate [95% CI]", "N", "test, Holm p", "claim was", "source")
"""The answers table's columns (a run report's: ``family`` first, ``row`` last)."""
AGGREGATES = " (aggregates)"
"""Appended to a source whose run kept no per-item rows: its test reads the paired rows the run stored."""


class _Runs:
    """The runs an answers table cites, each loaded once (`load_run`: read with today's procedures)."""

    def __init__(self, root: Path, error: type[Exception]):
        self.root, self.error, self._loaded = root, error, {}

    def load(self, run: str) -> tuple[pd.DataFrame, list]:
        if run not in self._loaded:
            if not (self.root / run / "results.parquet").is_file():
                raise self.error(f"answer cites run {run!r}, which has no results.parquet under {self.root}")
            results, record, _ = load_run(self.root / run)
            claims = record.config.get("claims") if isinstance(record.config, dict) else None
            self._loaded[run] = (results, [c for c in claims or [] if isinstance(c, dict)])
        return self._loaded[run]

    def row(self, answer: Answer, *, missing_ok: bool = False) -> pd.Series | None:
        """The one results row an answer cites (``error`` where there is none or several; None where there is none
        and ``missing_ok``: a run's declared claim on a cell the run could not measure reads untested)."""
        frame, _ = self.load(answer.run)
        match = frame[
            (frame["model"] == answer.model)
            & (frame["method"] == answer.method)
            & (frame["task"] == answer.task)
            & (frame["metric"] == answer.metric)
            & (frame["length"] == answer.length)
            & (
                frame["depth"].isna()
                if answer.depth is None
                else (frame["depth"] - answer.depth).abs() < 1e-9
            )
            & (frame["layer"].isna() if answer.layer is None else frame["layer"] == answer.layer)
        ]
        if len(match) == 0 and missing_ok:
            return None
        if len(match) != 1:
            raise self.error(
                f"answer {answer.label}: {len(match)} rows in {answer.run}/results.parquet, need exactly 1"
            )
        return match.iloc[0]

    def declared(self, answer: Answer) -> bool:
        return any(answer.matches(claim) for claim in self.load(answer.run)[1])


def answer_row(root: Path, answer: Answer, error: type[Exception]) -> pd.Series:
    """The one results row an answer cites, as loaded (`load_run`); ``error`` where there is none or several."""
    return _Runs(root, error).row(answer)


def read_family(answers: list[Answer], contrasts: list[Contrast | None]) -> list[dict]:
    """Verdict, p, Holm p and the TOST's per answer of one family (module docstring)."""
    p_holm = holm_adjust([c.p if c is not None else np.nan for c in contrasts])
    p_eq = [
        c.equivalence_p(a.margin)
        if c is not None and a.margin is not None and not p <= ALPHA and equivalence_testable(a.metric, c)
        else math.nan
        for a, c, p in zip(answers, contrasts, p_holm, strict=True)
    ]
    eq_holm = holm_adjust(p_eq)
    out = []
    for answer, contrast, p, q, q_holm in zip(answers, contrasts, p_holm, p_eq, eq_holm, strict=True):
        if contrast is None or not math.isfinite(p):
            verdict = "inconclusive"
        elif p <= ALPHA:
            words = _direction(answer, contrast.estimate)
            verdict = "yes" if words == answer.asks else "opposite"
        elif math.isfinite(q_holm) and q_holm <= ALPHA:
            verdict = "equivalent"
        else:
            verdict = "inconclusive"
        out.append(dict(verdict=verdict, p_holm=p, p_equivalence=q, p_equivalence_holm=q_holm))
    return out


def _direction(answer: Answer, estimate: float) -> str:
    sign = "higher" if estimate > 0 else "lower"
    if answer.asks in ("higher", "lower"):
        return sign
    return judge(answer.metric.split("_vs_", 1)[0], estimate) or sign


def answers_frame(
    root: Path, claims: list[tuple[str, str, Answer]], error: type[Exception], *, untested: bool = False
) -> pd.DataFrame | None:
    """One row per ``(question, family, answer)``, `ANSWER_COLUMNS`, each answer's run a folder under ``root``
    (None without claims). A claim whose row the run lacks is ``error``, or with ``untested`` (a run's own
    declared claims) inconclusive with no test."""
    if not claims:
        return None
    runs, items = _Runs(root, error), Items(root)
    rows = [None if answer.reads_items else runs.row(answer, missing_ok=untested) for *_, answer in claims]
    contrasts = [
        items_contrast(items, answer, error)
        if answer.reads_items
        else (None if row is None else paired_test(row))
        for (*_, answer), row in zip(claims, rows, strict=True)
    ]
    read: list[dict | None] = [None] * len(claims)
    for family in dict.fromkeys(family for _, family, _ in claims):
        members = [i for i, (_, f, _) in enumerate(claims) if f == family]
        for i, reading in zip(members, read_family([claims[i][2] for i in members],
                                                   [contrasts[i] for i in members]), strict=True):  # fmt: skip
            read[i] = reading
    out = []
    for (question, family, answer), row, contrast, reading in zip(claims, rows, contrasts, read, strict=True):
        estimate = (
            contrast.estimate if contrast is not None else (math.nan if row is None else float(row["value"]))
        )
        out.append(
            dict(
                question=question,
                claim=answer.claim,
                kind=answer.kind,
                run=answer.run,
                model=answer.model,
                method=answer.method,
                metric=f"{answer.task}/{answer.metric}",
                length=answer.length,
                depth=math.nan if answer.depth is None else answer.depth,
                layer=math.nan if answer.layer is None else answer.layer,
                parameter=answer.parameter,
                value=answer.sweep[0][1] if answer.kind == "value" else math.nan,
                sweep=answer.sweep_claim,
                versus="/".join(answer.versus) if answer.versus else "",
                direction=answer.asks,
                verdict=reading["verdict"],
                estimate=estimate,
                ci_low=math.nan if contrast is None else contrast.low,
                ci_high=math.nan if contrast is None else contrast.high,
                n=int(row["n"]) if row is not None else (contrast.n if contrast is not None else 0),
                test="" if contrast is None else contrast.test,
                p=math.nan if contrast is None else contrast.p,
                p_holm=reading["p_holm"],
                p_equivalence=reading["p_equivalence"],
                p_equivalence_holm=reading["p_equivalence_holm"],
                family=family,
                margin=math.nan if answer.margin is None else answer.margin,
                margin_reason=answer.margin_reason,
                declared=runs.declared(answer),
                per_item=(root / answer.run / ITEMS_FILE).is_file(),
            )  # fmt: skip
        )
    return pd.DataFrame(out, columns=list(ANSWER_COLUMNS))


def items_contrast(items: Items, answer: Answer, error: type[Exception]) -> Contrast:
    """A trend or versus answer, computed from the runs' items.parquet (`llm_collapse.reporting.item_contrasts`);
    ``error`` where the runs lack the per-item values it needs."""
    quantity, _, rest = answer.metric.partition("_vs_")
    suffix = "_vs_" + rest
    cell = Cell(answer.run, answer.model, answer.method, answer.task, answer.length, answer.depth)
    shortest = items.shortest_length(cell, quantity)
    if answer.layer is not None or shortest is None:
        raise error(
            f"answer {answer.label}: {answer.run}/items.parquet has no per-item {quantity} to compute it from"
        )
    if answer.kind == "trend":
        cells = [Cell(answer.run, answer.model, method, answer.task, answer.length, answer.depth)
                 for method, _ in answer.sweep]  # fmt: skip
        terms = trend_terms(cells, [value for _, value in answer.sweep], suffix, shortest)
    else:
        run, model, method = answer.versus
        other = Cell(run, model, method, answer.task, answer.length, answer.depth)
        other_shortest = items.shortest_length(other, quantity)
        if other_shortest is None:
            raise error(
                f"answer {answer.label}: {run}/items.parquet has no per-item {quantity} of {model}/{method}"
            )
        theirs = [(-w, c) for w, c in contrast_terms(other, suffix, other_shortest)]
        terms = merged(contrast_terms(cell, suffix, shortest) + theirs)
    contrast = combine(items, terms, quantity)
    if contrast is None:
        raise error(
            f"answer {answer.label}: the cells it combines do not hold the same items in items.parquet"
        )
    return contrast


def answers_csv(frame: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """``answers.csv``'s text and the frame read back from it (the table is rendered from the file's values)."""
    import io

    text = frame.to_csv(index=False, float_format="%.10g", lineterminator="\n")
    return text, pd.read_csv(io.StringIO(text))


def answers_table(frame: pd.DataFrame, *, linked: bool = True) -> Table:
    """The Markdown/HTML table of ``answers.csv``'s rows: one line per claim, its source a link to the run's
    report (``linked``; in a run's own report, the row it reads)."""
    body = []
    for row in frame.itertuples(index=False):
        if row.kind == "value":
            continue  # in `sweep_table`
        task, metric = row.metric.split("/", 1)
        digits = metric_info(metric).digits
        equivalent = row.verdict == "equivalent"
        p = row.p_equivalence_holm if equivalent else row.p_holm
        test = (
            f"TOST, Holm p{p_text(p)}"
            if equivalent
            else (f"{row.test}, Holm p{p_text(p)}" if row.test else "untested")
        )
        if linked:  # run ids stay in answers.csv; the table links each row's run report
            source = f"[report]({row.run}/report.md)"
            if isinstance(row.versus, str) and row.versus and row.versus.split("/")[0] != row.run:
                source += f" − [report]({row.versus.split('/')[0]}/report.md)"
        else:
            where = "" if pd.isna(row.depth) else f" depth {row.depth:g}"
            where += "" if pd.isna(row.layer) else f" layer {int(row.layer)}"
            source = f"{row.model} / {method_cell(row.method)}, `{row.metric}`{where} {length_text(int(row.length))}"
        source += "" if row.per_item else AGGREGATES
        body.append(
            (
                row.question,
                row.claim,
                _answer_words(row),
                fmt_ci(row.estimate, row.ci_low, row.ci_high, digits),
                str(int(row.n)),
                test,
                "declared" if row.declared else "exploratory",
                source,
            )
        )
    return Table(HEADERS, tuple(body), (False, False, False, True, True, False, False, False))


def _answer_words(row) -> str:
    if row.verdict == "yes":
        return "yes"
    if row.verdict == "opposite":
        other = "higher" if row.estimate > 0 else "lower"
        words = (
            other
            if row.direction in ("higher", "lower")
            else judge(row.metric.split("/", 1)[1].split("_vs_")[0], row.estimate)
        )
        return f"no, the opposite: {words or other}"
    if row.verdict == "equivalent":
        return f"no, equivalent within ±{row.margin:g}"
    return "inconclusive"


def families_text(frame: pd.DataFrame) -> str:
    """One line naming each family and how many claims it holds."""
    counts = frame.groupby("family", sort=False).size()
    return "; ".join(f"{family} ({count})" for family, count in counts.items())


SWEEP_SYMBOLS = {"yes": "yes", "opposite": "opposite", "equivalent": "≈", "inconclusive": "?"}
"""How a sweep table's cell names its value's verdict."""


def sweep_table(frame: pd.DataFrame) -> Table | None:
    """Every value of every sweep: one line per swept claim (``answers.csv``'s ``sweep`` column), one column per
    parameter value, each cell the value row's estimate with its verdict (None without sweeps)."""
    values = frame[frame["kind"] == "value"]
    if values.empty:
        return None
    parameters = sorted(values["parameter"].unique())
    columns = sorted({(p, v) for p, v in zip(values["parameter"], values["value"], strict=True)})
    body = []
    for (question, claim), rows in values.groupby(["question", "sweep"], sort=False):
        digits = metric_info(rows["metric"].iloc[0].split("/", 1)[1]).digits
        cells = []
        for parameter, value in columns:
            hit = rows[(rows["parameter"] == parameter) & (rows["value"] == value)]
            row = hit.iloc[0] if len(hit) else None
            cells.append("—" if row is None else f"{row.estimate:+.{digits}f} ({SWEEP_SYMBOLS[row.verdict]})")
        body.append((question, claim, *cells))
    label = (lambda p, v: f"{v:g}") if len(parameters) == 1 else (lambda p, v: f"{p} {v:g}")
    title = (
        f"claim (its contrast at each {parameters[0]})" if len(parameters) == 1 else "claim (at each value)"
    )
    headers = ("question", title, *(label(p, v) for p, v in columns))
    return Table(headers, tuple(body), (False, False, *([True] * len(columns))))


def family_table(frame: pd.DataFrame) -> Table:
    """The answers counted per family and verdict (every row of ``answers.csv``, sweep values included): the
    study's findings at a glance, and the README's."""
    order = ("yes", "opposite", "equivalent", "inconclusive")
    body = []
    for family, rows in frame.groupby("family", sort=False):
        counts = rows["verdict"].value_counts()
        declared = int(rows["declared"].astype(bool).sum())
        body.append((str(family), str(len(rows)), *(str(int(counts.get(v, 0))) for v in order),
                     f"{declared} of {len(rows)}"))  # fmt: skip
    headers = ("family", "claims", "yes", "no, the opposite", "no, equivalent", "inconclusive", "declared")
    return Table(headers, tuple(body), (False, True, True, True, True, True, False))


def claims_section(answers: pd.DataFrame | None) -> list[Block]:
    """The report's first section where its runs declared claims: their verdicts, from answers.csv."""
    if answers is None:
        return []
    legend = "; ".join(f"**{name}**: {meaning}" for name, meaning in VERDICTS.items())
    return [
        Heading(2, "Claims"),
        Paragraph(
            "The claims the run's config declared before it ran, each read from the paired row it names."
        ),
        answers_table(answers, linked=False),
        Bullets(
            (
                f"Verdicts, Holm's correction at 0.05 within each family: {legend}.",
                f"Families (claims): {families_text(answers)}. Intervals are unadjusted 95% intervals; p-values "
                f"are Holm-adjusted within the family. Every number: `{ANSWERS_FILE}`.",
            )
        ),
    ]
