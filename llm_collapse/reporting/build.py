"""Assemble report.md and a self-contained report.html from loaded runs, written atomically.

Sections: the declared claims (when the run has any), run summary, summary table, one section per task (figures,
each value-vs-length figure followed by its values table), the temperature sweep, and Caveats
(`llm_collapse.reporting.caveats`). The report is a list of blocks rendered to markdown and to HTML
(`llm_collapse.reporting.blocks`), so the two always say the same.

Decisions:

- A figure's title is drawn once, in its PNG (which the study report and the README show on their own); the
  report gives it as the image's alt text, followed by a caption that says how to read it, not a heading.
- Byte-identical rebuilds: no build time, no absolute paths (runs are named by their label), sorted
  iteration, deterministic PNGs (see `figures`).
- Atomic: everything is rendered into a staging folder (inside ``out_dir`` when it exists, else in its
  nearest existing ancestor) and only then moved into place: the old ``figures/`` is swapped for the new
  one and report.md/report.html are replaced with ``os.replace``. A failure before that leaves ``out_dir``
  untouched; the staging folder is always removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from llm_collapse.reporting.answer_spec import answers_of_run
from llm_collapse.reporting.blocks import (
    Block,
    Bullets,
    Heading,
    Image,
    Paragraph,
    anchor,
    render_html,
    render_markdown,
)
from llm_collapse.reporting.caveats import caveats
from llm_collapse.reporting.figures import (
    OVERVIEW_SECTION,
    SWEEP_SECTION,
    FigureFile,
    length_label,
    make_figures,
    position_label,
    task_order,
)
from llm_collapse.reporting.frames import ReportData, SchemaError, load_runs, metric_info, sorted_methods
from llm_collapse.reporting.length_effects import decomposition_table, verdict_table
from llm_collapse.reporting.markup import codes, compact
from llm_collapse.reporting.names import method_cell, method_cells, showing
from llm_collapse.reporting.significance import table_legend
from llm_collapse.reporting.study_summary import ANSWERS_FILE, answers_csv, answers_frame, claims_section
from llm_collapse.reporting.tables import (
    models_table,
    one_length,
    paired_by_depth,
    summary_legend,
    summary_models,
    summary_table,
    values_by_depth,
    values_by_length,
)
from llm_collapse.tasks.registry import TASKS

logger = logging.getLogger(__name__)

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
FIGURES_DIR = "figures"


def section_title(section: str) -> str:
    """A report section's heading: its task's title (tasks registered later too), or the sweep's."""
    if section == SWEEP_SECTION:
        return "Temperature sweep"
    return TASKS[section].title if section in TASKS else f"Task: {section}"


# --------------------------------------------------------------------------------------------- sections


def _title(data: ReportData) -> str:
    return "Length-collapse report: " + ", ".join(run.label for run in data.runs)


def _seconds(total: float) -> str:
    if total < 120:
        return f"{total:.1f} s"
    minutes = total / 60
    return f"{minutes:.1f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def run_summary(data: ReportData) -> list[Block]:
    """The "Run summary" section."""
    results = data.results
    lengths = sorted(int(x) for x in results["length"].unique())
    items = [
        f"Methods: {method_cells(data.methods)}",
        f"Tasks: {codes(task_order(data.tasks))}",
        f"Corpus: {codes(data.corpora)}",
        f"Lengths (tokens): {', '.join(length_label(n) for n in lengths)}",
    ]
    for run in data.runs:
        items.append(_run_line(run))
    items += _design_lines(data)
    notes = [f"{run.label}: {note}" for run in data.runs for note in _notes(run.record.notes)]
    blocks: list[Block] = [
        Heading(2, "Run summary"),
        Bullets(tuple(items)),
        Heading(3, "Models"),
        models_table(data),
    ]
    if notes:
        blocks += [Heading(3, "Notes"), Bullets(tuple(notes))]
    return blocks


def _design_lines(data: ReportData) -> list[str]:
    """How each run chose its corpus texts (bins or nested prefixes), where lengths are nested (the prefix
    design, the ``-start`` tasks) how each model x method embedded them, and its matched controls."""
    lines = []
    multi = len(data.runs) > 1
    for run in data.runs:
        inputs = run.record.inputs
        where = f"[{run.label}] " if multi else ""
        if inputs.design == "prefix":
            joined = inputs.prefix_docs_concatenated or 0
            docs = inputs.prefix_docs if inputs.prefix_docs is not None else "?"
            lines.append(
                f"{where}Design: nested prefixes, the first L tokens of the same {docs} "
                f"documents at every length ({joined} of them consecutive corpus documents joined in date order "
                "to reach the longest length), so contrasts between lengths are paired (`*_vs_shortest`)."
            )
        elif inputs.texts_per_length:
            lines.append(
                f"{where}Design: length bins [L, 1.1 L) with different texts in each bin, so contrasts between "
                "lengths are unpaired."
            )
        lines += _retrieval_lines(run, where)
        for model in data.models:
            for model_run, record in data.model_records(model):
                if model_run is not run or record is None:
                    continue
                paths = record.prefix_sharing
                if paths:
                    for method in sorted_methods(paths):
                        lines.append(
                            f"{where}Nested lengths embedded: {model} / {method_cell(method)}: {paths[method]}."
                        )
                controls = record.controls
                if controls:
                    pairs = ", ".join(
                        f"{method_cell(m)} − {method_cell(c)}" for m, c in sorted(controls.items())
                    )
                    lines.append(
                        f"{where}Matched controls (`*_vs_control` rows, paired over the same items): "
                        f"{model}: {pairs}."
                    )
    return lines


def _retrieval_lines(run, where: str) -> list[str]:
    """Documents, queries and candidates per query of each retrieval task (``inputs.retrieval``: candidates)."""
    settings = run.record.settings
    docs, queries, pool = settings.retrieval_docs, settings.retrieval_queries, settings.retrieval_pool
    lines = []
    for task, counts in sorted(run.record.inputs.retrieval.items()):
        candidates = sorted(set(counts.values()))
        if not candidates:
            continue
        ranked = "/".join(str(c) for c in candidates)
        pooled = f" (the documents of a length split into pools of {pool})" if pool else ""
        lines.append(
            f"{where}Retrieval `{task}`: {docs} documents and {queries} queries per length; each query ranks "
            f"{ranked} candidates{pooled}, so chance Acc@1 is 1/{ranked}."
        )
    return lines


def _notes(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def _wall_text(stages: dict[str, float], limit: int = 8) -> str:
    """Total and per-group seconds; stages ``"a:b:c"`` are grouped by ``a``, the largest ``limit`` shown."""
    groups: dict[str, float] = {}
    for stage, seconds in stages.items():
        key = stage.split(":", 1)[0]
        groups[key] = groups.get(key, 0.0) + seconds
    shown = sorted(sorted(groups.items()), key=lambda kv: -kv[1])[:limit]
    more = ", ..." if len(groups) > limit else ""
    parts = ", ".join(f"{k} {_seconds(v)}" for k, v in sorted(shown))
    return f"{_seconds(sum(stages.values()))} ({parts}{more})"


def _run_line(run) -> str:
    record = run.record
    seed = record.settings.seed
    wall = record.wall_time_s
    stages = {
        str(k): float(v) for k, v in wall.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    wall_text = _wall_text(stages) if stages else "?"
    parts = [
        f"seed {seed if seed is not None else '?'}",
        f"wall time {wall_text}",
        f"commit `{record.git_commit or '?'}`",
        f"started {record.started or '?'}",
        f"hardware: {compact(record.hardware or '?')}",
    ]
    versions = record.versions
    if versions:
        parts.append(f"versions: {compact(versions)}")
    return f"Run **{run.label}**: " + "; ".join(parts)


def summary_section(data: ReportData) -> list[Block]:
    """The summary table with its legend and tiny-model note."""
    table = summary_table(data)
    blocks: list[Block] = [Heading(2, "Summary")]
    if table is None:
        return [
            *blocks,
            Paragraph(
                "No headline metric (pairwise cosine, centroid distance, kNN, Acc@1) in these results."
            ),
        ]
    _, all_tiny = summary_models(data)
    tiny = data.tiny_models
    intro = (
        "Value at the run's one length per row, with CIs where reported (one length: no change with length "
        "to test; the method comparisons are in the tables below)."
        if one_length(data)
        else "Value at the shortest and the longest length per row, with CIs where reported; Δ = longest − "
        "shortest, tested (paired where the run stored `*_vs_shortest` rows, i.e. the prefix design; unpaired "
        "otherwise)."
    )
    if all_tiny:
        intro += " **Every model here is tiny_random: these rows are code-path checks, not findings.**"
    elif tiny:
        intro += f" tiny_random models left out: {codes(tiny)}."
    legend = table_legend(table.rows)
    legend_lines = [*summary_legend(data), *([legend] if legend else [])]
    return [*blocks, Paragraph(intro), table, Bullets(tuple(legend_lines)), *length_effect_blocks(data)]


_LENGTH_EFFECTS = (
    (
        decomposition_table,
        "Spread or offset?",
        "Squared distance to the global centroid = within-length spread + the length centroid's squared offset "
        "from the global one (exact). A fall of the paper's distance is collapse proper only as far as the spread "
        "falls; the last column says how much of the change is the offset.",
    ),
)


def length_effect_blocks(data: ReportData) -> list[Block]:
    """The interaction and decomposition tables (`llm_collapse.reporting.length_effects`), where the run has them."""
    blocks: list[Block] = []
    rows: list = []
    for make, heading, text in _LENGTH_EFFECTS:
        table = make(data)
        if table is not None:
            blocks += [Heading(3, heading), Paragraph(text), table]
            rows += table.rows
    legend = table_legend(rows)
    return [*blocks, Paragraph(legend)] if legend else blocks


def task_sections(data: ReportData, figures: Sequence[FigureFile], out_root: Path) -> list[Block]:
    """One section per task plus the temperature sweep, in figure order."""
    blocks: list[Block] = []
    sections = [*task_order(data.tasks), SWEEP_SECTION]
    for section in sections:
        figs = [f for f in figures if f.section == section]
        if not figs and section == SWEEP_SECTION:
            continue
        blocks.append(Heading(2, section_title(section)))
        if not figs:
            blocks.append(Paragraph("No figure: the rows this section plots are absent."))
        for fig in figs:
            blocks += _figure_blocks(data, fig, out_root)
    return blocks


def _figure_blocks(data: ReportData, fig: FigureFile, out_root: Path) -> list[Block]:
    rel = fig.path.relative_to(out_root).as_posix()
    blocks: list[Block] = [Image(fig.path, rel, fig.title, fig.caption)]
    if fig.kind == "length":
        for metric in fig.metrics or (fig.metric,):
            table = values_by_length(data, fig.task, metric, fig.corpus)
            if table is not None:
                label = metric_info(metric).label
                blocks += [Paragraph(f"{label[0].upper()}{label[1:]} by length (tokens):"), table]
    if fig.kind == "position":
        table = values_by_depth(data, fig.task, fig.metric, fig.corpus, position_label)
        if table is not None:
            label = metric_info(fig.metric).label
            blocks += [Paragraph(f"{label} by position and length (tokens), 95% CIs:"), table]
    if fig.kind == "depth":
        for model in [fig.model] if fig.model else sorted(data.results["model"].unique()):
            table = paired_by_depth(data, fig.task, fig.metric, fig.corpus, model)
            if table is not None:
                label = metric_info(fig.metric).label
                text = f"{label} − base (paired) of {model} by key depth and length (tokens), 95% CIs:"
                blocks += [Paragraph(text), table, Paragraph(table_legend(table.rows))]
    return blocks


def caveats_section(data: ReportData) -> list[Block]:
    """The "Caveats" section."""
    lines = caveats(data)
    body: Block = Bullets(tuple(lines)) if lines else Paragraph("None of the checked caveats applies.")
    return [Heading(2, "Caveats"), body]


def run_claims(data: ReportData) -> pd.DataFrame | None:
    """The verdicts of the claims the runs declared (run.json ``config.claims``), `ANSWER_COLUMNS`; each run's
    claims are Holm families of their own (named ``run: family`` when several runs are merged). None without."""
    frames = []
    for run in data.runs:
        claims = run.record.config.get("claims") if isinstance(run.record.config, dict) else None
        if not claims:
            continue
        frame = answers_frame(
            run.path.parent, answers_of_run(run.path.name, claims), SchemaError, untested=True
        )
        if len(data.runs) > 1:
            frame = frame.assign(
                family=run.label + ": " + frame["family"], question=run.label + ": " + frame["question"]
            )
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else None


ANSWER = "Answer: does a method change the collapse that comes with length?"


def answer_section(data: ReportData, answers: pd.DataFrame | None) -> tuple[list[Block], list[Block]]:
    """The report's first section and what follows the overview figure: the declared claims' verdicts where the
    run declared any, else the verdict table (`verdict_table`: the method x length interaction read with its
    test, base's change beside the method's), whose legend comes after the overview so that both fit the first
    screen."""
    if answers is not None:
        return claims_section(answers), []
    table = verdict_table(data)
    if table is None:
        return [], []
    legend = table_legend(table.rows)
    section = [
        Heading(2, ANSWER),
        Paragraph(
            "Per cell: the verdict, (method − base) at the longest length − the same at the shortest, on the same "
            "items, with its 95% CI and test (Holm's correction across the table); then each one's own change."
        ),
        table,
    ]
    return section, [Paragraph(legend)] if legend else []


def overview_blocks(figures: Sequence[FigureFile], out_root: Path) -> list[Block]:
    """The overview figure (`make_figures`' first: every headline metric against length)."""
    return [
        Image(f.path, f.path.relative_to(out_root).as_posix(), f.title, f.caption)
        for f in figures
        if f.section == OVERVIEW_SECTION
    ]


def contents(blocks: Sequence[Block]) -> Bullets:
    """Links to the report's sections (its level-2 headings; anchors as GitHub and the HTML name them)."""
    return Bullets(
        tuple(f"[{b.text}](#{anchor(b.text)})" for b in blocks if isinstance(b, Heading) and b.level == 2)
    )


def report_blocks(
    data: ReportData, figures: Sequence[FigureFile], out_root: Path, answers: pd.DataFrame | None = None
) -> list[Block]:
    """All blocks of the report, in order: the answer first (the declared claims' verdicts, or the verdict
    table) and the overview figure, a contents list, then the summary table (each metric at the shortest and
    the longest length, the change tested), how the run was made, and the per-task tables and figures."""
    warning = (
        [
            Paragraph(
                f"**tiny_random models present ({', '.join(data.tiny_models)}): their numbers are code-path checks only and are never findings.**"
            )
        ]
        if data.tiny_models
        else []
    )
    if len(data.runs) > 1:
        warning.append(
            Paragraph(
                f"Merged from {len(data.runs)} runs: each table's Holm correction spans the tests of every merged "
                "run, so its adjusted p-values can be larger than in a run's own report (a larger family); a "
                "run's declared claims keep their own families. The figures share their axes across the runs."
            )
        )
    rest = [
        *summary_section(data),
        *run_summary(data),
        *task_sections(data, figures, out_root),
        *caveats_section(data),
    ]
    answer, legend = answer_section(data, answers)
    first = [*answer, *overview_blocks(figures, out_root), *legend]
    return [Heading(1, _title(data)), *warning, *first, contents([*first, *rest]), *rest]


# ---------------------------------------------------------------------------------------------- writing


STAGING_PREFIX = ".report-tmp-"


def remove_stale_staging(out_dir: Path | str) -> None:
    """Removes staging folders a killed report left in ``out_dir`` (SIGTERM runs no cleanup); call it only while
    holding the folder (`llm_collapse.run.directory.claim_run_dir`), when no other report can be staging there."""
    folder = Path(out_dir)
    if folder.is_dir():
        for stale in folder.glob(STAGING_PREFIX + "*"):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)


def _staging_dir(out_dir: Path) -> Path:
    anchor = out_dir
    while not anchor.exists():
        anchor = anchor.parent
    if not anchor.is_dir():
        raise NotADirectoryError(f"{anchor} is not a directory")
    return Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=anchor))


def _answers(data: ReportData) -> tuple[str | None, pd.DataFrame | None]:
    """answers.csv's text and the frame read back from it (None, None without declared claims)."""
    frame = run_claims(data)
    return (None, None) if frame is None else answers_csv(frame)


def _render(data: ReportData, root: Path) -> None:
    csv_text, answers = _answers(data)
    with showing(data.method_names()):  # every method as --methods wrote it
        figures = make_figures(data, root / FIGURES_DIR)
        blocks = report_blocks(data, figures, root, answers)
    (root / REPORT_MD).write_text(render_markdown(blocks), encoding="utf-8")
    (root / REPORT_HTML).write_text(render_html(blocks, _title(data)), encoding="utf-8")
    if csv_text is not None:
        (root / ANSWERS_FILE).write_text(csv_text, encoding="utf-8")


def report_markdown(data: ReportData, out_dir: Path | str) -> str:
    """The report.md that `write_report` would write into ``out_dir``, built with its figures planned but not
    drawn: seconds faster per report, for checks that compare committed reports (nothing is written)."""
    root = Path(out_dir).absolute()
    with showing(data.method_names()):
        figures = make_figures(data, root / FIGURES_DIR, draw=False)
        return render_markdown(report_blocks(data, figures, root, _answers(data)[1]))


def _publish(staging: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    old = out_dir / FIGURES_DIR
    if old.is_dir():
        shutil.move(str(old), str(staging / "old-figures"))
    shutil.move(str(staging / FIGURES_DIR), str(out_dir / FIGURES_DIR))
    for name in (REPORT_MD, REPORT_HTML):
        os.replace(staging / name, out_dir / name)
    if (staging / ANSWERS_FILE).is_file():
        os.replace(staging / ANSWERS_FILE, out_dir / ANSWERS_FILE)
    else:  # a report without claims leaves no answers.csv of an earlier build behind
        (out_dir / ANSWERS_FILE).unlink(missing_ok=True)


def write_report(data: ReportData, out_dir: Path | str) -> dict[str, Path]:
    """Render and atomically publish the report for already-loaded data.

    Args:
        data: From `load_runs`.
        out_dir: Folder for report.md, report.html and figures/ (created if needed).

    Returns:
        Relative path (``report.md``, ``report.html``, ``figures/<name>.png``) -> absolute path.
    """
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} is not a directory")
    staging = _staging_dir(out_dir)
    try:
        _render(data, staging)
        names = sorted(p.name for p in (staging / FIGURES_DIR).glob("*.png"))
        _publish(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    files = {
        name: out_dir / name for name in (REPORT_MD, REPORT_HTML, ANSWERS_FILE) if (out_dir / name).is_file()
    }
    files.update({f"{FIGURES_DIR}/{name}": out_dir / FIGURES_DIR / name for name in names})
    logger.info("wrote %s (%d figures)", out_dir, len(names))
    return files


def build_report(run_dirs: Sequence[Path | str], out_dir: Path | str) -> dict[str, Path]:
    """Load run directories and write report.md, report.html and figures/ into ``out_dir``.

    Args:
        run_dirs: One or more run directories (merged when several).
        out_dir: Output folder.

    Returns:
        Relative path -> absolute path of every file written.

    Raises:
        SchemaError: Bad input (missing directory or results, schema mismatch); nothing is written.
    """
    return write_report(load_runs(run_dirs), out_dir)
