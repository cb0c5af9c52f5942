"""A study report: several comparison runs, read through a list of questions (``python -m llm_collapse.study``).

The questions file (YAML; the project's is ``experiments/study/questions.yaml``) names, per question, the run
folder under the study root, the command that made it, the (task, metric) pairs that answer it, optional
model/method/layer filters (``layers``: one list for every model, or a mapping from model to its list,
since models differ in depth and layer types), tasks to split by depth (``by_depth``: the position task's
early/late), a baseline method, figures from the run's ``figures/`` (``run/name`` for one of the
question's ``extra_runs``), CSV tables under the study root that a committed command wrote (``outputs``: a
``.csv`` rendered as a table as it is, a ``.png`` as a figure, after the question's metric tables; their command
belongs in ``command``) and an optional
``reading`` (the authors' wording; it may quote no number: every number in the report comes from the results). The file's ``intro`` and each ``reading`` are one paragraph (a
string) or bullets (a list of strings): at most six bullets, each, like a paragraph, at most 600 characters,
so that the report reads in five minutes (issue 44). Each question
becomes one section: the command, its figures, and per metric one table of
``value [CI]`` by length with the change from the shortest to the longest length and, with a baseline, the
difference to the baseline at the longest length. Each change is tested (paired where the run has the paired
row, `llm_collapse.reporting.significance`), Holm-adjusted across the table, and read ("more collapse",
"better") only where it survives. The study writes ``report.md`` and ``report.html`` into the study root,
atomically.

Decisions:
    - Nothing is recomputed: tables read ``results.parquet`` of each run, so the study report can never
      disagree with the run reports.
    - A missing run, metric or figure is an error (one line), not a silently shorter report; so is a malformed
      questions file (`load_questions` checks every key and value; the YAML itself is read by
      `llm_collapse.utils.yamlfile`, like ``compare --config``).
    - Wording has a size limit, checked when the file is read (`READING_MAX_BULLETS` bullets of at most
      `READING_MAX_CHARS` characters, the same limit for a one-paragraph string): a reading over it is an
      error, not a long report. A string reading renders as its own paragraph under a bold "Reading." line, so
      the limit on the string is the limit on the rendered paragraph.
    - report.html links the runs' PNGs (``run/figures/name``, relative to the study root) instead of
      inlining them like a run report does: the study report lives beside its runs, and with every run's
      figures inlined it neared 2 MB (1.9 MB with twelve runs), the project's limit for a tracked file.
    - Tiny random models are refused: a study is about real models only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pandas as pd

from llm_collapse.errors import UserError
from llm_collapse.records.record import RUN_FILE, RunRecord, RunRecordError
from llm_collapse.reporting.answer_spec import Answer, parse_answers
from llm_collapse.reporting.blocks import Bullets, Heading, Image, Paragraph, render_html, render_markdown
from llm_collapse.reporting.figures import position_label
from llm_collapse.reporting.frames import (
    VS_BASE,
    VS_SHORTEST,
    is_contrast,
    load_runs,
    metric_info,
    overall_rows,
    sorted_methods,
)
from llm_collapse.reporting.names import method_cell, method_names, showing
from llm_collapse.reporting.significance import change_test, mark_survivors, read_changes, table_legend
from llm_collapse.reporting.study_summary import (
    ANSWERS_FILE,
    VERDICTS,
    answers_csv,
    answers_frame,
    answers_table,
    families_text,
    family_table,
    sweep_table,
)
from llm_collapse.reporting.tables import Table, fmt_ci, judge, length_text
from llm_collapse.utils.paths import display_path
from llm_collapse.utils.yamlfile import read_yaml_mapping, short_repr, type_name

logger = logging.getLogger(__name__)

__all__ = ["Question", "StudyError", "build_study", "load_questions"]


SURVIVOR_LEGEND = (
    "Bold: the paired difference is non-zero after Holm's correction at 0.05 across every cell of this table "
    "(the run's stored test where there is one: exact McNemar for 0/1 outcomes, a paired t-test for distances "
    "to the global centroid; else a Wald test from the paired 95% interval)."
)


def summary_legend(families: str) -> list:
    """The lines under the answers table: the four verdicts, the families, what the columns mean."""
    verdicts = "; ".join(f"**{name}**: {meaning}" for name, meaning in VERDICTS.items())
    return [
        Paragraph(f"Verdicts, Holm's correction at 0.05 within each question's family: {verdicts}."),
        Paragraph(
            f"Families (claims): {families}. Intervals are unadjusted 95% intervals; p-values are Holm-adjusted "
            "within the family. 'declared': the run's config stated the claim (row, direction, margin) before it "
            "ran; 'exploratory': the claim was written after its data. '(aggregates)': the run kept no per-item "
            f"rows, so its test reads the paired row it stored. Every number: `{ANSWERS_FILE}`."
        ),
    ]


SWEEP_INTRO = (
    "**Every value of each sweep** (the trend rows above; each cell the claim's contrast at that value, its verdict "
    "in the same family: yes, opposite, ≈ equivalent within the margin, ? inconclusive; below the identity value "
    "a value asks what its claim states, above it the opposite):"
)


class StudyError(UserError, ValueError):
    """A questions file or study folder that cannot make a report; the message is one line."""


@dataclass(frozen=True)
class Question:
    """One question of the study (see the module docstring for the fields' meaning)."""

    id: str
    title: str
    run: str
    command: str
    metrics: tuple[tuple[str, str], ...]
    models: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    baseline: str | None = None
    layers: tuple[str, ...] | dict[str, tuple[str, ...]] = ()
    figures: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()  # a command's CSV tables and PNG figures under the study root
    reading: str | tuple[str, ...] = ""  # one paragraph, or bullets
    by_depth: tuple[str, ...] = ()
    extra_runs: tuple[str, ...] = field(default=())
    answers: tuple[Answer, ...] = ()
    family: str = ""  # Holm family of its answers; the id when empty

    def __post_init__(self):
        if not self.family:
            object.__setattr__(self, "family", self.id)


_TOP_KEYS = ("title", "intro", "takeaway", "questions", "overview")
_OVERVIEW_KEYS = ("run", "model", "metric", "methods")
_REQUIRED = ("id", "title", "run", "command", "metrics")
_STRING_LISTS = ("models", "methods", "figures", "outputs", "by_depth", "extra_runs")
_QUESTION_KEYS = (*_REQUIRED, *_STRING_LISTS, "baseline", "layers", "reading", "answer", "family")
_NAMED_LAYERS = ("first", "middle", "last")
READING_MAX_BULLETS = 6
READING_MAX_CHARS = 600
_QUESTION_EXAMPLE = (
    "e.g. 'questions: [{id: q1, title: Does it collapse?, run: sweep, command: ..., "
    "metrics: [collapse/pairwise_cosine]}]'"
)


def load_questions(path: Path | str) -> tuple[str, str | tuple[str, ...], list[Question]]:
    """Reads the questions file: ``(title, intro, questions)``; ``intro`` is a string or a tuple of bullets.

    Every key and value is checked here, so a malformed file is one `StudyError` line naming the file, the
    question and the key, never a traceback later. Decisions: unknown keys are refused (a typo such as
    ``baselin`` would otherwise drop a filter silently); values are not coerced (``title: [1]`` or
    ``models: minilm`` are errors, not ``"[1]"`` or the letters of ``minilm``); an empty value (``models:``)
    means the key's default.
    """
    what = f"questions file {str(path)!r}"
    data = read_yaml_mapping(
        path, what=what, example=f"title, intro and questions, {_QUESTION_EXAMPLE}", error=StudyError
    )
    _no_unknown_keys(data, _TOP_KEYS, what)
    title = _optional_string(data, "title", what)
    intro = _wording(data.get("intro"), what, "intro")
    items = data.get("questions")
    if items is None or items == []:
        raise StudyError(f"{what} has no questions; list them under 'questions:' ({_QUESTION_EXAMPLE})")
    if not isinstance(items, list):
        raise StudyError(
            f"{what} value questions: {_short(items)} ({type_name(items)}) must be a list of questions, each a "
            "mapping ('- id: ...' lines)"
        )
    questions = [_question(item, f"{what} question {i}") for i, item in enumerate(items, start=1)]
    return title or "Study", intro, questions


@dataclass(frozen=True)
class Overview:
    """The figure after the answers table: ``metric`` (``task/metric``) of ``model`` in ``run`` against length
    for ``methods``, beside their method x length interaction (`llm_collapse.reporting.figures.plot_overview`)."""

    run: str
    model: str
    task: str
    metric: str
    methods: tuple[str, ...]


def load_takeaway(path: Path | str) -> str | tuple[str, ...]:
    """The questions file's optional ``takeaway``: the plain-language paragraph above the answers table."""
    what = f"questions file {str(path)!r}"
    value = read_yaml_mapping(path, what=what, example=_QUESTION_EXAMPLE, error=StudyError).get("takeaway")
    return _wording(value, what, "takeaway")


def load_overview(path: Path | str) -> Overview | None:
    """The questions file's optional ``overview`` mapping (keys `_OVERVIEW_KEYS`); one `StudyError` line if bad."""
    what = f"questions file {str(path)!r}"
    value = read_yaml_mapping(path, what=what, example=_QUESTION_EXAMPLE, error=StudyError).get("overview")
    if value is None:
        return None
    example = "e.g. {run: minilm, model: minilm, metric: collapse/global_centroid_distance, methods: [base, tempscale-0.5]}"
    if not isinstance(value, dict) or sorted(value) != sorted(_OVERVIEW_KEYS):
        raise StudyError(
            f"{what} overview must be a mapping with the keys {', '.join(_OVERVIEW_KEYS)}, {example}"
        )
    methods = value["methods"]
    task, _, metric = str(value["metric"]).partition("/")
    if not (
        isinstance(methods, list) and methods and all(isinstance(m, str) for m in methods) and task and metric
    ):
        raise StudyError(
            f"{what} overview needs metric 'task/metric' and a non-empty list of methods, {example}"
        )
    return Overview(str(value["run"]), str(value["model"]), task, metric, tuple(methods))


def _overview_blocks(root: Path, overview: Overview) -> list:
    """The overview figure, drawn into ``root/figures/overview.png`` from the run's rows."""
    from llm_collapse.reporting.figures import plot_overview, save_figure

    data = load_runs([root / overview.run])
    rows = overall_rows(data.results)
    rows = rows[(rows["model"] == overview.model) & (rows["task"] == overview.task)]
    missing = sorted(set(overview.methods) - set(rows.loc[rows["metric"] == overview.metric, "method"]))
    if missing:
        raise StudyError(
            f"overview: {overview.run} has no {overview.metric} rows of {overview.model} for {missing}"
        )
    label = metric_info(overview.metric).label
    title = f"{overview.model}: {label}, run {overview.run}"
    caption = (
        f"Left: {label} against length per method (bands: 95% CIs); right: each method's interaction with "
        "length, (method − base) at a length minus the same at the shortest, paired over the same texts (0: the "
        "method does not change what length does)."
    )
    path = root / "figures" / "overview.png"
    save_figure(plot_overview(rows, overview.metric, overview.methods, title), path)
    return [Image(path, "figures/overview.png", "overview", caption)]  # the title is drawn in the PNG


def _question(item: object, where: str) -> Question:
    if not isinstance(item, dict) or not all(isinstance(k, str) for k in item):
        raise StudyError(
            f"{where} is {_short(item)} ({type_name(item)}), not a mapping; write each question as keys "
            f"under '- ', e.g. '- id: q1' then 'title: ...' indented below it"
        )
    _no_unknown_keys(item, _QUESTION_KEYS, where)
    missing = [key for key in _REQUIRED if key not in item]
    if missing:
        raise StudyError(f"{where} lacks the key {missing[0]!r}; every question needs {', '.join(_REQUIRED)}")
    for key in ("id", "title", "run", "command"):
        if not isinstance(item[key], str) or not item[key].strip():
            _wrong(where, key, item[key], "a non-empty string (quote a number: '2024')")
    if "family" in item and not (isinstance(item["family"], str) and item["family"].strip()):
        _wrong(
            where, "family", item["family"], "a non-empty string (questions sharing it share a Holm family)"
        )
    metrics = item["metrics"]
    if (
        not isinstance(metrics, list)
        or not metrics
        or not all(isinstance(m, str) and all(m.partition("/")[::2]) for m in metrics)
    ):
        _wrong(
            where,
            "metrics",
            metrics,
            "a non-empty list of 'task/metric' strings, e.g. [collapse/pairwise_cosine]",
        )
    lists = {}
    for key in _STRING_LISTS:
        value = item.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            _wrong(where, key, value, "a list of strings, e.g. [a, b]")
        lists[key] = tuple(value or ())
    if item.get("baseline") is not None and not isinstance(item["baseline"], str):
        _wrong(where, "baseline", item["baseline"], "a string")
    return Question(
        id=item["id"],
        title=item["title"],
        run=item["run"],
        command=item["command"],
        metrics=tuple(tuple(m.split("/", 1)) for m in metrics),
        baseline=item.get("baseline"),
        layers=_layers(item.get("layers"), where),
        reading=_wording(item.get("reading"), where, "reading"),
        answers=() if item.get("answer") is None else parse_answers(item["answer"], where, StudyError),
        family=item.get("family", ""),
        **lists,
    )


def _wording(value, where: str, key: str) -> str | tuple[str, ...]:
    """``intro`` / ``reading``: one paragraph (a string) or bullets (a list of strings), within the size limit.

    Line breaks inside a string or bullet become spaces (a folded YAML block and a literal one read the same);
    an empty value means none. Over `READING_MAX_BULLETS` bullets, an empty or non-string bullet, or a
    paragraph or bullet over `READING_MAX_CHARS` characters is one `StudyError` line.
    """
    if value is None or value == "" or value == []:
        return ""
    limit = f"at most {READING_MAX_BULLETS} bullets of at most {READING_MAX_CHARS} characters each"
    if isinstance(value, str):
        text = _one_line(value)
        if len(text) > READING_MAX_CHARS:
            raise StudyError(
                f"{where} value {key}: a paragraph of {len(text)} characters, over {READING_MAX_CHARS}; shorten it "
                f"or write it as a list of bullets ({limit}), starting {_short(text)}"
            )
        return text
    if not isinstance(value, list):
        _wrong(where, key, value, f"a string or a list of strings ({limit})")
    if len(value) > READING_MAX_BULLETS:
        raise StudyError(
            f"{where} value {key}: {len(value)} bullets, over {READING_MAX_BULLETS}; merge or drop some ({limit})"
        )
    bullets = []
    for i, item in enumerate(value, start=1):
        if not isinstance(item, str) or not item.strip():
            _wrong(where, f"{key} bullet {i}", item, f"a non-empty string ({limit})")
        text = _one_line(item)
        if len(text) > READING_MAX_CHARS:
            raise StudyError(
                f"{where} value {key} bullet {i}: {len(text)} characters, over {READING_MAX_CHARS}; shorten it or "
                f"split it ({limit}), starting {_short(text)}"
            )
        bullets.append(text)
    return tuple(bullets)


def _one_line(text: str) -> str:
    """The text with its line breaks (and the spaces around them) as single spaces, stripped."""
    return re.sub(r"\s*\n\s*", " ", text).strip()


def _wording_blocks(wording: str | tuple[str, ...]) -> list:
    """A paragraph for a string, a bullet list for a tuple, nothing for an empty value."""
    if not wording:
        return []
    return [Paragraph(wording) if isinstance(wording, str) else Bullets(wording)]


def _layers(value, where: str) -> tuple[str, ...] | dict[str, tuple[str, ...]]:
    """``layers``: a list for every model, or ``{model: list}`` (models differ in depth and layer types)."""
    if isinstance(value, dict):
        return {
            str(model): _layer_list(wanted, where, f"layers[{model!r}]") for model, wanted in value.items()
        }
    return _layer_list(value, where, "layers")


def _layer_list(value, where: str, key: str) -> tuple[str, ...]:
    """Layer entries: ``first``/``middle``/``last`` or integers (kept as strings, as `_pick_layers` reads them)."""
    if value is None:
        return ()
    if isinstance(value, list) and all(
        (isinstance(x, int) and not isinstance(x, bool)) or x in _NAMED_LAYERS or _is_int_string(x)
        for x in value
    ):
        return tuple(str(x) for x in value)
    mapping = ", or a mapping from model to such a list" if key == "layers" else ""
    _wrong(
        where, key, value, f"a list of first, middle, last or layer numbers, e.g. [first, 5, last]{mapping}"
    )


def _is_int_string(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value) is not None


def _optional_string(data: dict, key: str, where: str) -> str:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        _wrong(where, key, value, "a string")
    return value or ""


def _no_unknown_keys(data: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise StudyError(f"{where} has unknown keys {unknown}; allowed: {', '.join(allowed)}")


def _wrong(where: str, key: str, value, expected: str) -> NoReturn:
    raise StudyError(f"{where} value {key}: {_short(value)} ({type_name(value)}) must be {expected}")


def _short(value) -> str:
    """``repr`` cut to a readable length for one-line messages (`short_repr`)."""
    return short_repr(value)


# ------------------------------------------------------------------------------------------------ tables


def _pick_layers(available: Sequence[int], wanted: Sequence[str]) -> list[int]:
    """``first``/``middle``/``last`` or layer numbers -> layers present in the results."""
    layers = sorted(available)
    named = {"first": layers[0], "middle": layers[len(layers) // 2], "last": layers[-1]}
    picked = []
    for w in wanted:
        layer = named[w] if w in named else int(w)
        if layer not in layers:
            raise StudyError(f"layer {w!r} is not in the results (layers {layers[0]}..{layers[-1]})")
        if layer not in picked:
            picked.append(layer)
    return picked


def metric_table(
    rows: pd.DataFrame,
    metric: str,
    baseline: str | None,
    layers: Sequence[str] | Mapping[str, Sequence[str]] = (),
    by_depth: bool = False,
    contrasts: pd.DataFrame | None = None,
    margins: Mapping[str, float] | None = None,
) -> Table:
    """``value [CI]`` per length for each model x method (x layer or position), the change, the baseline gap.

    ``layers`` (``first``/``middle``/``last`` or numbers, or a mapping model -> those) is resolved per
    model: models differ in depth.
    ``by_depth`` splits rows by the depth column (the position task's early/late, passkey depths).
    ``contrasts``: the run's ``<metric>_vs_shortest`` / ``_vs_base`` rows; where one covers a change, its
    paired test reads it, else an unpaired one (`llm_collapse.reporting.significance`). Every test of the
    table is Holm-adjusted together; ``margins`` (`ReportData.margins`) give changes that do not survive
    their equivalence reading.

    Long because one table's cells, their tests and the one Holm adjustment over them are built together (the
    adjustment needs every cell's p-value before any cell is written).
    """
    digits = metric_info(metric).digits
    lengths = sorted(int(x) for x in rows["length"].unique())
    split = "layer" if layers else ("depth" if by_depth else None)
    split_header = {"layer": ["layer"], "depth": ["position"], None: []}[split]
    headers = ["model", "method", *split_header, "n"] + [length_text(n) for n in lengths]
    contrast = is_contrast(metric)  # each cell a paired test of its own: no change or gap columns
    baseline = None if contrast else baseline
    headers += [] if contrast else ["Δ longest − shortest"]
    if baseline:
        headers.append(f"vs `{baseline}` at the longest")
    contrasts = contrasts if contrasts is not None else rows.iloc[0:0]
    body, changes, cells = [], [], []
    for model in sorted(rows["model"].unique()):
        sub = rows[rows["model"] == model]
        paired = contrasts[contrasts["model"] == model]
        if split is None:
            paired = paired[paired["depth"].isna() & paired["layer"].isna()]
        if split == "layer":
            wanted = layers.get(model) if isinstance(layers, Mapping) else layers
            if not wanted:
                raise StudyError(
                    f"model {model!r} has no entry in the question's layers mapping; add one, e.g. {model}: [first, last]"
                )
            parts = _pick_layers([int(x) for x in sub["layer"].dropna().unique()], wanted)
        elif split == "depth":
            parts = sorted(float(x) for x in sub["depth"].dropna().unique())
        else:
            parts = [None]
        for method in sorted_methods(sub["method"]):
            for part in parts:
                cell = _part(sub[sub["method"] == method], split, part)
                by_length = {int(r["length"]): r for _, r in cell.iterrows()}
                values = [
                    fmt_ci(float(r["value"]), float(r["ci_low"]), float(r["ci_high"]), digits)
                    if (r := by_length.get(n)) is not None
                    else "—"
                    for n in lengths
                ]
                present = sorted(
                    by_length
                )  # a model may stop short of the longest bin (minilm: 512 positions)
                first, last = (
                    (by_length[present[0]], by_length[present[-1]]) if len(present) > 1 else (None, None)
                )
                label = [] if split is None else [str(part) if split == "layer" else position_label(part)]
                row = [model, method_cell(method), *label, _n_text(by_length.values()), *values]
                if contrast:
                    start = len(row) - len(lengths)
                    cells += [(len(body), start + lengths.index(n), r) for n, r in by_length.items()]
                    body.append(row)
                    continue
                row.append(None)
                mine = _part(paired[paired["method"] == method], split, part)
                if first is not None:
                    changes.append((len(body), len(row) - 1, _change(metric, first, last, mine, VS_SHORTEST)))
                else:
                    row[-1] = "—"
                if baseline:
                    base = _part(
                        sub[(sub["method"] == baseline) & (sub["length"] == (present or lengths)[-1])],
                        split,
                        part,
                    )
                    row.append(None)
                    if method == baseline or last is None or base.empty:
                        row[-1] = "—"
                    else:
                        changes.append(
                            (len(body), len(row) - 1, _change(metric, base.iloc[0], last, mine, VS_BASE))
                        )
                body.append(row)
    for (i, j, _), text in zip(
        changes, read_changes([c for _, _, c in changes], judge, margins), strict=True
    ):
        body[i][j] = text
    for (i, j, _), survives in zip(cells, mark_survivors([r for _, _, r in cells]), strict=True):
        body[i][j] = f"**{body[i][j]}**" if survives else body[i][j]
    numeric = (
        False,
        False,
        *([False] * len(split_header)),
        True,
        *([True] * len(lengths)),
        *([False] * ((not contrast) + bool(baseline))),
    )
    return Table(tuple(headers), tuple(tuple(r) for r in body), numeric)


def _change(metric: str, start: pd.Series, end: pd.Series, paired: pd.DataFrame, suffix: str):
    """``(metric, delta, test, digits)`` of ``end - start`` (`change_test` picks the test)."""
    delta = float(end["value"] - start["value"])
    return metric, delta, change_test(metric, start, end, paired, suffix), metric_info(metric).digits


def _n_text(rows) -> str:
    """The row's items per length (texts, queries or pairs): one number, or the range where lengths differ."""
    counts = sorted({int(r["n"]) for r in rows})
    return "—" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def _part(rows: pd.DataFrame, split: str | None, part) -> pd.DataFrame:
    """The rows of one layer / depth (or all of them)."""
    return rows if split is None else rows[rows[split] == part]


# ----------------------------------------------------------------------------------------------- report


def _contrasts(results: pd.DataFrame, q: Question, task: str, metric: str) -> pd.DataFrame:
    """The paired rows (``<metric>_vs_shortest``, ``_vs_base``) of one question's task, for its readings."""
    rows = results[
        (results["task"] == task) & results["metric"].isin([metric + VS_SHORTEST, metric + VS_BASE])
    ]
    return rows[rows["model"].isin(q.models)] if q.models else rows


def _question_blocks(root: Path, q: Question, number: int) -> list:
    run_dirs = [root / q.run, *(root / r for r in q.extra_runs)]
    for run_dir in run_dirs:
        if not (run_dir / "results.parquet").is_file():
            raise StudyError(f"{q.id}: run folder {str(run_dir)!r} has no results.parquet; run: {q.command}")
    data = load_runs(run_dirs)
    if data.tiny_models:
        raise StudyError(f"{q.id}: tiny random models {sorted(data.tiny_models)} cannot be study findings")
    results = data.results
    for field_name, column in (("methods", "method"), ("models", "model")):
        if unknown := sorted(set(getattr(q, field_name)) - set(results[column])):
            raise StudyError(
                f"{q.id}: {field_name} {unknown} appear in none of its runs {[q.run, *q.extra_runs]}; "
                f"they have {sorted(results[column].dropna().unique())}"
            )
    blocks: list = [
        Heading(2, f"Q{number}. {q.title}"),
        Paragraph(
            "Runs (each made by `python -m llm_collapse.compare --config experiments/study/RUN.yaml`):"
        ),
        Bullets(tuple(f"[{r}]({r}/report.md)" for r in (q.run, *q.extra_runs))),
    ]
    if q.reading:
        blocks += [Paragraph("**Reading.**"), *_wording_blocks(q.reading)]
    for task, metric in q.metrics:
        rows = results[(results["task"] == task) & (results["metric"] == metric)]
        if q.models:
            rows = rows[rows["model"].isin(q.models)]
        if q.methods:
            rows = rows[rows["method"].isin(q.methods)]
        if rows.empty:
            raise StudyError(
                f"{q.id}: no {task}/{metric} rows for models {q.models} methods {q.methods} in {q.run}"
            )
        by_depth = bool(task in q.by_depth and not q.layers and rows["depth"].notna().any())
        if q.layers:
            rows = rows[rows["layer"].notna()]
        elif by_depth:
            rows = rows[rows["depth"].notna() & rows["layer"].isna()]
        else:
            rows = overall_rows(rows)
        info = metric_info(metric)
        blocks.append(
            Paragraph(
                f"*{task}: {info.label}* (`{metric}`), mean with 95% CI per length bin (n: texts, queries or pairs per length):"
            )
        )
        table = metric_table(
            rows, metric, q.baseline, q.layers, by_depth, _contrasts(results, q, task, metric), data.margins
        )
        blocks.append(table)
        if legend := table_legend(table.rows, parts=True):  # as a list: each line stays short
            rule, tests = legend
            blocks += [Paragraph(rule), Bullets(tuple(tests))]
        if is_contrast(metric):
            blocks.append(Paragraph(SURVIVOR_LEGEND))
    for name in q.outputs:
        blocks += _output_blocks(root, q, name)
    for entry in q.figures:
        run, name = _figure_source(q, entry)
        path = root / run / "figures" / name
        if not path.is_file():
            raise StudyError(f"{q.id}: figure {str(path)!r} not found (rebuild the run report)")
        blocks.append(Image(path, f"{run}/figures/{name}", name, f"{run}: {name}"))
    return blocks


def _output_blocks(root: Path, q: Question, name: str) -> list:
    """A committed command's output under the study root: a CSV as a table (numbers as written), a PNG as a
    figure, each with its file named."""
    path = root / name
    if not path.is_file() or path.suffix not in (".csv", ".png"):
        raise StudyError(
            f"{q.id}: output {str(path)!r} is not a .csv or .png file here (run the command the question names)"
        )
    if path.suffix == ".png":
        return [Image(path, name, path.stem, f"`{name}`")]
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    numeric = tuple(bool(frame[c].str.fullmatch(r"-?[\d.]+(e-?\d+)?|").all()) for c in frame.columns)
    rows = tuple(tuple(frame.iloc[i]) for i in range(len(frame)))
    return [Paragraph(f"`{name}`:"), Table(tuple(frame.columns), rows, numeric)]


def _figure_source(q: Question, entry: str) -> tuple[str, str]:
    """``name`` is a figure of the question's run; ``run/name`` one of its ``extra_runs``."""
    run, _, name = entry.rpartition("/")
    if not run:
        return q.run, name
    if run not in (q.run, *q.extra_runs):
        raise StudyError(
            f"{q.id}: figure {entry!r} names run {run!r}, which is not among the question's runs "
            f"{[q.run, *q.extra_runs]}; name one of them or add it to extra_runs"
        )
    return run, name


def build_study(root: Path | str, questions_path: Path | str) -> dict[str, Path]:
    """Writes ``report.md`` and ``report.html`` under ``root`` from the questions file; returns their paths."""
    from llm_collapse.utils.files import atomic_write

    root = Path(root)
    if not root.is_dir():
        raise StudyError(f"study folder {str(root)!r} does not exist")
    title, intro, questions = load_questions(questions_path)
    with showing(_method_names(root)):  # every method as its run's --methods wrote it
        blocks: list = [Heading(1, title)]
        blocks += _wording_blocks(intro)
        blocks.append(
            Bullets(
                (
                    "Every number below is read from the runs' `results.parquet`; each section names the command "
                    "that made its run (same seed, same numbers).",
                    "Δ: value at the row's longest minus its shortest length; 'vs base': the method minus the baseline "
                    "at that longest length. Each is tested (paired tests where the run stored the paired contrast: the "
                    "prefix design's `*_vs_shortest`, every run's `*_vs_base`; unpaired otherwise) and Holm-adjusted "
                    "across its table; a reading is printed only where the change survives at 5%.",
                    f"Questions file: `{display_path(questions_path)}`; rebuild: "
                    f"`python -m llm_collapse.study {root.as_posix()} --questions {display_path(questions_path)}`.",
                )
            )
        )
        csv_text = None
        claims = [(q.id, q.family, answer) for q in questions for answer in q.answers]
        if (answers := answers_frame(root, claims, StudyError)) is not None:
            csv_text, written = answers_csv(answers)
            blocks += [
                Heading(2, "Answers"),
                *_wording_blocks(load_takeaway(questions_path)),
                answers_table(written),
            ]
            blocks += summary_legend(families_text(written))
            blocks += [
                Paragraph("**Verdicts per family** (every claim, each value of a sweep included):"),
                family_table(written),
            ]
            if (sweeps := sweep_table(written)) is not None:
                blocks += [Paragraph(SWEEP_INTRO), sweeps]
        if (overview := load_overview(questions_path)) is not None:
            blocks += _overview_blocks(root, overview)
        for number, q in enumerate(questions, start=1):
            blocks += _question_blocks(root, q, number)
        markdown = render_markdown(blocks)
        page = render_html(blocks, title, embed_images=False)
    out = {"md": root / "report.md", "html": root / "report.html", "csv": root / ANSWERS_FILE}
    atomic_write(out["md"], lambda tmp: Path(tmp).write_text(markdown, encoding="utf-8"))
    atomic_write(out["html"], lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    if csv_text is None:
        del out["csv"]
    else:
        atomic_write(out["csv"], lambda tmp: Path(tmp).write_text(csv_text, encoding="utf-8"))
    logger.info("wrote %s", ", ".join(str(path) for path in out.values()))
    return out


def _method_names(root: Path) -> dict[str, str]:
    """Slug -> method as written, over every run of the study (`RunRecord.read`: its ``config.methods``)."""
    methods = []
    for run_dir in sorted(path.parent for path in root.glob(f"*/{RUN_FILE}")):
        try:
            record = RunRecord.read(run_dir)
        except RunRecordError:  # a run without a readable record keeps its slugs
            continue
        methods += (record.config.get("methods") or []) if record is not None else []
    return method_names(methods)
