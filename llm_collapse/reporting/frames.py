"""Load run directories into pandas frames: tidy results + run metadata, validated and merged.

A run directory holds ``results.parquet`` (tidy rows, `RESULT_COLUMNS`; ``results.csv`` is the same for
people and is not read here) and ``run.json`` (resolved config, versions, hardware, per-model metadata).

Decisions:

- Schema: every column in `RESULT_COLUMNS` must be present (the error names the missing ones), except the
  ones added since runs were committed (`OPTIONAL_COLUMNS`, read as NaN: ``p_value``); extra
  columns are dropped with a warning, so a newer writer does not break an older report. Types are
  coerced (``length`` and ``n`` must be integral); a value that cannot be coerced is a `SchemaError`.
- Rows are unique on `KEY_COLUMNS` within one run; a duplicate is a `SchemaError` because every plot and
  table would otherwise silently average it away.
- A missing ``run.json`` is tolerated (the report says so in its caveats); an unreadable one is an error.
  It is read by `llm_collapse.records.record.RunRecord`, typed field by typed field (an entry of the wrong type
  reads as its default): bad metadata never crashes a report, and the report reads attributes.
- Merging runs adds two columns: ``run`` (the run label, the directory name, made unique) and
  ``source_model`` (the model name as written). When the same key (model, method, task, ...) is measured
  in several runs, the colliding models are shown as ``"model [run]"`` so both series stay visible and
  nothing is averaged across machines; `ReportData.renamed` records it for the caveats.
- Everything is sorted (models by name, methods with ``base`` first) so that a rebuild is byte-identical.
- ``*_vs_base`` metrics (paired contrasts of a method against ``base``, `is_contrast`) are registered with
  their metric's direction; they stay out of the summary table (not in `HEADLINE`, the registry's headline
  metrics).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from llm_collapse.errors import UserError
from llm_collapse.records.record import RUN_FILE, ModelRecord, RunRecord, RunRecordError
from llm_collapse.records.results import COLUMNS, ITEMS_FILE, OPTIONAL_COLUMNS
from llm_collapse.reporting.reread import reread

# Metric labels, directions, paired contrasts and the headline metrics live in the task registry; the
# reporting code reads them here.
from llm_collapse.tasks.registry import (  # noqa: F401
    CLOSER_IF_HIGHER,
    HEADLINE,
    HIGHER_IS_BETTER,
    METRICS,
    MORE_COLLAPSE_IF_HIGHER,
    MORE_COLLAPSE_IF_LOWER,
    PAIRED_METRICS,
    VS_BASE,
    VS_CONTROL,
    VS_REFERENCE,
    VS_SHORTEST,
    MetricInfo,
    metric_info,
)

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.parquet"
RESULTS_CSV = "results.csv"

STRING_COLUMNS: tuple[str, ...] = ("model", "method", "task", "corpus", "metric")
FLOAT_COLUMNS: tuple[str, ...] = ("depth", "layer", "value", "ci_low", "ci_high", "p_value")
INT_COLUMNS: tuple[str, ...] = ("length", "n")
RESULT_COLUMNS: tuple[str, ...] = (
    COLUMNS  # the writer's schema (llm_collapse.records.results): one source of truth
)
KEY_COLUMNS: tuple[str, ...] = ("model", "method", "task", "corpus", "length", "depth", "layer", "metric")


def is_contrast(metric: str) -> bool:
    """Whether ``metric`` is a paired difference (against ``base``, the shortest length, the reference
    model or a matched control method), not a value on the metric's own scale."""
    return metric.endswith((VS_BASE, VS_SHORTEST, VS_REFERENCE, VS_CONTROL))


class SchemaError(UserError, ValueError):
    """A run directory or its files do not match the contract (one line, fit for a CLI)."""


@dataclass(frozen=True)
class RunInfo:
    """One loaded run directory.

    Attributes:
        label: Short unique name used in the report (the directory name, de-duplicated).
        path: The directory.
        record: The parsed ``run.json`` (an empty record when absent).
        has_meta: Whether ``run.json`` existed.
    """

    label: str
    path: Path
    record: RunRecord
    has_meta: bool = True

    def model_record(self, model: str) -> ModelRecord | None:
        """``run.json``'s entry for ``model``, or None."""
        return self.record.models.get(model)


def _sorted_column(column: str, doc: str) -> property:
    """A read-only attribute: the distinct values of ``results[column]``, sorted."""
    return property(lambda self: sorted(self.results[column].unique()), doc=doc)


@dataclass
class ReportData:
    """Validated, merged results of one or more runs.

    Attributes:
        results: Tidy rows (`RESULT_COLUMNS` plus ``run`` and ``source_model``), sorted.
        runs: The runs, in the order given.
        renamed: Display model name -> (run label, model name as written), for models renamed because the
            same measurement appeared in several runs.
        empty: (model, method, task, corpus, metric) series with no value at any length (NaN everywhere: a
            kNN probe with too few texts or classes): left out of ``results``, named in the caveats.
    """

    results: pd.DataFrame
    runs: list[RunInfo]
    renamed: dict[str, tuple[str, str]] = field(default_factory=dict)
    empty: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    models = _sorted_column("model", "Display model names, sorted.")
    tasks = _sorted_column("task", "Tasks, sorted.")
    corpora = _sorted_column("corpus", "Corpora, sorted.")

    @property
    def methods(self) -> list[str]:
        """Methods, ``base`` first then sorted."""
        return sorted_methods(self.results["method"].unique())

    def method_names(self) -> dict[str, str]:
        """Slug -> the method as the runs' ``--methods`` wrote it (`llm_collapse.reporting.names`)."""
        from llm_collapse.reporting.names import method_names

        return method_names(m for run in self.runs for m in run.record.config.get("methods") or ())

    def model_sources(self, model: str) -> list[tuple[RunInfo, str]]:
        """The (run, model name as written) pairs behind a display model, in run order."""
        rows = self.results.loc[self.results["model"] == model, ["run", "source_model"]].drop_duplicates()
        pairs = set(map(tuple, rows.to_numpy().tolist()))
        return [(run, name) for run in self.runs for (label, name) in sorted(pairs) if label == run.label]

    def model_records(self, model: str) -> list[tuple[RunInfo, ModelRecord | None]]:
        """``run.json`` entries of a display model (None where a run has none), one per run it comes from."""
        return [(run, run.model_record(name)) for run, name in self.model_sources(model)]

    def recorded_models(self) -> list[tuple[str, str, ModelRecord]]:
        """Every display model's ``run.json`` entries as ``(prefix, model, record)``, where ``prefix`` names the run
        (``"[label] "``) when the report merges several; runs without an entry are left out."""
        multi = len(self.runs) > 1
        return [
            (f"[{run.label}] " if multi else "", model, record)
            for model in self.models
            for run, record in self.model_records(model)
            if record is not None
        ]

    def is_tiny(self, model: str) -> bool:
        """Whether any run marks this model ``tiny_random``."""
        return any(record is not None and record.tiny_random for _, record in self.model_records(model))

    @property
    def margins(self) -> dict[str, float]:
        """The runs' equivalence-margin overrides (config ``margins``) merged; where runs disagree on a
        metric the smallest margin counts (the harder one to call equivalent), logged."""
        merged: dict[str, float] = {}
        for run in self.runs:
            margins = run.record.config.get("margins") or {}
            if not isinstance(margins, dict):
                raise SchemaError(
                    f'{run.path}/run.json: margins must map metrics to numbers, e.g. {{"acc@1": 0.1}}, not a '
                    f"{type(margins).__name__}"
                )
            for metric, margin in margins.items():
                if (
                    not isinstance(margin, int | float)
                    or isinstance(margin, bool)
                    or not 0 < margin < math.inf
                ):
                    raise SchemaError(
                        f"{run.path}/run.json: margin {metric}={margin!r} is not a positive number"
                    )
                if metric in merged and merged[metric] != margin:
                    logger.warning("runs disagree on the %s margin; the report uses the smaller", metric)
                merged[metric] = min(margin, merged.get(metric, math.inf))
        return merged

    @property
    def tiny_models(self) -> list[str]:
        """Display names of models marked ``tiny_random``."""
        return [m for m in self.models if self.is_tiny(m)]


def sorted_methods(methods: Iterable[str]) -> list[str]:
    """Unique methods with ``base`` first, then in string order."""
    return sorted(set(methods), key=lambda m: (m != "base", m))


# ----------------------------------------------------------------------------------------------- loading


def validate_results(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check and coerce a results frame to the contract.

    Args:
        frame: Raw rows as read from ``results.parquet``.
        source: Where it came from, for error messages.

    Returns:
        A new frame with exactly `RESULT_COLUMNS`, typed (str, int64, float64).

    Raises:
        SchemaError: Missing columns (named), uncoercible values, or duplicate keys.
    """
    frame = frame.assign(**{c: v for c, v in OPTIONAL_COLUMNS.items() if c not in frame.columns})
    missing = [c for c in RESULT_COLUMNS if c not in frame.columns]
    if missing:
        raise SchemaError(f"{source}: missing columns {', '.join(missing)}")
    extra = sorted(str(c) for c in frame.columns if c not in RESULT_COLUMNS)
    if extra:
        logger.warning("%s: ignoring extra columns %s", source, ", ".join(extra))
    out = pd.DataFrame({c: frame[c] for c in RESULT_COLUMNS}).reset_index(drop=True)
    for col in STRING_COLUMNS:
        if out[col].isna().any():
            raise SchemaError(f"{source}: column {col} has missing values")
        out[col] = out[col].astype(str).astype(object)
    for col in FLOAT_COLUMNS:
        out[col] = _coerce(out[col], float, col, source)
    for col in INT_COLUMNS:
        values = _coerce(out[col], float, col, source)
        if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
            raise SchemaError(f"{source}: column {col} must hold whole numbers")
        out[col] = values.astype("int64")
    depth = out["depth"].dropna()
    if ((depth < 0) | (depth > 1)).any():
        raise SchemaError(f"{source}: column depth must lie in [0, 1] (or be NaN)")
    dup = out.duplicated(subset=list(KEY_COLUMNS), keep=False)
    if dup.any():
        first = out.loc[dup, list(KEY_COLUMNS)].iloc[0].to_dict()
        raise SchemaError(f"{source}: {int(dup.sum())} rows share a key, e.g. {first}")
    return out


def _coerce(series: pd.Series, kind: type, col: str, source: str) -> pd.Series:
    try:
        return pd.to_numeric(series, errors="raise").astype(kind)
    except (TypeError, ValueError):
        raise SchemaError(f"{source}: column {col} is not numeric") from None


def read_run_record(run_dir: Path) -> tuple[RunRecord, bool]:
    """Parse ``run.json`` (`RunRecord.read`: tolerant of wrong types); (empty record, False) when absent.

    Raises:
        SchemaError: The file exists but is not a JSON object.
    """
    try:
        record = RunRecord.read(run_dir)
    except RunRecordError as err:
        raise SchemaError(str(err)) from None
    if record is None:
        logger.warning("%s: no %s; the report will lack run metadata", run_dir, RUN_FILE)
        return RunRecord(), False
    return record, True


def load_run(run_dir: Path | str) -> tuple[pd.DataFrame, RunRecord, bool]:
    """Read and validate one run directory.

    Args:
        run_dir: Directory with ``results.parquet`` and (usually) ``run.json``.

    Returns:
        (validated results, run.json as a `RunRecord`, whether run.json existed).

    Raises:
        SchemaError: Missing directory or results file, unreadable files, schema mismatch.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SchemaError(f"{run_dir}: no such run directory")
    path = run_dir / RESULTS_FILE
    if not path.is_file():
        raise SchemaError(f"{run_dir}: no {RESULTS_FILE}")
    try:
        raw = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise SchemaError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    results = reread(validate_results(raw, str(path)), _read_items(run_dir))
    record, has_meta = read_run_record(run_dir)
    logger.info("loaded %s: %d rows", run_dir, len(results))
    return results, record, has_meta


def _read_items(run_dir: Path) -> pd.DataFrame | None:
    """The run's ``items.parquet`` (per-item values; `llm_collapse.reporting.reread` needs them), or None."""
    path = run_dir / ITEMS_FILE
    if not path.is_file():
        return None
    try:
        return pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise SchemaError(f"{path}: unreadable ({type(err).__name__}: {err})") from None


def _labels(run_dirs: Sequence[Path]) -> list[str]:
    """Unique short labels: directory names, then parent/name, then a numeric suffix."""
    names = [p.resolve().name or str(p) for p in run_dirs]
    if len(set(names)) < len(names):
        names = [f"{p.resolve().parent.name}/{p.resolve().name}" for p in run_dirs]
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if names.count(name) == 1 else f"{name}#{seen[name]}")
    return labels


def load_runs(run_dirs: Sequence[Path | str]) -> ReportData:
    """Load, validate and merge run directories (see the module docstring for the merge rules).

    Args:
        run_dirs: One or more run directories.

    Returns:
        The merged `ReportData`.

    Raises:
        SchemaError: Any directory fails `load_run`, or no directory / no rows were given.
    """
    if not run_dirs:
        raise SchemaError("no run directories given")
    paths = [Path(p) for p in run_dirs]
    labels = _labels(paths)
    frames, runs = [], []
    for path, label in zip(paths, labels, strict=True):
        results, record, has_meta = load_run(path)
        frames.append(results.assign(run=label, source_model=results["model"]))
        runs.append(RunInfo(label=label, path=path, record=record, has_meta=has_meta))
    merged = pd.concat(frames, ignore_index=True)
    if merged.empty:
        raise SchemaError(f"{', '.join(map(str, paths))}: results hold no rows")
    merged, renamed = _separate_collisions(merged)
    merged, empty = _without_empty_series(merged)
    return ReportData(results=sort_results(merged), runs=runs, renamed=renamed, empty=empty)


def _without_empty_series(merged: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str, str, str, str]]]:
    """Drops every (model, method, task, corpus, metric) series whose value is NaN at every length.

    Such a series has nothing to draw or tabulate (seaborn cannot even draw an all-NaN column); the report
    names it in its caveats instead. A series with a value at some lengths stays whole.
    """
    series = ["model", "method", "task", "corpus", "metric"]
    has_value = merged["value"].notna().groupby([merged[c] for c in series]).transform("any")
    if has_value.all():
        return merged, []
    empty = sorted(set(map(tuple, merged.loc[~has_value, series].to_numpy().tolist())))
    if has_value.any():
        return merged[has_value.to_numpy()].reset_index(drop=True), empty
    raise SchemaError(
        f"every result is NaN ({len(merged)} rows), so there is nothing to report; the run's log says why "
        "(e.g. the kNN probe needs at least two classes and more than k texts per length)"
    )


def _separate_collisions(merged: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, tuple[str, str]]]:
    """Rename models whose measurements appear in more than one run to ``"model [run]"``."""
    runs_per_key = merged.groupby(list(KEY_COLUMNS), dropna=False)["run"].nunique()
    colliding = runs_per_key[runs_per_key > 1].reset_index()["model"].unique()
    renamed: dict[str, tuple[str, str]] = {}
    if len(colliding) == 0:
        return merged, renamed
    merged = merged.copy()
    hit = merged["model"].isin(colliding)
    merged.loc[hit, "model"] = merged.loc[hit, "model"] + " [" + merged.loc[hit, "run"] + "]"
    for display, run, name in merged.loc[hit, ["model", "run", "source_model"]].drop_duplicates().to_numpy():
        renamed[str(display)] = (str(run), str(name))
    logger.warning("same measurements in several runs for %s; kept apart per run", ", ".join(colliding))
    return merged, dict(sorted(renamed.items()))


def overall_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with no depth and no layer: one value per (model, method, task, corpus, length, metric).

    Where a cell has only per-depth rows (passkey/needle without an overall row), its overall value is
    the n-weighted mean over depths (``n`` summed, no CI), and this is logged.

    Args:
        frame: Tidy results (any subset).

    Returns:
        The overall rows, canonically sorted.
    """
    flat = frame[frame["depth"].isna() & frame["layer"].isna()]
    by_depth = frame[frame["depth"].notna() & frame["layer"].isna()]
    if by_depth.empty:
        return flat
    keys = [
        c
        for c in ("model", "method", "task", "corpus", "length", "metric", "run", "source_model")
        if c in frame
    ]
    have = set(map(tuple, flat[keys].to_numpy().tolist()))
    parts = []
    for key, group in by_depth.groupby(keys, sort=True):
        if tuple(key) in have:
            continue
        weights = group["n"].to_numpy(dtype=float)
        values = group["value"].to_numpy(dtype=float)
        value = float(np.average(values, weights=weights)) if weights.sum() > 0 else float(values.mean())
        row = dict(zip(keys, key, strict=True))
        row.update(
            depth=math.nan, layer=math.nan, value=value, ci_low=math.nan, ci_high=math.nan, p_value=math.nan
        )
        row.update({column: math.nan for column in flat.columns if column not in row})
        row["n"] = int(group["n"].sum())
        parts.append(row)
    if not parts:
        return flat
    logger.info("%d overall values averaged from per-depth rows (no overall row given)", len(parts))
    return sort_results(pd.concat([flat, pd.DataFrame(parts)[list(flat.columns)]], ignore_index=True))


def sort_results(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order (method ``base`` first), index reset."""
    order = frame.assign(_base=frame["method"] != "base")
    keys = ["task", "metric", "corpus", "model", "_base", "method", "length", "depth", "layer"]
    if "run" in order.columns:
        keys.append("run")
    order = order.sort_values(keys, na_position="first", kind="mergesort")
    return order.drop(columns="_base").reset_index(drop=True)
