"""Assemble report.md and a self-contained report.html from loaded runs, written atomically.

The report is a list of blocks (heading, paragraph, bullet list, table, figure) rendered twice, to
markdown and to HTML, so the two always say the same; inline markup (bold, code, links) is read by
markdown-it-py (`llm_collapse.reporting.markup`). Sections: run summary, summary table, one section per task
(figures, each value-vs-length figure followed by its values table), the temperature sweep, and Caveats.

Decisions:

- Self-contained HTML: PNGs are embedded as ``data:image/png;base64,`` URIs, CSS is inline, nothing is
  fetched. report.md links the PNGs under ``figures/``.
- A figure's title is drawn once, in its PNG (which the study report and the README show on their own); the
  report gives it as the image's alt text, followed by a caption that says how to read it, not a heading.
- Every table sits in a ``<div class="scroll">`` that scrolls sideways, so a wide table never widens the page.
- Byte-identical rebuilds: no build time, no absolute paths (runs are named by their label), sorted
  iteration, deterministic PNGs (see `figures`).
- Atomic: everything is rendered into a staging folder (inside ``out_dir`` when it exists, else in its
  nearest existing ancestor) and only then moved into place: the old ``figures/`` is swapped for the new
  one and report.md/report.html are replaced with ``os.replace``. A failure before that leaves ``out_dir``
  untouched; the staging folder is always removed.
- Caveats list only what applies: tiny_random models (in bold: code-path checks only, never findings),
  truncation counts, lengths past a sliding window without ``window-off``, methods the runner recorded as
  ``not_applicable`` and ``oom_retries``, merged runs (machines and commits), models renamed because
  several runs measured the same thing, missing metadata.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from llm_collapse.reporting.answer_spec import answers_of_run
from llm_collapse.reporting.figures import (
    SWEEP_SECTION,
    FigureFile,
    length_label,
    make_figures,
    position_label,
    task_order,
)
from llm_collapse.reporting.frames import ReportData, SchemaError, load_runs, metric_info, sorted_methods
from llm_collapse.reporting.length_effects import decomposition_table, interaction_table
from llm_collapse.reporting.markup import inline_html
from llm_collapse.reporting.significance import table_legend
from llm_collapse.reporting.study_summary import (
    ANSWERS_FILE,
    VERDICTS,
    answers_csv,
    answers_frame,
    answers_table,
    families_text,
)
from llm_collapse.reporting.tables import (
    Table,
    models_table,
    one_length,
    paired_by_depth,
    summary_legend,
    summary_models,
    summary_table,
    values_by_depth,
    values_by_length,
)
from llm_collapse.tasks.registry import KNN_NEIGHBOURS as KNN_K
from llm_collapse.tasks.registry import TASKS

logger = logging.getLogger(__name__)

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
FIGURES_DIR = "figures"
# Why a task's metric can be NaN at every length (the caveat of a series left out of the report).
EMPTY_WHY = {
    "knn": f"the kNN probe needs at least two label classes and more than k = {KNN_K} labelled texts per length; "
    "raise --max-per-bin or choose a label with two classes in the sample",
}


def section_title(section: str) -> str:
    """A report section's heading: its task's title (tasks registered later too), or the sweep's."""
    if section == SWEEP_SECTION:
        return "Temperature sweep"
    return TASKS[section].title if section in TASKS else f"Task: {section}"


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
line-height:1.45;color:#222}
h1,h2,h3{line-height:1.2}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.scroll{overflow-x:auto;margin:.8em 0}table{border-collapse:collapse;font-size:.85em}
th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}th{background:#f3f3f3}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}img{max-width:100%;height:auto}figcaption{font-size:.9em;color:#555}
code{background:#f4f4f4;padding:0 .2em;border-radius:3px}
""".strip()


# ----------------------------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Heading:
    """A heading of ``level`` (1-3)."""

    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of inline markup."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bullet list of inline-markup items."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Image:
    """A figure: PNG on disk, referenced by ``rel`` from the report folder."""

    path: Path
    rel: str
    alt: str
    caption: str


Block = Heading | Paragraph | Bullets | Table | Image


def render_markdown(blocks: Sequence[Block]) -> str:
    """The blocks as markdown (ends with one newline)."""
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            parts.append(block.text)
        elif isinstance(block, Bullets):
            parts.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            parts.append(block.to_markdown())
        elif isinstance(block, Image):
            parts.append(f"![{block.alt}]({block.rel})\n\n*{block.caption}*")
    return "\n\n".join(parts) + "\n"


def render_html(blocks: Sequence[Block], title: str, *, embed_images: bool = True) -> str:
    """The blocks as one HTML page: images inlined as base64 (self-contained), or linked by their ``rel`` path."""
    body = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            body.append("<ul>\n" + "\n".join(f"<li>{inline_html(i)}</li>" for i in block.items) + "\n</ul>")
        elif isinstance(block, Table):
            body.append(f'<div class="scroll">\n{block.to_html()}\n</div>')
        elif isinstance(block, Image):
            if embed_images:
                src = "data:image/png;base64," + base64.b64encode(block.path.read_bytes()).decode("ascii")
            else:
                src = html.escape(block.rel)
            body.append(
                f'<figure><img src="{src}" alt="{html.escape(block.alt)}">'
                f"<figcaption>{inline_html(block.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


# --------------------------------------------------------------------------------------------- sections


def _title(data: ReportData) -> str:
    return "Length-collapse report: " + ", ".join(run.label for run in data.runs)


def _codes(values: Iterable[object]) -> str:
    return ", ".join(f"`{v}`" for v in values) or "none"


def _seconds(total: float) -> str:
    if total < 120:
        return f"{total:.1f} s"
    minutes = total / 60
    return f"{minutes:.1f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(value[k])}" for k in sorted(value, key=str)) or "?"
    if isinstance(value, list):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    return json.dumps(value) if not isinstance(value, str) else value


def run_summary(data: ReportData) -> list[Block]:
    """The "Run summary" section."""
    results = data.results
    lengths = sorted(int(x) for x in results["length"].unique())
    items = [
        f"Methods: {_codes(data.methods)}",
        f"Tasks: {_codes(task_order(data.tasks))}",
        f"Corpus: {_codes(data.corpora)}",
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
                            f"{where}Nested lengths embedded: {model} / `{method}`: {paths[method]}."
                        )
                controls = record.controls
                if controls:
                    pairs = ", ".join(f"`{m}` − `{c}`" for m, c in sorted(controls.items()))
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
        f"hardware: {_compact(record.hardware or '?')}",
    ]
    versions = record.versions
    if versions:
        parts.append(f"versions: {_compact(versions)}")
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
        intro += f" tiny_random models left out: {_codes(tiny)}."
    legend = table_legend(table.rows)
    legend_lines = [*summary_legend(data), *([legend] if legend else [])]
    return [*blocks, Paragraph(intro), table, Bullets(tuple(legend_lines)), *length_effect_blocks(data)]


_LENGTH_EFFECTS = (
    (
        interaction_table,
        "Does a method change the collapse that comes with length?",
        "(method − base at the longest length) − (method − base at the shortest), on the same items, with its "
        "95% CI; the reading says whether the method adds to (more collapse) or takes from (less collapse) the "
        "change with length, after Holm's correction across the table.",
    ),
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
        table = values_by_length(data, fig.task, fig.metric, fig.corpus)
        if table is not None:
            label = metric_info(fig.metric).label
            blocks += [Paragraph(f"{label[0].upper()}{label[1:]} by length (tokens):"), table]
    if fig.kind == "position":
        table = values_by_depth(data, fig.task, fig.metric, fig.corpus, position_label)
        if table is not None:
            label = metric_info(fig.metric).label
            blocks += [Paragraph(f"{label} by position and length (tokens), 95% CIs:"), table]
    if fig.kind == "depth":
        table = paired_by_depth(data, fig.task, fig.metric, fig.corpus, fig.model)
        if table is not None:
            label = metric_info(fig.metric).label
            text = f"{label} − base (paired) of {fig.model} by key depth and length (tokens), 95% CIs:"
            blocks += [Paragraph(text), table, Paragraph(table_legend(table.rows))]
    return blocks


# ---------------------------------------------------------------------------------------------- caveats


def caveats(data: ReportData) -> list[str]:
    """Caveat lines that apply to these results (empty when none does)."""
    lines = _tiny_caveats(data)
    lines += _truncation_caveats(data)
    lines += _window_caveats(data)
    lines += _skipped_caveats(data)
    lines += _empty_caveats(data)
    lines += _merge_caveats(data)
    lines += _metadata_caveats(data)
    return lines


def _tiny_caveats(data: ReportData) -> list[str]:
    tiny = data.tiny_models
    if not tiny:
        return []
    _, all_tiny = summary_models(data)
    where = (
        "no real model is present, so every summary row is marked"
        if all_tiny
        else "they are left out of the summary table"
    )
    return [
        f"tiny_random models {_codes(tiny)}: **their numbers are code-path checks only and are never findings** "
        f"(random weights); {where}."
    ]


def _truncation_caveats(data: ReportData) -> list[str]:
    lines = []
    for prefix, model, record in data.recorded_models():
        truncated, n_texts = record.truncated, record.n_texts
        for method in sorted_methods(truncated):
            count = truncated[method]
            if count <= 0:
                continue
            max_length = record.token_caps.get(method, record.describe.get("max_length"))
            of = f" of {n_texts}" if n_texts is not None else ""
            cap = f" to max_length {max_length}" if max_length is not None else ""
            lines.append(f"{prefix}Truncation: {model} / `{method}`: {count}{of} texts truncated{cap}.")
    return lines


def _skipped_caveats(data: ReportData) -> list[str]:
    """Methods the runner could not apply (``not_applicable``) and OOM retries, per model."""
    lines = []
    for prefix, model, record in data.recorded_models():
        skipped = record.not_applicable
        for what in sorted(skipped):
            lines.append(f"{prefix}Not measured: {model} / `{what}`: {skipped[what]}")
        for what, retries in sorted(record.oom_retries.items()):
            count = len(retries) if isinstance(retries, list) else retries
            if count > 0:
                last = f"; last: {retries[-1]}" if isinstance(retries, list) else ""
                lines.append(
                    f"{prefix}Out-of-memory retries: {model} / `{what}`: {count} (smaller batches{last})."
                )
    return lines


def _empty_caveats(data: ReportData) -> list[str]:
    """Series without a value at any length, left out of figures and tables (`ReportData.empty`)."""
    lines = []
    for model, method, task, corpus, metric in data.empty:
        why = EMPTY_WHY.get(task, "the run's log says why")
        lines.append(
            f"No value: {model} / `{method}` / {task} `{metric}` on {corpus} is NaN at every length, so it is "
            f"left out of the figures and tables ({why})."
        )
    return lines


def _window_caveats(data: ReportData) -> list[str]:
    lines = []
    for model in data.models:
        windows = sorted(
            {
                int(w)
                for _, record in data.model_records(model)
                if record is not None and (w := record.sliding_window)
            }
        )
        if not windows:
            continue
        window = windows[0]
        rows = data.results[(data.results["model"] == model) & (data.results["length"] > window)]
        rows = rows[~rows["method"].map(lambda m: "window-off" in m.split("+"))]
        if rows.empty:
            continue
        lengths = ", ".join(length_label(n) for n in sorted(rows["length"].unique()))
        lines.append(
            f"Sliding window: {model} has a {window}-token sliding window (in its sliding-window layers a token "
            f"sees only the last {window} tokens); lengths {lengths} exceed it under {_codes(sorted_methods(rows['method']))}. "
            f"Compare with `window-off` before reading those bins as full-context behaviour."
        )
    return lines


def _merge_caveats(data: ReportData) -> list[str]:
    if len(data.runs) < 2:
        return []
    known = {json.dumps(run.record.hardware, sort_keys=True) for run in data.runs if run.record.hardware}
    unknown = [run.label for run in data.runs if not run.record.hardware]
    if len(known) > 1:
        machines = (
            "from several machines: timings and low-level numerics (kernels, dtypes) may differ between runs"
        )
    elif unknown:
        machines = f"whose hardware is not recorded for {', '.join(unknown)}, so they may come from different machines"
    else:
        machines = "with the same recorded hardware"
    runs = "; ".join(
        f"**{run.label}** (hardware: {_compact(run.record.hardware or '?')})" for run in data.runs
    )
    lines = [f"Merged {len(data.runs)} runs {machines}: {runs}."]
    commits = sorted({str(run.record.git_commit) for run in data.runs if run.record.git_commit})
    if len(commits) > 1:
        lines.append(f"The merged runs come from different commits: {_codes(commits)}.")
    if data.renamed:
        renamed = ", ".join(
            f"{name} from {run} shown as {display}" for display, (run, name) in data.renamed.items()
        )
        lines.append(f"Several runs measured the same cells, so their models are kept apart: {renamed}.")
    return lines


def _metadata_caveats(data: ReportData) -> list[str]:
    lines = [
        f"Run {run.label} has no run.json: model metadata and caveats are incomplete."
        for run in data.runs
        if not run.has_meta
    ]
    for model in data.models:
        for run, record in data.model_records(model):
            if run.has_meta and record is None:
                lines.append(f"Run {run.label} has no run.json entry for model {model}.")
    return lines


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


def report_blocks(
    data: ReportData, figures: Sequence[FigureFile], out_root: Path, answers: pd.DataFrame | None = None
) -> list[Block]:
    """All blocks of the report, in order: the answer first (the declared claims' verdicts, then the summary
    table: each metric at the shortest and the longest length, the change tested), then how the run was made,
    then the per-task tables and figures."""
    warning = (
        [
            Paragraph(
                f"**tiny_random models present ({', '.join(data.tiny_models)}): their numbers are code-path checks only and are never findings.**"
            )
        ]
        if data.tiny_models
        else []
    )
    return [
        Heading(1, _title(data)),
        *warning,
        *claims_section(answers),
        *summary_section(data),
        *run_summary(data),
        *task_sections(data, figures, out_root),
        *caveats_section(data),
    ]


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
