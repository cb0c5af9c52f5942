"""Quantization drift: one model's unquantized reference against its bitsandbytes variants, on the same texts.

For one model, `quantization_drift` loads the reference (``dtype``, default bf16, no quantization), samples
length-binned texts under its tokenizer and embeds them; then, one at a time, it loads each quantization
(``nf4``, ``int8``; same ``dtype`` as compute dtype) and embeds the same texts. Rows (results schema):

- task ``collapse``, method ``bf16`` (the reference, named by its dtype) and ``quant-<q>``: the collapse task's
  rows (`run_collapse`, unchanged) for every variant, so the metric drift per length is the gap between the
  methods' lines and tables of the report.
- task ``quantization``, method ``quant-<q>``, metric ``cosine_to_<dtype>``: mean cosine between each text's
  quantized and reference embeddings per length, with a bootstrap CI over texts (`metrics.drift`).

`write_drift_run` writes such rows as a run directory in the runner's format (results.parquet/.csv,
run.json), which ``python -m llm_collapse.report`` renders.

Decisions:

- Texts are sampled per model under its own tokenizer: drift is a within-model comparison, so models are
  not put on shared texts (unlike `llm_collapse.run.runner`).
- Lengths an absolute-position model cannot hold (minilm: 510 text tokens) are replaced by the longest bin
  that fits, ``[c / 1.05, c + 1)`` for capacity c, and the substitution is logged and recorded in the notes;
  no text is ever truncated for that. RoPE models take every length (max_length fitted as in the runner).
- All variants share max_length and batch size. Embeddings go through the on-disk cache (its key holds
  dtype and quantization), so a rerun only loads the models; ``overwrite`` recomputes.
- A variant that cannot load because bitsandbytes is missing is recorded as not applicable and the others
  still run; any other failure is an error.
- bitsandbytes int8 (LLM.int8) casts bf16 activations to fp16 in its matmuls (it warns); that cast is part
  of what the int8 drift measures.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import llm_collapse as lc
from llm_collapse.backends.hf import QUANTIZATIONS
from llm_collapse.backends.weights import is_tiny_random
from llm_collapse.cache import cache_for
from llm_collapse.data import load_corpus, sample_length_binned
from llm_collapse.data.bins import LengthBin
from llm_collapse.metrics.drift import cosine_drift
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.inputs import RunInputs
from llm_collapse.run.record import RunRecord
from llm_collapse.run.results import environment, result_row, write_results
from llm_collapse.tasks.base import TaskContext
from llm_collapse.tasks.collapse import run_collapse

logger = logging.getLogger(__name__)

TASK = "quantization"
TOLERANCE = 0.1  # bins [t, 1.1 t), as the comparison runner's collapse task


@dataclass
class DriftRun:
    """Rows and run.json material of one model's drift measurement."""

    model: str
    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_time_s: dict[str, float] = field(default_factory=dict)


def method_name(quantization: str | None, dtype: str) -> str:
    """``quant-nf4`` for a quantized variant, the dtype (``bf16``) for the reference."""
    return f"quant-{quantization}" if quantization else dtype


def fit_bins(embedder, lengths: Sequence[int]) -> tuple[dict[int, LengthBin], list[str]]:
    """Bins ``[t, 1.1 t)`` per target; targets beyond an absolute-position model's capacity are replaced.

    Returns:
        ({requested target: the bin it is measured in}, one note per replaced target).
    """
    capacity = _text_capacity(embedder)
    chosen: dict[int, LengthBin] = {}
    notes = []
    for requested in sorted(set(lengths)):
        target, hi = requested, max(requested + 1, int(requested * (1 + TOLERANCE)))
        if capacity is not None and requested > capacity:
            target, hi = int(capacity / 1.05), capacity + 1
            notes.append(
                f"{embedder.spec.name}: length {requested} exceeds its {capacity} text tokens; "
                f"measured [{target}, {hi}) instead"
            )
            logger.warning("%s", notes[-1])
        elif capacity is not None:
            hi = min(hi, capacity + 1)
        chosen[requested] = LengthBin(target, hi, target)
    return chosen, notes


def _text_capacity(embedder) -> int | None:
    """Text tokens an absolute-position model holds (positions less special tokens); None with RoPE."""
    positions = embedder.backend.max_positions
    if embedder.backend.has_rope or not positions:
        return None
    return positions - embedder.tokenizer.num_special_tokens_to_add()


def quantization_drift(
    model: str,
    *,
    lengths: Sequence[int],
    per_bin: int,
    quants: Sequence[str] = QUANTIZATIONS,
    corpus: str = "sotu",
    seed: int = 0,
    dtype: str = "bf16",
    path: str | Path | None = None,
    batch_size: int = 8,
    n_boot: int = 1000,
    overwrite: bool = False,
) -> DriftRun:
    """Embeds the same length-binned texts with the reference and each quantization of ``model``.

    Args:
        model: Registry name (``"minilm"``, ``"gemma3-270m"``...).
        lengths: Token-length targets (bins ``[t, 1.1 t)`` under the model's tokenizer).
        per_bin: Texts per length bin.
        quants: Quantizations to compare with the reference (`QUANTIZATIONS`).
        corpus: Text source (`llm_collapse.data.CORPORA` or ``folder:<path>``).
        seed: Sampling and bootstrap seed.
        dtype: Reference dtype and the variants' compute dtype.
        path: Local weights folder (e.g. a tiny checkpoint) instead of the registry's source.
        batch_size: Most texts per forward pass.
        n_boot: Bootstrap resamples for the drift interval.
        overwrite: Recompute embeddings instead of reading the cache.

    Returns:
        The rows and run metadata (see the module docstring).
    """
    unknown = [q for q in quants if q not in QUANTIZATIONS]
    if unknown:
        raise ValueError(f"Unknown quantization {unknown[0]!r}; allowed: {', '.join(QUANTIZATIONS)}")
    run = DriftRun(model=model)
    reference = method_name(None, dtype)
    config = CompareConfig(
        models=[model],
        methods=["base"],
        tasks=["collapse"],
        corpus=corpus,
        lengths=sorted(set(lengths)),
        dtype=dtype,
        model_paths={model: str(path)} if path is not None else {},
        max_per_bin=per_bin,
        batch_size=batch_size,
        seed=seed,
    )
    record = {"truncated": {}, "not_applicable": {}, "oom_retries": {}, "variants": {}}
    base_vectors: np.ndarray | None = None
    inputs: RunInputs | None = None
    max_length = None
    for quant in (None, *quants):
        method = method_name(quant, dtype)
        clock = time.perf_counter()
        try:
            embedder = lc.load_embedder(
                model, path=path, dtype=dtype, quantization=quant, batch_size=batch_size
            )
        except ImportError as err:
            if quant is None:
                raise
            record["not_applicable"][method] = str(err)
            run.notes.append(f"{model} x {method}: not applicable ({err})")
            logger.warning("%s x %s: not applicable: %s", model, method, err)
            continue
        run.wall_time_s[f"load:{model}:{method}"] = time.perf_counter() - clock
        if inputs is None:
            inputs, chosen = _sample_inputs(embedder, config, run)
            max_length = embedder.max_length
            record.update(
                describe=embedder.describe(),
                tiny_random=is_tiny_random(embedder.backend.weights.directory),
                n_texts=inputs.n_texts(),
                inputs=inputs.describe(),
                lengths={str(t): b.target for t, b in chosen.items()},
            )
        embedder.max_length = max_length
        record["variants"][method] = embedder.describe()
        clock = time.perf_counter()
        ctx = TaskContext(embedder, model, method, config, inputs, cache_for(embedder), overwrite=overwrite)
        run.rows += run_collapse(ctx)
        groups = inputs.by_length()
        vectors = ctx.encode([t.text for length in sorted(groups) for t in groups[length]])  # cached now
        if quant is None:
            base_vectors = vectors
        else:
            run.rows += _drift_rows(
                model, reference, method, corpus, groups, base_vectors, vectors, seed, n_boot
            )
        record["truncated"][method] = ctx.record.get("truncated", 0)
        if ctx.record.get("oom_retries"):
            record["oom_retries"][method] = ctx.record["oom_retries"]
        run.wall_time_s[f"embed:{model}:{method}"] = time.perf_counter() - clock
        del ctx, embedder
        gc.collect()
    run.meta = record
    return run


def _sample_inputs(embedder, config: CompareConfig, run: DriftRun) -> tuple[RunInputs, dict[int, LengthBin]]:
    """Fits the bins to ``embedder`` (updating ``config.lengths``), samples the texts, fits max_length."""
    from llm_collapse.run.models import fit_max_length

    chosen, notes = fit_bins(embedder, config.lengths)
    run.notes += notes
    first: dict[int, LengthBin] = {}
    for b in chosen.values():
        first.setdefault(b.target, b)
    bins = [first[t] for t in sorted(first)]
    config.lengths = [b.target for b in bins]
    inputs = RunInputs(tokenizer=getattr(embedder.tokenizer, "name_or_path", "") or run.model)
    inputs.binned = sample_length_binned(
        load_corpus(config.corpus), embedder.tokenizer, bins, per_bin=config.max_per_bin, seed=config.seed
    )
    fit_max_length(embedder, config)
    return inputs, chosen


def _drift_rows(model, reference, method, corpus, groups, base, vectors, seed, n_boot) -> list[dict]:
    rows, start = [], 0
    for length in sorted(groups):
        n = len(groups[length])
        point, low, high = cosine_drift(
            base[start : start + n],
            vectors[start : start + n],
            n_boot=n_boot,
            seed=seed,
            label=f"{model}/{method}/{length}",
        )
        start += n
        rows.append(
            result_row(
                model=model,
                method=method,
                task=TASK,
                corpus=corpus,
                length=length,
                metric=f"cosine_to_{reference}",
                value=point,
                ci=(low, high),
                n=n,
            )
        )
    return rows


def write_drift_run(runs: Sequence[DriftRun], out: str | Path, config: dict, *, started: datetime) -> Path:
    """Writes ``results.parquet``/``results.csv`` and ``run.json`` in the comparison runner's format.

    Args:
        runs: One `DriftRun` per model.
        out: Run directory (created; files in it are replaced atomically).
        config: The experiment's settings, recorded as ``config`` (and hashed into ``run_id``).
        started: When the experiment started (UTC).

    Returns:
        The run directory.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_results([row for run in runs for row in run.rows], out)
    run_id = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    record = {
        "run_id": run_id,
        "config": config,
        **environment(),
        "started": started.isoformat(),
        "finished": datetime.now(timezone.utc).isoformat(),
        "wall_time_s": {k: v for run in runs for k, v in run.wall_time_s.items()},
        "inputs": {run.model: run.meta.get("inputs", {}) for run in runs},
        "models": {run.model: {k: v for k, v in run.meta.items() if k != "inputs"} for run in runs},
        "notes": [note for run in runs for note in run.notes],
    }
    RunRecord.from_json(record).write(out)
    return out
