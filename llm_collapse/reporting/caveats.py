"""The Caveats section of a run report: only what applies. tiny_random models (in bold: code-path checks only,
never findings), truncation counts, lengths past a sliding window without ``window:off``, methods the runner
recorded as ``not_applicable`` and ``oom_retries``, series NaN at every length, merged runs (machines and
commits), models renamed because several runs measured the same thing, missing metadata."""

from __future__ import annotations

import json

from llm_collapse.reporting.figures import length_label
from llm_collapse.reporting.frames import ReportData, sorted_methods
from llm_collapse.reporting.markup import codes, compact
from llm_collapse.reporting.names import method_cell, method_cells
from llm_collapse.reporting.tables import summary_models
from llm_collapse.tasks.knn import K as KNN_K

# Why a task's metric can be NaN at every length (the caveat of a series left out of the report).
EMPTY_WHY = {
    "knn": f"the kNN probe needs at least two label classes and more than k = {KNN_K} labelled texts per length; "
    "raise --max-per-bin or choose a label with two classes in the sample",
}


def caveats(data: ReportData) -> list[str]:
    """Caveat lines that apply to these results (empty when none does)."""
    lines = _tiny_caveats(data)
    lines += _truncation_caveats(data)
    lines += _window_caveats(data)
    lines += _skipped_caveats(data)
    lines += _empty_caveats(data)
    lines += _merge_caveats(data)
    lines += _metadata_caveats(data)
    lines += _limit_caveats(data)
    return lines


def _limit_caveats(data: ReportData) -> list[str]:
    """Runs made with ``--limit N``: a quick look at few texts per length, not a finding."""
    lines = []
    for run in data.runs:
        config = run.record.config if isinstance(run.record.config, dict) else {}
        if config.get("limit") is not None:
            lines.append(
                f"Run {run.label} was a quick look (--limit {config['limit']}: at most that many texts per length "
                "in every task): its intervals are wide and its verdicts are not findings."
            )
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
        f"tiny_random models {codes(tiny)}: **their numbers are code-path checks only and are never findings** "
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
            lines.append(
                f"{prefix}Truncation: {model} / {method_cell(method)}: {count}{of} texts truncated{cap}."
            )
    return lines


def _skipped_caveats(data: ReportData) -> list[str]:
    """Methods the runner could not apply (``not_applicable``) and OOM retries, per model."""
    lines = []
    for prefix, model, record in data.recorded_models():
        skipped = record.not_applicable
        for what in sorted(skipped):
            lines.append(f"{prefix}Not measured: {model} / {method_cell(what)}: {skipped[what]}")
        for what, retries in sorted(record.oom_retries.items()):
            count = len(retries) if isinstance(retries, list) else retries
            if count > 0:
                last = f"; last: {retries[-1]}" if isinstance(retries, list) else ""
                lines.append(
                    f"{prefix}Out-of-memory retries: {model} / {method_cell(what)}: {count} (smaller batches{last})."
                )
    return lines


def _empty_caveats(data: ReportData) -> list[str]:
    """Series without a value at any length, left out of figures and tables (`ReportData.empty`)."""
    lines = []
    for model, method, task, corpus, metric in data.empty:
        why = EMPTY_WHY.get(task, "the run's log says why")
        lines.append(
            f"No value: {model} / {method_cell(method)} / {task} `{metric}` on {corpus} is NaN at every length, so it is "
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
            f"sees only the last {window} tokens); lengths {lengths} exceed it under {method_cells(sorted_methods(rows['method']))}. "
            f"Compare with `window:off` before reading those bins as full-context behaviour."
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
        f"**{run.label}** (hardware: {compact(run.record.hardware or '?')})" for run in data.runs
    )
    lines = [f"Merged {len(data.runs)} runs {machines}: {runs}."]
    commits = sorted({str(run.record.git_commit) for run in data.runs if run.record.git_commit})
    if len(commits) > 1:
        lines.append(f"The merged runs come from different commits: {codes(commits)}.")
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
