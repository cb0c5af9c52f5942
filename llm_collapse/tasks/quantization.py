"""The quantization task: the cell's model against its bitsandbytes variants (``--quants``), on the run's texts.

``python -m llm_collapse.compare --tasks collapse,quantization --quants nf4,int8 ...``. In the ``base`` cell of
each model, `run_quantization` embeds the run's shared corpus sample (`llm_collapse.tasks.sample`, the texts every
task and model sees) with the cell's model (the reference: the run's dtype, unquantized), then loads each
variant in turn and embeds the same texts through the cache. Rows per length (results schema):

- task ``quantization``, method ``quant-<q>``, metric ``cosine_to_<dtype>``: mean cosine between each text's
  variant and reference embeddings, percentile bootstrap CI over texts (`llm_collapse.metrics.drift`).
- task ``collapse``, method ``quant-<q>``: the collapse task's rows for the variant (`run_collapse`), and its
  ``pairwise_cosine_vs_base`` / ``centroid_distance_vs_base`` / ``global_centroid_distance_vs_base`` paired
  over the same texts against the reference (`contrast_rows`), so collapse-metric drift has a paired interval.
- task ``collapse``, method ``base``: the reference's rows, only when the run does not ask for ``collapse``
  (otherwise that task writes them).
- Under ``--design prefix`` (the same texts at every length): ``cosine_to_<dtype>_vs_shortest`` (paired
  t-test over the per-text cosines) and the variant's collapse ``*_vs_shortest`` rows, so a change of drift
  with length is tested on the same texts. The runner writes such rows for the run's methods; a variant is
  not one of them, so this task writes its own.

Decisions:

- Only under ``base``: any other method raises `NotApplicable` (recorded in run.json); drift is a property
  of the unintervened model. The config refuses the task without ``base``, with ``--quant`` (the reference
  must be unquantized) and on vLLM (no bitsandbytes there).
- Variants load through the cell's ``load_variant`` (the run's `load_for_run` on a copy of its config: ``quant=q``,
  ``dtype`` = the reference's
  resolved dtype, used as compute dtype): same weights path, pooling and batch size, and the reference's
  max_length, so they tokenise and truncate exactly as it does. One variant is in memory at a time, beside
  the reference; each is freed (and the CUDA cache emptied) before the next loads.
- Texts longer than a model holds are truncated as in every task (minilm at 1024: 512 positions), counted
  once under ``base`` in run.json's ``truncated`` (the variants truncate the same texts). Before issue 12
  the drift had its own runner (``experiments/quantization.py``) that sampled texts per model under its
  own tokenizer and replaced such lengths by the longest bin the model holds (minilm: [485, 511) for 1024).
- A variant that cannot load because bitsandbytes is missing or broken (ImportError) is recorded as not
  applicable (``ctx.record.not_applicable``, which the runner copies to run.json and its notes) and the
  others still run; the preflight already refuses a run whose bitsandbytes is not installed. Each variant's
  `Embedder.describe` and load/embed seconds go to run.json's ``variants`` (`ModelRecord.variants`).
- Under several processes the ranks pre-embed only the run's methods; rank 0 embeds the variants itself.
- bitsandbytes int8 (LLM.int8) casts bf16 activations to fp16 in its matmuls (it warns); that cast is part
  of what the int8 drift measures.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from llm_collapse.backends import QUANTIZATIONS
from llm_collapse.errors import ConfigError
from llm_collapse.interventions.base import NotApplicable
from llm_collapse.metrics.collapse import centroid
from llm_collapse.tasks.base import (
    BASE_METHOD,
    EMBEDDINGS,
    PairedItems,
    TaskContext,
    contrast_rows,
    length_contrast_rows,
    paired_key,
)
from llm_collapse.tasks.collapse import run_collapse
from llm_collapse.tasks.sample import CorpusSample
from llm_collapse.tasks.task import (
    CLOSER_IF_HIGHER,
    MetricInfo,
    Options,
    Pass,
    RunView,
    Task,
    Workload,
    option,
)

logger = logging.getLogger(__name__)

TASK = "quantization"
ON_CPU = {"nf4": 1.77, "int8": 1.79}
"""Seconds of a bitsandbytes variant's forward per second of the fp32 forward on CPU: 12.42 s (nf4) and
12.56 s (int8) vs 7.01 s for one 4096-token gemma3-270m text, best of 2, 2-core Intel Xeon with AMX."""


@dataclass(frozen=True)
class QuantizationOptions(Options):
    title: ClassVar[str] = "quantization drift"
    quants: list[str] | None = option(
        help="variants the quantization task compares with the unquantized model, comma-separated, of "
        f"{', '.join(QUANTIZATIONS)}",
        shown="all of them",
    )

    def validate(self, run: RunView, task: str) -> QuantizationOptions:
        """Known variants, each once (unset: every quantization); the task needs base, hf and an unquantized
        reference."""
        quants = list(QUANTIZATIONS) if self.quants is None else self.quants
        if not quants:
            raise ConfigError(f"--quants is empty; name at least one of {', '.join(QUANTIZATIONS)}")
        for quant in quants:
            if quant not in QUANTIZATIONS:
                raise ConfigError(f"Unknown --quants entry {quant!r}; allowed: {', '.join(QUANTIZATIONS)}")
        if len(set(quants)) < len(quants):
            raise ConfigError(f"--quants lists a quantization twice ({','.join(quants)}); list each once")
        if run.quant is not None:
            raise ConfigError(
                f"--tasks quantization compares --quants with the unquantized model, but --quant {run.quant} "
                "quantizes it; drop --quant"
            )
        if run.backend != "hf":
            raise ConfigError(
                f"--tasks quantization loads bitsandbytes variants, which backend {run.backend!r} cannot; "
                "use --backend hf"
            )
        if all(method.slug != BASE_METHOD for method in run.parsed_methods()):
            raise ConfigError(
                "--tasks quantization measures the model without interventions; add base to --methods"
            )
        return replace(self, quants=quants)


def quantization_workload(run: RunView, options: QuantizationOptions, device: str) -> Workload:
    """Each variant embeds the sample again under base, at `ON_CPU` x the reference's time on CPU (costed like the
    reference elsewhere); a variant whose forward mixes rows embeds one text per forward."""
    from llm_collapse.backends.hf import MIXES_ROWS

    passes = []
    for quant in options.quants or QUANTIZATIONS:
        factor = ON_CPU[quant] if device == "cpu" else 1.0
        how = "bitsandbytes on CPU, measured" if device == "cpu" else "costed like the reference"
        says = f"the {quant} variant embeds the same texts, ~{factor:g}x the reference's time ({how})"
        passes.append(Pass(says, run.per_length, factor, base_only=True, one_per_forward=quant in MIXES_ROWS))
    return Workload(sample=True, passes=tuple(passes))


def method_name(quantization: str) -> str:
    """``quant-nf4``: the method column of a variant's rows."""
    return f"quant-{quantization}"


def run_quantization(ctx: TaskContext, sample: CorpusSample, options: QuantizationOptions) -> list[dict]:
    """Drift and collapse rows of every ``options.quants`` variant against the cell's model (base only)."""
    if ctx.method != BASE_METHOD:
        raise NotApplicable(f"quantization drift is measured without interventions, under {BASE_METHOD} only")
    groups = sample.by_length()
    texts = [t.text for length in sorted(groups) for t in groups[length]]
    if not texts:
        return []
    reference = ctx.encode(texts)  # counted once in run.json's truncated, as the collapse task's texts
    rows = [] if "collapse" in ctx.tasks else run_collapse(ctx, sample)
    dtype = ctx.embedder.describe()["dtype"]
    for quant in options.quants or ():
        rows += _variant_rows(ctx, sample, quant, dtype, groups, reference)
        gc.collect()  # the variant is unreferenced once _variant_rows returns: free it before the next loads
        _empty_cuda_cache()
    return rows


def _variant_rows(
    ctx: TaskContext, sample: CorpusSample, quant: str, dtype: str, groups: dict, reference: np.ndarray
) -> list[dict]:
    """Loads one variant, embeds the texts and returns its rows (holding no reference to it afterwards)."""
    method = method_name(quant)
    clock = time.perf_counter()
    try:
        variant = ctx.load_variant(quant, dtype)
    except ImportError as err:
        ctx.record.not_applicable[method] = str(err)
        logger.warning("%s x %s: not applicable: %s", ctx.model, method, err)
        return []
    variant.max_length = ctx.embedder.max_length
    loaded = time.perf_counter() - clock
    # the model road and scipy.stats load where a cell runs, not where the task is declared
    from llm_collapse.encoding.cached import cache_for
    from llm_collapse.metrics.drift import cosine_drift, paired_cosine

    cell = TaskContext(
        variant, ctx.model, method, cache_for(variant), corpus=ctx.corpus, seed=ctx.seed,
        batch_size=ctx.batch_size, tasks=ctx.tasks, sample=sample, paired_lengths=ctx.paired_lengths,
        overwrite=ctx.overwrite,
    )  # fmt: skip
    rows = run_collapse(cell, sample)  # embeds the texts in the order of `reference`; cached afterwards
    vectors = cell.encode([t.text for length in sorted(groups) for t in groups[length]])
    metric, base_items, start = f"cosine_to_{dtype}", {}, 0
    global_centroid = centroid(reference)  # as `run_collapse` keeps it, for global_centroid_distance_vs_base
    for length in sorted(groups):
        n = len(groups[length])
        mine, theirs = vectors[start : start + n], reference[start : start + n]
        base_items[paired_key("collapse", length)] = PairedItems(
            EMBEDDINGS, theirs, reference=global_centroid
        )
        label = f"{ctx.model}/{method}/{length}"
        point, low, high = cosine_drift(theirs, mine, seed=ctx.seed, label=label)
        cell.paired[paired_key(TASK, length)] = PairedItems(
            metric, paired_cosine(theirs, mine), continuous=True
        )
        start += n
        rows.append(cell.row(task=TASK, length=length, metric=metric, value=point, ci=(low, high), n=n))
    rows += contrast_rows(cell.key, cell.paired, base_items)
    nested = ctx.paired_lengths & {"collapse", TASK}
    rows += length_contrast_rows(cell.key, cell.paired, nested)
    ctx.record.oom_retries += [f"{method}: {retry}" for retry in cell.record.oom_retries]
    ctx.record.variants[method] = {
        **variant.describe(),
        "load_s": round(loaded, 3),
        "embed_s": round(time.perf_counter() - clock - loaded, 3),
    }
    return rows


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


TASK_SPEC = Task(
    name=TASK,
    title="Quantization drift",
    run=run_quantization,
    metrics={
        f"cosine_to_{dtype}": MetricInfo(
            f"mean cosine to the {dtype} embedding", CLOSER_IF_HIGHER, paired=True, digits=5
        )
        for dtype in ("bf16", "fp16", "fp32")  # the drift against whichever dtype the reference ran in
    },
    options=QuantizationOptions,
    workload=quantization_workload,
    headline=("cosine_to_bf16", "cosine_to_fp16", "cosine_to_fp32"),  # a run has one of them
    sample=True,
    vectors_only=False,
    packages=(("bitsandbytes", "--tasks quantization", "pip install 'llm-collapse[quant]'"),),
)
