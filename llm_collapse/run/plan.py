"""``--dry-run``: what a comparison would embed, how many tokens, and a rough time estimate.

The estimate counts forward FLOPs from each model's config with `FlopModel.from_config` (the package's
one FLOP formula, `llm_collapse.bench`: 2 x linear parameters per token, plus 4 x attention channels per
attended (query, key) pair, causal and sliding-window aware) and divides by a throughput measured here and
now (`llm_collapse.cost.rate.planning_gflops`: a short matmul benchmark in the run's dtype times a
calibrated forward efficiency; ``LLM_COLLAPSE_PLAN_GFLOPS`` overrides it). It is a planning aid: the README
records how close it came to measured runs.

Two costs the FLOP count does not see are added from measured ratios (`LAYERWISE_RECORDER`,
`QUANT_ON_CPU`): the ``layerwise`` task's entropy recorder, and the ``quantization`` task's variants, which
embed the reference's texts again (bitsandbytes on CPU is slower than fp32, int8 less so than nf4).

Under ``--design prefix`` and for the ``-start`` retrieval tasks (their documents are a prefix sweep too) it
states the forward passes per model and method: one per document where prefix
sharing is exact (`llm_collapse.encoding.prefix.prefix_sharing`, asked of the model built on the meta device: no
weights are read), else one per document and length, with the reason.

Before any cost, each model's lines say what the run will not do as asked: where it truncates (an
absolute-position model reads at most its position table, so a longer length costs that many tokens of work,
which is what the estimate counts), and which methods do not apply to it (`_not_applicable`: the run's own
check, `Stack.apply` or vLLM's `plan_interventions`, on the meta model); those cost nothing and are not run.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from llm_collapse.adapters import resolve_spec
from llm_collapse.adapters.dims import PublishedDims
from llm_collapse.backends.device import resolve_device, resolve_dtype
from llm_collapse.backends.weights import load_config, resolve_weights
from llm_collapse.cost.forward_rate import time_replica
from llm_collapse.cost.rate import planning_gflops
from llm_collapse.data import Document
from llm_collapse.data.bins import count_tokens
from llm_collapse.encoding.prefix import PrefixSharing, prefix_groups, prefix_sharing
from llm_collapse.interventions import (
    InterventionError,
    Method,
    ModelContext,
    Stack,
)
from llm_collapse.interventions.base import InputEmbedding
from llm_collapse.interventions.rope import rotary_modules
from llm_collapse.models import text_config
from llm_collapse.models.flops import FlopModel
from llm_collapse.run import overheads
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.models import model_weights
from llm_collapse.run.preflight import check_posthoc, missing_weights
from llm_collapse.tasks.base import BASE_METHOD

logger = logging.getLogger(__name__)

LAYERWISE_RECORDER = 1.9
"""Seconds of `measure_layers` per second of a plain forward of the same text: 206.8 s vs 108.2 s for one
32768-token gemma3-270m text in fp32 on a 2-core Intel Xeon with AMX (the recorder's full-attention logits
grow as L^2, so shorter texts cost relatively less)."""

QUANT_ON_CPU = {"nf4": 1.77, "int8": 1.79}
"""Seconds of a bitsandbytes variant's forward per second of the fp32 forward on CPU: 12.42 s (nf4) and
12.56 s (int8) vs 7.01 s for one 4096-token gemma3-270m text, best of 2, 2-core Intel Xeon with AMX."""


_BARE = (
    "no forward of its own (layer0: embedding lookups only; posthoc: base's vectors, transformed): ~0 TFLOP"
)


def describe_plan(
    config: CompareConfig,
    documents: list[Document] | None = None,
    *,
    report: bool = True,
    step: Callable[[str], None] | None = None,
) -> str:
    """The plan as text. Reads tokenizers and configs only: nothing is written, no GGUF is converted."""
    return plan(config, documents, report=report, step=step)[0]


def plan(
    config: CompareConfig,
    documents: list[Document] | None = None,
    *,
    report: bool = True,
    step: Callable[[str], None] | None = None,
) -> tuple[str, float]:
    """`describe_plan`'s text and the estimated seconds of embedding work it states; its last line is the whole
    command (`llm_collapse.run.overheads`: startup, inputs, loading, GGUF conversion, the report unless
    ``report`` is False). ``step`` hears what the plan is doing (the CLI prints it: a 32k plan counts millions
    of tokens).

    Long (one pass over models x methods, two branches: binned texts or the prefix sweep) because each line
    it prints sits next to the number it states.
    """
    from llm_collapse.run.inputs import build_inputs

    startup = overheads.process_age()  # before anything this plan does: what the run spends before its inputs
    step = step or (lambda text: None)
    step("reading the models' configs and tokenizers")
    specs = {name: resolve_spec(name) for name in config.models}
    absent = set(missing_weights(config, plan_only=True))  # planned from the catalog's published dims
    weights = {name: model_weights(name, config, convert=False) for name in specs if name not in absent}
    first = next(iter(weights), None)
    for name, where in weights.items():
        if where.gguf_file is not None:
            step(
                f"reading {name}'s config and tokenizer from its GGUF file (~1 min; the run converts it once)"
            )
    tokenizer, counted_by = _counting_tokenizer(weights, first)
    step(f"building the inputs ({config.corpus}, lengths {config.lengths})")
    clock = time.perf_counter()
    inputs = build_inputs(config, tokenizer, documents)
    inputs_s = time.perf_counter() - clock
    check_posthoc(config, inputs)  # the run's refusal, before its plan
    texts = inputs.texts()  # embedded once (the cache)
    step(f"counting the tokens of {len(texts)} texts")
    counts = _Tokens(tokenizer)  # each text tokenized once, however many methods ask
    tokens = sum(counts(texts)) if texts else 0
    device = resolve_device(config.device)  # --device: the plan costs the device the run will use
    dtype = resolve_dtype(config.dtype, device)
    peak_gflops, peak_source = planning_gflops(dtype, device=device.type)  # where no replica can be timed
    lines = [
        f"run id {config.run_id()} -> {config.out}",
        f"models {config.models}; methods {config.methods}; tasks {config.tasks}; corpus {config.corpus}; lengths {config.lengths}",
        f"inputs: {json.dumps(inputs.describe())}",
        f"{len(texts)} distinct texts, {tokens} tokens under {counted_by}, per model and method",
    ]
    if absent:
        lines += _absent_lines(config, [n for n in config.models if n in absent])
    total = 0.0
    prefix_texts, longest = inputs.prefix_sweep()  # the prefix design and the -start tasks' documents
    for name, (spec, _) in specs.items():
        step(f"costing {name}")
        here = name not in absent
        counter = (
            _Counter(load_config(weights[name]), causal=spec.causal)
            if here
            else _Counter(None, spec.published, spec.causal)
        )
        copies = spec.input_format.text_copies  # echo and its twice control read the text twice
        parsed = {method.text: method for method in config.parsed_methods()}
        stacks = {text: method.stack for text, method in parsed.items()}
        widens = {
            method: counter.has_window and _switches_window_off(stack) for method, stack in stacks.items()
        }
        if config.save_embeddings:
            lines.append(f"  {name}: {_saved_size(config, parsed, len(texts), counter.width)}")
        # layer0 runs no layers; a post-hoc method alone transforms base's (cached) vectors, with other parts it
        # embeds like them
        bare = {
            text
            for text, method in parsed.items()
            if method.has("layer0")
            or (method.posthoc is not None and not method.model_parts and "base" in stacks)
        }
        model = _meta_model(spec, weights[name]) if here else None
        context = ModelContext(name=name, trained_length=spec.trained_length)
        skipped = _not_applicable(config.backend, spec, weights[name], parsed, context) if here else {}
        methods = [m for m in config.methods if m not in skipped]  # what the run embeds on this model
        reads = {method: _reads(stack, model, context) for method, stack in stacks.items()}
        keys = {method: (widens[method], reads[method]) for method in config.methods}
        plain = (False, _reads(Stack([]), model, context))  # base: no intervention
        lines += [f"  {name}: {line}" for line in _truncation(plain[1].cap, config.lengths)]
        base_lengths = [copies * k for n in counts(texts) for k in plain[1].forwards(n)]
        gflops, how = (here and _replica_gflops(spec, counter, dtype, device.type, base_lengths)) or (
            peak_gflops,
            peak_source,
        )
        lines.append(f"  {name}: forwards at ~{gflops:.0f} GFLOP/s here ({how})")
        lines += [
            f"  {name} x {method}: not applicable, not run ({why}); run.json and the report say so"
            for method, why in skipped.items()
        ]
        costs = {
            key: _costs(counter, key[0], texts, (prefix_texts, longest), counts, copies=copies, reads=key[1])
            for key in {plain, *(keys[m] for m in methods)}
        }  # (window switched off, how texts are read) -> (FLOPs of every text, with prefix sharing)
        if not prefix_texts:
            every = costs[plain][0]
            seconds = sum(costs[keys[m]][0] for m in methods if m not in bare) / (gflops * 1e9)
            total += seconds
            lines.append(
                f"  {name}: ~{every / 1e12:.2f} TFLOP per method, ~{seconds / 60:.1f} min for {len(methods)} methods"
            )
            for method in (m for m in methods if keys[m] != plain and m not in bare):
                how = "; ".join(
                    [*(["window off"] if widens[method] else []), *reads[method].differs_from(plain[1])]
                )
                lines.append(f"  {name} x {method}: {how}: ~{costs[keys[method]][0] / 1e12:.2f} TFLOP")
            lines += [f"  {name} x {method}: {_BARE}" for method in methods if method in bare]
            for method in methods:
                forwards = 0.0 if method in bare else costs[keys[method]][0] / (gflops * 1e9)
                added, said = _task_costs(config, method, forwards, config.max_per_bin, device.type)
                total += added
                lines += [f"  {name} x {method}: {line}" for line in said]
            continue
        n_docs, n_lengths = len(longest), len(config.lengths)
        model_tokenizer = _tokenizer(weights[name], weights[first], tokenizer) if here else None
        for method in methods:
            sharing = (
                prefix_sharing(spec, model, model_tokenizer, stacks[method].parts, context)
                if here
                else PrefixSharing(0, "not known without the weights: an upper bound")
            )
            limit, why = sharing.limit, sharing.reason
            every, shared = costs[keys[method]]
            if method in bare:
                lines.append(f"  {name} x {method}: {_BARE}")
                added, said = _task_costs(config, method, 0.0, n_docs, device.type, unshared=0.0)
                total += added
                lines += [f"  {name} x {method}: {line}" for line in said]
                continue
            if limit is None:
                flops, how = shared, f"{n_docs} prefix-sweep forwards (one per document: sharing is exact)"
            elif limit:
                flops, runs = _bounded_cost(
                    every,
                    counter,
                    widens[method],
                    prefix_texts,
                    counts,
                    copies=copies,
                    limit=limit,
                    reads=reads[method],
                )
                how = f"{runs} prefix-sweep forwards ({n_docs} documents: one per document up to {limit} tokens, one per length above: {why})"
            else:
                flops = every
                how = f"{n_docs * n_lengths} prefix-sweep forwards ({n_docs} documents x {n_lengths} lengths: {why})"
            seconds = flops / (gflops * 1e9)
            total += seconds
            window = "; sliding window off: full attention in every layer" if widens[method] else ""
            lines.append(
                f"  {name} x {method}: {how}{window}; ~{flops / 1e12:.2f} TFLOP, ~{seconds / 60:.1f} min"
            )
            alone = every / (gflops * 1e9)  # a variant whose forward mixes rows shares no prefix
            added, said = _task_costs(config, method, seconds, n_docs, device.type, unshared=alone)
            total += added
            lines += [f"  {name} x {method}: {line}" for line in said]
    lines.append(
        f"estimated total ~{total / 60:.1f} min on {device.type} at each model's rate above "
        "(cached embeddings are not recomputed)"
        + ("; the GPU estimate of the models without weights is above" if absent else "")
    )
    parts = [
        overheads.Part("startup", startup, "this process's, measured") if startup is not None else None,
        overheads.Part("inputs", inputs_s, "built by this plan as the run builds them, measured"),
        overheads.load_part({name: _weights_gb(where) for name, where in weights.items()}),
        overheads.conversion_part(
            {name: where.gguf_file.stat().st_size / 1e6 for name, where in weights.items() if where.gguf_file}
        ),
        overheads.report_part(
            len(config.models) * len(config.methods) * len(config.tasks) * max(len(config.lengths or ()), 1),
            report=report,
        ),
    ]
    lines.append(overheads.whole_command_line(parts, total))
    return "\n".join(lines), total


def _replica_gflops(
    spec, counter: _Counter, dtype, device: str, lengths: list[int]
) -> tuple[float, str] | None:
    """The model's FLOP rate over the run's forwards from a replica of its layers timed here
    (`llm_collapse.cost.forward_rate`), or None: ``LLM_COLLAPSE_PLAN_GFLOPS`` set, NV-Embed (its own loader), no
    text, or a config transformers cannot build alone (then the matmul benchmark's rate stands)."""
    if os.environ.get("LLM_COLLAPSE_PLAN_GFLOPS") or spec.loader == "nv-embed" or not lengths:
        return None
    try:
        timing = _timed_replica(
            json.dumps(counter.config_json, sort_keys=True, default=str),
            dtype,
            device,
            spec.attn_implementation,
            not spec.causal,
        )
    except Exception as err:  # noqa: BLE001 - the matmul benchmark's rate is the fallback
        logger.debug("%s: no replica timed (%s); the matmul benchmark's rate is used", spec.name, err)
        return None
    return timing.gflops(counter.flop_model(False), lengths), timing.how


@functools.lru_cache(maxsize=16)
def _timed_replica(config_json: str, dtype, device: str, attn_implementation: str, bidirectional: bool):
    """`time_replica`, once per layout in a process (echo-gemma3-270m and gemma3-270m share one)."""
    return time_replica(
        json.loads(config_json),
        dtype=dtype,
        device=device,
        attn_implementation=attn_implementation,
        bidirectional=bidirectional,
    )


def _weights_gb(weights) -> float:
    """GB a model loads: its folder's weight files (a GGUF not converted yet: the file)."""
    if weights.gguf_file is not None:
        return overheads.folder_gb(weights.gguf_file)
    return sum(
        overheads.folder_gb(p) for p in weights.directory.glob("*.safetensors")
    ) or overheads.folder_gb(weights.directory)


STAND_IN_TOKENIZER = "minilm"
"""Whose tokenizer cuts and counts the texts when no model of the run has its weights here (all-MiniLM-L6-v2's
WordPiece, installed offline): lengths are in its tokens, so the plan's token counts are approximate."""


def _counting_tokenizer(weights: dict, first: str | None):
    """The first model's tokenizer (the run's: it cuts the texts), or the stand-in where no model is here."""
    from llm_collapse.backends.hf import load_tokenizer

    if first is not None:
        return load_tokenizer(
            weights[first].directory, gguf_file=weights[first].gguf_file
        ), f"{first}'s tokenizer"
    spec, _ = resolve_spec(STAND_IN_TOKENIZER)
    folder = resolve_weights(spec.name, spec.hub_id, spec.source, None, convert=False).directory
    said = f"{STAND_IN_TOKENIZER}'s tokenizer (a stand-in: no model's own is here; approximate)"
    return load_tokenizer(folder), said


def _absent_lines(config: CompareConfig, names: list[str]) -> list[str]:
    """What the plan of a model without weights rests on, how to fetch them, and the GPU estimate."""
    from llm_collapse.backends.availability import model_files
    from llm_collapse.cost.estimate import summary

    lines = []
    for name in names:
        files = model_files(name, config.model_paths.get(name))
        lines.append(
            f"  {name}: weights not here ({files.pinned}, {files.size}): costed from the catalog's published "
            f"dimensions; which methods apply and prefix sharing are decided when they load; fetch: {files.fix}"
        )
    lines.append(f"  {summary(config, names)}")
    return lines


def _truncation(cap: int | None, lengths: list[int]) -> list[str]:
    """A line on the lengths past ``cap``, the most tokens a model reads (`_Reads.cap` under base: an
    absolute-position model's table; the run truncates there and records how many texts it cut)."""
    over = sorted(n for n in lengths if cap is not None and n > cap)
    if not over:
        return []
    said = ", ".join(f"{n}-" for n in over[:-1]) + (" and " if len(over) > 1 else "") + str(over[-1])
    return [
        f"truncates inputs at {cap} tokens, special tokens included (its position table): the {said}-token "
        f"texts cost {cap} tokens of work each"
    ]


def _not_applicable(backend: str, spec, weights, methods: dict[str, Method], context: ModelContext) -> dict:
    """Method -> why it does not apply to the model, for the methods that do not: the refusal the run meets when
    it enters the method (`Embedder.intervene`: the hf backend enters `Stack.apply`, vLLM folds
    `plan_interventions`; a post-hoc part is split off first, as `llm_collapse.run.runner` does), here on a
    meta-device model of its own (no weights). A check that reads weights the meta model lacks (SelfExtend's
    rotation test) raises something else: that method is counted as applicable and the run decides."""
    model = _meta_model(spec, weights)
    if model is None:  # NV-Embed: decided by the spec alone, and every method here applies to it
        return {}
    refused = {}
    for method, parsed in methods.items():
        try:
            if backend == "vllm":
                from llm_collapse.backends.vllm.plan import plan_interventions

                plan_interventions(parsed.model_stack, model.config, context)
            else:
                with parsed.model_stack.apply(model, context):
                    pass
        except InterventionError as err:
            refused[method] = str(err)
        except Exception as err:  # noqa: BLE001 - the meta model cannot answer; the run will
            logger.debug(
                "%s x %s: applicability not checked on the meta model (%s)", context.name, method, err
            )
            model = _meta_model(spec, weights)  # it may have been left half changed
    return refused


def _saved_size(config: CompareConfig, methods: dict[str, Method], n_texts: int, width: int) -> str:
    """What ``--save-embeddings`` writes for one model: a vector per text and method without its post-hoc part
    (a post-hoc transform is refitted from them; `llm_collapse.records.saved_embeddings`)."""
    embedded = {method.model_stack.slug for method in methods.values()}
    size = n_texts * len(embedded) * width * (2 if config.save_embeddings == "float16" else 4)
    return (
        f"embeddings.npz: {n_texts} texts x {len(embedded)} embedded methods x {width} dims in "
        f"{config.save_embeddings} (~{size / 2**20:.1f} MiB, uncompressed)"
    )


def _task_costs(
    config: CompareConfig,
    method: str,
    seconds: float,
    per_length: int,
    device: str,
    unshared: float | None = None,
) -> tuple[float, list[str]]:
    """Seconds the ``layerwise`` and ``quantization`` tasks add to a method whose plain forwards take
    ``seconds`` for ``per_length`` texts per length, and a line for each (the variants run under base only).
    ``unshared``: the seconds without prefix sharing, which an int8 variant costs (`MIXES_ROWS`: one text
    per forward; its batch of one costs about the same FLOPs as the batched forwards).
    A run of ``layerwise`` alone runs no plain forward: its recorder's seconds replace them (the returned
    seconds are then net of them)."""
    added, lines = 0.0, []
    if "layerwise" in config.tasks:
        share = min(config.layerwise_per_bin, per_length) / max(per_length, 1)
        recorder = LAYERWISE_RECORDER * seconds * share
        alone = set(config.tasks) == {"layerwise"}
        added += recorder - (seconds if alone else 0.0)
        lines.append(
            f"layerwise: {min(config.layerwise_per_bin, per_length)} texts per length through the entropy "
            f"recorder, ~{LAYERWISE_RECORDER:g}x a plain forward each: ~{recorder / 60:.1f} min"
            + (" (instead of the plain forwards above: layerwise is the only task)" if alone else "")
        )
    from llm_collapse.backends.hf import MIXES_ROWS

    quants = config.quants if "quantization" in config.tasks and method == BASE_METHOD else None
    for quant in quants or ():
        factor = QUANT_ON_CPU[quant] if device == "cpu" else 1.0
        alone = quant in MIXES_ROWS and unshared is not None and unshared != seconds
        cost = factor * (unshared if alone else seconds)
        added += cost
        lines.append(
            f"quantization: the {quant} variant embeds the same texts, ~{factor:g}x the reference's time "
            f"({'bitsandbytes on CPU, measured' if device == 'cpu' else 'costed like the reference'})"
            + (", one text per forward (no prefix sharing: its forward mixes rows)" if alone else "")
            + f": ~{cost / 60:.1f} min"
        )
    return added, lines


def _meta_model(spec, weights):
    """The model built on the meta device (no memory, no weights): enough to read its attention modules."""
    if spec.loader == "nv-embed":
        return None  # decided by the spec alone (bidirectional backbone)
    import torch
    from transformers import AutoConfig, AutoModel

    from llm_collapse.backends.attention_direction import set_attention_direction

    extra = {"gguf_file": weights.gguf_file.name} if weights.gguf_file is not None else {}
    model_config = AutoConfig.from_pretrained(weights.directory, trust_remote_code=False, **extra)
    with torch.device("meta"):
        model = AutoModel.from_config(model_config)
    set_attention_direction(model, spec.attention)  # as the real load does: prefix sharing reads it
    return model


def _tokenizer(weights, first, first_tokenizer):
    from llm_collapse.backends.hf import load_tokenizer

    if weights == first:
        return first_tokenizer
    return load_tokenizer(weights.directory, gguf_file=weights.gguf_file)


def _costs(
    counter: _Counter,
    window_off: bool,
    texts: list[str],
    sweep: tuple,
    counts: _Tokens,
    *,
    copies: int,
    reads: _Reads | None = None,
) -> tuple[float, float]:
    """FLOPs of every text, and with the prefix sweep's texts read from one forward per document
    (``sweep`` = `RunInputs.prefix_sweep`); ``window_off`` widens every sliding layer to full attention
    (window:off, LongEmbed's presets); ``reads``: the forwards a text costs (`_reads`)."""
    model = counter.flop_model(window_off)
    every = _flops(model, texts, counts, copies=copies, reads=reads)
    prefix_texts, longest = sweep
    if not prefix_texts:
        return every, every
    shared = every - _flops(model, sorted(prefix_texts), counts, copies=copies, reads=reads)
    return every, shared + _flops(model, longest, counts, copies=copies, reads=reads)  # one per document


def _bounded_cost(
    every: float,
    counter: _Counter,
    window_off: bool,
    prefix_texts: set[str],
    counts: _Tokens,
    *,
    copies: int,
    limit: int,
    reads: _Reads | None = None,
) -> tuple[float, int]:
    """FLOPs when prefix sharing holds only among inputs of at most ``limit`` tokens
    (`llm_collapse.encoding.prefix.PrefixSharing.limit`), from ``every`` (no sharing), and the prefix-sweep forwards run.
    ``limit`` counts model-input tokens, so the tokenizer's special tokens (Gemma's BOS) count here; a
    template's words do not."""
    model = counter.flop_model(window_off)
    swept = sorted(prefix_texts)
    ids = counts.tokenizer(swept, add_special_tokens=True)["input_ids"]
    short = [i for i, x in enumerate(ids) if len(x) <= limit]
    roots = [short[r] for r in prefix_groups([ids[i] for i in short])]
    run = [swept[i] for i in roots] + [swept[i] for i, x in enumerate(ids) if len(x) > limit]
    saved = _flops(model, swept, counts, copies=copies, reads=reads) - _flops(
        model, run, counts, copies=copies, reads=reads
    )
    return every - saved, len(run)


def _switches_window_off(stack) -> bool:
    """Whether the parsed method turns a model's sliding window off (`window:off`, LongEmbed's presets)."""
    return any("window" in part.kinds for part in stack.parts)


def _flops(
    counter: FlopModel, texts: list[str], counts: _Tokens, *, copies: int, reads: _Reads | None = None
) -> float:
    """Forward FLOPs of ``texts``, each read ``copies`` times (echo: twice), the template's few tokens left out;
    ``reads``: the forwards one text costs (`_reads`; None: one of all its tokens)."""
    lengths = (reads or _Reads(None)).forwards
    return sum(counter.flops(copies * k) for n in counts(texts) for k in lengths(n))


class _Tokens:
    """Token counts under one tokenizer, each text tokenized once: the plan asks for the same texts once per
    method and model (a 32k-token run's texts took minutes to count again and again)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._counts: dict[str, int] = {}

    def __call__(self, texts: list[str]) -> list[int]:
        new = [text for text in dict.fromkeys(texts) if text not in self._counts]
        if new:
            self._counts.update(zip(new, count_tokens(new, self.tokenizer), strict=True))
        return [self._counts[text] for text in texts]


@dataclass(frozen=True)
class _Counter:
    """A model's forward FLOPs, from its config.json or, where its weights are not here, the catalog's
    published dimensions (``dims``); ``causal``: the spec's (`EmbedderSpec.causal`: gte-Qwen2 and NV-Embed
    attend bidirectionally, which their model types do not say)."""

    config_json: dict | None
    dims: PublishedDims | None = None
    causal: bool = True

    def flop_model(self, window_off: bool) -> FlopModel:
        """``window_off`` widens every sliding layer to full attention (window:off, LongEmbed's presets)."""
        if self.config_json is None:
            return self.dims.flop_model(causal=self.causal, window_off=window_off)
        config = {**self.config_json, "sliding_window": None} if window_off else self.config_json
        model = FlopModel.from_config(
            config
        )  # causal by model type; the spec may run a decoder bidirectionally
        return replace(model, causal=model.causal and self.causal)

    @property
    def has_window(self) -> bool:
        if self.config_json is None:
            return self.dims.window is not None
        return bool(self.config_json.get("sliding_window"))

    @property
    def width(self) -> int:
        if self.config_json is None:
            return self.dims.hidden
        text = self.config_json.get("text_config") or {}
        return int(self.config_json.get("hidden_size") or text.get("hidden_size") or 0)


@dataclass(frozen=True)
class _Reads:
    """How a method's forwards read one text: its first ``cap`` tokens (None: all of them), embedded by one
    forward, or by ``part``'s own forwards (`InputEmbedding`: PCW's chunks)."""

    cap: int | None
    part: InputEmbedding | None = None
    config: Any = field(default=None, compare=False)
    context: ModelContext | None = field(default=None, compare=False)

    def forwards(self, tokens: int) -> list[int]:
        """The lengths of the forwards that embed a text of ``tokens`` tokens."""
        tokens = tokens if self.cap is None else min(tokens, self.cap)
        return [tokens] if self.part is None else self.part.forward_lengths(tokens, self.config, self.context)

    def differs_from(self, other: _Reads) -> list[str]:
        """What a method's reading changes against ``other`` (base's), in words for the plan."""
        said = (
            [f"texts read up to {self.cap} tokens"] if self.cap != other.cap and self.cap is not None else []
        )
        return said + ([f"embedded by {self.part.slug}'s own forwards (its chunks)"] if self.part else [])


def _reads(stack: Stack, model, context: ModelContext) -> _Reads:
    """How ``stack``'s forwards read a text on ``model`` (meta device): up to an intervention's token cap
    (`Intervention.token_cap`), else, on an absolute-position model, up to its position table (a run truncates
    there: `llm_collapse.run.models.fit_max_length`); in PCW's chunks where it is active."""
    config = getattr(model, "config", None)
    if config is None:  # NV-Embed: a RoPE model, no cap
        return _Reads(None)
    caps = [cap for part in stack.parts if (cap := part.token_cap(config, context)) is not None]
    positions = getattr(text_config(config), "max_position_embeddings", None)
    cap = max(caps) if caps else (None if rotary_modules(model) else positions)
    part = next((p for p in stack.parts if isinstance(p, InputEmbedding)), None)
    return _Reads(cap, part, config, context)
