"""Runs a comparison: models x methods x tasks on shared inputs, then writes results, run.json and the report.

Each model is loaded once; each method is applied with `Embedder.intervene` (restored exactly afterwards).
A method that cannot apply to a model (a RoPE baseline on BERT) is recorded as not applicable in run.json
and the report, never silently dropped. Embeddings go through the on-disk cache, so a killed run started
again recomputes at most the batch that was in flight, and its results equal an uninterrupted run's.

Paired contrasts: each cell's per-item data (``TaskContext.paired``) is kept in memory per method until
every method of the model has run; then each non-base method gets ``*_vs_base`` rows against ``base``
(`llm_collapse.tasks.base.contrast_rows`), whatever the order of the methods in the config. Without a
``base`` method (or where base is not applicable) there are no contrasts. Only the current model's data
is held: collapse embeddings (n x d per bin per method) and 0/1 vectors.
Where a task's items are the same at every length (``--design prefix``, or a task with nested lengths),
each cell also gets ``*_vs_shortest`` rows: every length against the shortest, paired over the items.
With ``reference_model`` set, that model runs first and its per-item data is kept to the end, so every other
model gets ``*_vs_reference`` rows: the same method on the same items, this model minus the reference.
With ``controls`` set, each named method also gets ``*_vs_control`` rows against its matched control method
(the same model and items); run.json records the pairs by slug (``models.<model>.controls``).

With ``save_embeddings`` set, every vector the tasks embed is kept and written to embeddings.npz at the end
(`llm_collapse.records.saved_embeddings`); `recompute_comparison` (``llm-collapse report --recompute RUN``) runs the
same loop again on those vectors, with each model as its tokenizer only (`llm_collapse.run.replay`).

A run shows one display of its progress (`llm_collapse.utils.progress.RunProgress`: model i/N, method j/M,
texts, elapsed, ETA; a bar on a terminal, a log line now and then in a redirected log) and logs each repeated
warning once, with its count and cells, at the end (`llm_collapse.utils.logs.tallied_warnings`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from llm_collapse.backends.weights import is_tiny_random
from llm_collapse.encoding.cached import cache_for
from llm_collapse.errors import DiskFullError, disk_full
from llm_collapse.interventions import InterventionError, Method, NotApplicable
from llm_collapse.interventions.posthoc import TASKS as POSTHOC_TASKS
from llm_collapse.records.record import InputsRecord, ModelRecord, RunRecord
from llm_collapse.records.results import CellKey, environment, remove_report, write_items, write_results
from llm_collapse.records.saved_embeddings import EMBEDDINGS_FILE, SavedEmbeddings
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.directory import claim_run_dir, open_run_dir
from llm_collapse.run.distributed import embed_share, world
from llm_collapse.run.models import load_for_run, reference_tokenizer
from llm_collapse.run.preflight import check_corpus, check_packages, check_posthoc, preflight
from llm_collapse.run.replay import recomputable_run, replay_embedder
from llm_collapse.run.work import text_costs
from llm_collapse.tasks.base import (
    BASE_METHOD,
    TaskContext,
    contrast_rows,
    length_contrast_rows,
    paired_task,
)
from llm_collapse.tasks.inputs import RunInputs, build_inputs
from llm_collapse.tasks.interaction import interaction_rows, unpaired_interaction_rows
from llm_collapse.tasks.items import item_rows
from llm_collapse.tasks.registry import TASKS, VS_CONTROL, VS_REFERENCE, length_paired_tasks, tasks_with
from llm_collapse.utils.logs import WarningTally, held_logs, tallied_warnings
from llm_collapse.utils.paths import RUN_FILES, cache_root
from llm_collapse.utils.progress import RunProgress

logger = logging.getLogger(__name__)


@dataclass
class RunState:
    rows: list[dict] = field(default_factory=list)
    items: list[dict] = field(default_factory=list)
    models: dict[str, ModelRecord] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_time_s: dict[str, float] = field(default_factory=dict)


def run_comparison(config: CompareConfig, *, overwrite: bool = False, report: bool = True) -> Path:
    """Runs everything ``config`` asks for and returns the run directory.

    Order: `preflight` (folders, paths, packages, corpus) first, so bad input fails before any model loads
    and before ``--out`` or the cache is touched; then the run claims ``--out`` (`claim_run_dir`: a second
    run on the same folder is refused from here on) and builds its inputs under the first model's
    tokenizer; only then is the run marker written (`llm_collapse.run.directory.open_run_dir`).

    Under torchrun/accelerate with several processes, every rank first embeds its share of the texts into the
    cache (`llm_collapse.run.distributed`); rank 0 then runs the comparison from the cache and writes everything.
    """
    processes = world(config.device)  # None for a single process
    main_process = processes is None or processes.is_main_process
    started, state = datetime.now(timezone.utc), RunState()
    clock = time.perf_counter()
    out = Path(config.out)
    with _disk_full_in_one_line(config), contextlib.ExitStack() as held:
        with held_logs():  # a refusal is one line: no warning about the inputs it refuses
            documents = preflight(config, overwrite=overwrite, report=report)
            if main_process:
                held.enter_context(claim_run_dir(out, config.run_id(), overwrite=overwrite))
            inputs = build_inputs(config, reference_tokenizer(config), documents)
            check_posthoc(config, inputs)
        state.wall_time_s["inputs"] = time.perf_counter() - clock
        if main_process:
            held.enter_context(open_run_dir(out, config.run_id(), config.to_dict()))
        if processes is not None:
            embed_share(config, inputs, processes, overwrite=overwrite)
            processes.wait_for_everyone()
            if not main_process:
                return out
            overwrite = False  # every embedding was just (re)computed by the processes
        saved = SavedEmbeddings(config.save_embeddings) if config.save_embeddings else None
        texts = inputs.texts()
        display = RunProgress(
            _reference_first(config),
            list(config.methods),
            len(texts),
            chars=[len(text) for text in texts],
            costs=text_costs(config, inputs.chars_per_token()),  # the ETA counts FLOPs, not texts
        )
        with tallied_warnings() as tally, display as progress:
            _run_models(
                config, inputs, state, overwrite=overwrite, saved=saved, progress=progress, tally=tally
            )
        _write_outputs(config, inputs, state, started, out, report=report, saved=saved)
    return out


def recompute_comparison(run_dir: Path | str, *, report: bool = True) -> Path:
    """Rebuilds a run's results, per-item results and report from its saved embeddings; loads no model.

    Refused in one line, with nothing written: a folder without run.json or embeddings.npz, a config this
    version refuses, a task that runs the model itself (`llm_collapse.run.replay.recomputable_run`), a vector
    the tasks need and the file lacks. Otherwise the run's inputs are built again (under the first model's
    tokenizer, as the run did) and every cell runs through `_run_models`, the run's own code, with each model
    as its tokenizer (`replay_embedder`) and the saved vectors. run.json keeps the run's record and gains
    ``embeddings.recomputed``: when, and by which code. The folder is claimed (`claim_run_dir`), so a run
    writing it meanwhile is never clobbered.
    """
    run_dir = Path(run_dir)
    record, config = recomputable_run(run_dir)
    state = RunState()
    with _disk_full_in_one_line(config), claim_run_dir(run_dir, record.run_id, overwrite=True):
        with held_logs():  # a refusal is one line, wherever it comes from: nothing is written before the end
            saved = SavedEmbeddings.read(run_dir / EMBEDDINGS_FILE)
            check_packages(report=report)
            documents = check_corpus(config) if tasks_with(reads_corpus=True) & set(config.tasks) else None
            inputs = build_inputs(config, reference_tokenizer(config), documents)
            models = {name: replay_embedder(name, config, record.model(name)) for name in config.models}
            _run_models(
                config,
                inputs,
                state,
                overwrite=False,
                saved=saved,
                load=lambda name: (models[name], ModelRecord()),
            )
        env, when = environment(), datetime.now(timezone.utc).isoformat()
        code = {"git_commit": env["git_commit"], "llm-collapse": env["versions"]["llm-collapse"]}
        record.embeddings["recomputed"] = {"finished": when, **code}
        with open_run_dir(
            run_dir, record.run_id, record.config
        ):  # interrupted: the marker no longer says complete
            _write_files(run_dir, state, record, report=report)
    return run_dir


def _variant_loader(model_name: str, config: CompareConfig) -> Callable[[str, str], object]:
    """The quantization task's variants: ``model_name`` loaded as this run loads it, with ``quant`` and ``dtype``."""
    return lambda quant, dtype: load_for_run(model_name, replace(config, quant=quant, dtype=dtype))


@contextlib.contextmanager
def _disk_full_in_one_line(config: CompareConfig) -> Iterator[None]:
    """A full disk met outside the cache and the atomic writes (the report's figures) as a `DiskFullError`;
    those two already raise one naming their folder."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as err:
        where = (
            Path(err.filename).parent if err.filename else f"--out {config.out} or the cache {cache_root()}"
        )
        if (full := disk_full(err, where, "the folder")) is not None:
            raise full from None
        raise


def _run_models(
    config: CompareConfig,
    inputs,
    state: RunState,
    *,
    overwrite: bool,
    saved: SavedEmbeddings | None = None,
    load: Callable[[str], tuple] | None = None,
    progress: RunProgress | None = None,
    tally: WarningTally | None = None,
) -> None:
    """Every model x method cell into ``state``, with the paired contrasts between them.

    ``load(model_name)`` gives ``(embedder, its ModelRecord)`` (default `_load_model`; a recompute's loads no
    weights); ``saved`` keeps every vector the tasks embed, or serves them in a recompute (`TaskContext.saved`);
    ``progress`` and ``tally`` (a run's, not a recompute's) are told which cell runs.
    """
    load = load or (lambda name: _load_model(name, config, inputs))
    reference: dict[str, dict] | None = None  # the reference model's per-item data, per method
    for model_name in _reference_first(config):
        clock = time.perf_counter()
        embedder, state.models[model_name] = load(model_name)
        state.wall_time_s[f"load:{model_name}"] = time.perf_counter() - clock
        paired: dict[str, dict] = {}
        slugs = {}
        for method in config.parsed_methods():
            if tally is not None:
                tally.where = f"{model_name} x {method.text}"
            with progress.cell(model_name, method.text) if progress is not None else contextlib.nullcontext():
                slugs[method.text] = _run_cell(
                    embedder, model_name, method, config, inputs, state, overwrite, paired, saved
                )
        state.rows += _contrasts(model_name, config, paired, inputs.design)
        state.rows += _control_contrasts(model_name, config, paired, slugs, state.models[model_name])
        if model_name == config.reference_model:
            reference = paired
        elif reference is not None:
            state.rows += _reference_contrasts(model_name, config, paired, reference)
        del embedder, paired
        gc.collect()


def _load_model(model_name: str, config: CompareConfig, inputs) -> tuple:
    """The model loaded as the run asks, and its run.json entry."""
    embedder = load_for_run(model_name, config)
    record = ModelRecord(
        describe=embedder.describe(),
        tiny_random=is_tiny_random(embedder.backend.weights.directory),
        n_texts=inputs.n_texts(),
    )
    return embedder, record


def _write_outputs(
    config: CompareConfig,
    inputs,
    state: RunState,
    started,
    out: Path,
    *,
    report: bool,
    saved: SavedEmbeddings | None = None,
) -> None:
    """embeddings.npz (with ``saved``), results.parquet/csv, run.json and (unless ``report`` is False) the report."""
    clock = time.perf_counter()
    record = RunRecord(
        run_id=config.run_id(),
        config=config.to_dict(),
        **environment(),
        started=started.isoformat(),
        finished=datetime.now(timezone.utc).isoformat(),
        wall_time_s=state.wall_time_s,
        inputs=InputsRecord.of(inputs.describe()),
        models=state.models,
        notes=state.notes,
    )
    try:
        if saved is not None:
            record.embeddings = saved.write(out)
        else:  # an earlier run's vectors must not pass for this run's (report --recompute would read them)
            (out / EMBEDDINGS_FILE).unlink(missing_ok=True)
        _write_files(out, state, record, report=report)
    except (
        OSError
    ):  # a full disk at the end: leave no half set of files (the rerun rebuilds them from the cache)
        for name in RUN_FILES:
            with contextlib.suppress(OSError):
                (out / name).unlink()
        remove_report(out)
        raise
    state.wall_time_s["write"] = time.perf_counter() - clock


def _write_files(out: Path, state: RunState, record: RunRecord, *, report: bool) -> None:
    """results.parquet/csv, items.parquet, run.json and (unless ``report`` is False) the report."""
    remove_report(out)  # whatever is written below, no report of an earlier run stays beside it
    if report:
        from llm_collapse.reporting.build import remove_stale_staging

        remove_stale_staging(out)  # the folder is claimed: any staging folder in it is a killed report's
    write_results(state.rows, out)
    write_items(state.items, out)
    record.write(out)
    if report:
        from llm_collapse.reporting import build_report

        build_report([out], out)


def _contrasts(model_name: str, config: CompareConfig, paired: dict[str, dict], design: str) -> list[dict]:
    """``*_vs_base`` rows of every non-base method of one model and its method x length interaction
    (`llm_collapse.tasks.interaction`: paired where the items are the same at every length, Welch's between the
    length bins of the bins design); none without a base cell."""
    base = paired.get(BASE_METHOD)
    if base is None:
        return []
    rows, nested = [], length_paired_tasks(design) & set(config.tasks)
    unpaired = {task for task in config.tasks if TASKS[task].sample} - nested  # the bins design
    for method, items in paired.items():
        if method != BASE_METHOD:
            cell = CellKey(model_name, method, config.corpus)
            rows += contrast_rows(cell, items, base)
            rows += interaction_rows(cell, items, base, nested, seed=config.seed)
            rows += unpaired_interaction_rows(cell, items, base, unpaired)
    return rows


def _control_contrasts(
    model_name: str, config: CompareConfig, paired: dict[str, dict], slugs: dict, record: ModelRecord
) -> list[dict]:
    """``*_vs_control`` rows: each ``controls`` method against its control, paired over the same items.
    A pair with a side not applicable to this model has none (run.json already says which side)."""
    rows, pairs = [], {}
    for method, control in config.controls.items():
        mine, theirs = slugs.get(method), slugs.get(control)
        if mine is None or theirs is None:
            continue
        pairs[mine] = theirs
        rows += contrast_rows(
            CellKey(model_name, mine, config.corpus), paired[mine], paired[theirs], suffix=VS_CONTROL
        )
    if pairs:
        record.controls = pairs
    return rows


def _reference_first(config: CompareConfig) -> list[str]:
    """The models in config order, the reference model (if any) moved first so the others can be paired with it."""
    ref = config.reference_model
    return [ref, *(m for m in config.models if m != ref)] if ref else list(config.models)


def _reference_contrasts(
    model_name: str, config: CompareConfig, paired: dict[str, dict], reference: dict[str, dict]
) -> list[dict]:
    """``*_vs_reference`` rows: each method of this model against the same method of the reference model,
    paired over the same items (the texts and queries do not depend on the model)."""
    rows = []
    for method, items in paired.items():
        if method in reference:
            cell = CellKey(model_name, method, config.corpus)
            rows += contrast_rows(cell, items, reference[method], suffix=VS_REFERENCE)
    return rows


def _run_cell(
    embedder,
    model_name: str,
    method: Method,
    config: CompareConfig,
    inputs: RunInputs,
    state: RunState,
    overwrite: bool,
    paired: dict | None = None,
    saved: SavedEmbeddings | None = None,
) -> str | None:
    """Runs every task of one (model, method) cell; its per-item data goes to ``paired[slug]``.

    The method's model parts are applied for the cell (`Embedder.intervene`, left however the cell ends); its
    post-hoc part transforms the vectors the tasks get. A recompute (``saved.replaying``) reads no cache and
    leaves ``prefix_sharing`` to the run's record: its embedder has no model to ask. Returns the method's slug,
    or None where it is not applicable to the model."""
    replaying = saved is not None and saved.replaying
    record = state.models[model_name]
    slug, posthoc = method.slug, method.posthoc
    with contextlib.ExitStack() as applied:
        try:
            applied.enter_context(embedder.intervene(method.model_stack))
        except InterventionError as err:
            record.not_applicable[method.text] = str(err)
            state.notes.append(f"{model_name} x {method.text}: not applicable ({err})")
            logger.warning("%s x %s: not applicable: %s", model_name, method.text, err)
            return None
        cache = None if replaying else cache_for(embedder)
        paired_lengths = length_paired_tasks(inputs.design)
        cell = TaskContext(
            embedder,
            model_name,
            slug,
            cache,
            corpus=config.corpus,
            seed=config.seed,
            batch_size=config.batch_size,
            tasks=tuple(config.tasks),
            sample=inputs.sample,
            paired_lengths=paired_lengths,
            overwrite=overwrite,
            posthoc=posthoc,
            saved=saved,
            load_variant=None if replaying else _variant_loader(model_name, config),
        )
        nested = paired_lengths & set(config.tasks)
        if (
            nested and not replaying
        ):  # the prefix design or a -start task: say how their lengths were embedded
            record.prefix_sharing[slug] = _prefix_path(embedder)
        for task in config.tasks:
            clock = time.perf_counter()
            logger.info("%s x %s: %s", model_name, method.text, task)
            try:
                if posthoc is not None and task not in POSTHOC_TASKS:
                    raise NotApplicable(f"{slug} transforms the texts of {', '.join(POSTHOC_TASKS)} only")
                state.rows += TASKS[task].run(cell, inputs.of(TASKS[task]), config.tasks[task])
            except NotApplicable as err:  # the task cannot measure this method (layerwise under SelfExtend)
                stale = [k for k in cell.paired if paired_task(k[0]) == task]  # no rows, so no contrasts
                for key in stale:
                    del cell.paired[key]
                record.not_applicable[f"{slug}:{task}"] = str(err)
                state.notes.append(f"{model_name} x {slug} x {task}: not applicable ({err})")
            state.wall_time_s[f"{model_name}:{slug}:{task}"] = time.perf_counter() - clock
        if nested:
            state.rows += length_contrast_rows(cell.key, cell.paired, nested)
        state.items += item_rows(cell.key, cell.paired)
        if paired is not None:
            paired[slug] = cell.paired
        record.truncated[slug] = cell.record.truncated
        if embedder.token_cap != embedder.max_length:
            record.token_caps[slug] = embedder.token_cap
        # What a task adds to run.json for parts of its work (the quantization task: its variants).
        record.variants.update(cell.record.variants)
        for what, why in cell.record.not_applicable.items():
            record.not_applicable[what] = why
            state.notes.append(f"{model_name} x {what}: not applicable ({why})")
        if cell.record.oom_retries:
            record.oom_retries[slug] = cell.record.oom_retries
    return slug


def _prefix_path(embedder) -> str:
    """How the prefix design's lengths are embedded for this cell: one forward per document, or separately."""
    sharing = embedder.prefix_sharing()
    if sharing.ok:
        return "one forward per document (prefix sharing is exact)"
    if sharing.limit:
        return f"one forward per document up to {sharing.limit} tokens (prefix sharing is exact there), one per length above: {sharing.reason}"
    return f"separate forwards: {sharing.reason}"
