"""``--dry-run``: what a comparison would embed, how many tokens, and a rough time estimate.

The estimate counts forward FLOPs from each model's config with `FlopModel.from_config` (the package's
one FLOP formula, `llm_collapse.bench`: 2 x linear parameters per token, plus 4 x attention channels per
attended (query, key) pair, causal and sliding-window aware) and divides by a throughput measured here and
now (`llm_collapse.cost.rate.planning_gflops`: a short matmul benchmark in the run's dtype times a
calibrated forward efficiency; ``LLM_COLLAPSE_PLAN_GFLOPS`` overrides it). It is a planning aid: the README
records how close it came to measured runs.

What is embedded is what the selected tasks count (`llm_collapse.tasks.task.Task.count`): their inputs through the
cache, and the passes a task runs itself over the shared sample, costed at the ratio the task measured for
them (`Pass.factor`: the per-layer entropy recorder, a quantized variant on CPU) of those texts' plain forwards.

Under ``--design prefix`` and for the sweeps of a task's own inputs (the ``-start`` retrieval tasks) it
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
import math
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
from llm_collapse.tasks.inputs import RunInputs, build_inputs
from llm_collapse.tasks.registry import TASKS
from llm_collapse.tasks.task import Pass

logger = logging.getLogger(__name__)

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

    What is embedded is what the tasks say (`llm_collapse.tasks.task.Workload`): their inputs through the cache
    (the shared sample only where a task embeds it), then each task's own passes over the sample (`Pass`: the
    per-layer recorder, quantized variants) at their factor of those texts' plain forwards.

    Long (one pass over models x methods, two branches: binned texts or the prefix sweep) because each line
    it prints sits next to the number it states.
    """
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
    device = resolve_device(config.device)  # --device: the plan costs the device the run will use
    workloads = {
        name: TASKS[name].count(config, options, device.type) for name, options in config.tasks.items()
    }
    passes = [(name, each) for name, workload in workloads.items() for each in workload.passes]
    embeds_sample = any(workload.sample for workload in workloads.values())
    cached = replace(inputs, sample=inputs.sample if embeds_sample else None)  # what goes through the cache
    texts = cached.texts()  # embedded once (the cache)
    step(f"counting the tokens of {len(texts)} texts")
    counts = _Tokens(tokenizer)  # each text tokenized once, however many methods ask
    tokens = sum(counts(texts)) if texts else 0
    dtype = resolve_dtype(config.dtype, device)
    peak_gflops, peak_source = planning_gflops(dtype, device=device.type)  # where no replica can be timed
    lines = [
        f"run id {config.run_id()} -> {config.out}",
        f"models {config.models}; methods {config.methods}; tasks {list(config.tasks)}; corpus {config.corpus}; lengths {config.lengths}",
        f"inputs: {json.dumps(inputs.describe())}",
        f"{len(texts)} distinct texts, {tokens} tokens under {counted_by}, per model and method",
    ]
    if absent:
        lines += _absent_lines(config, [n for n in config.models if n in absent])
    total = 0.0
    sweep = cached.prefix_sweep()  # the prefix design and the -start tasks' documents
    prefix_texts, longest = sweep
    sample = _Sample.of(inputs, config.per_length, embeds_sample)
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
        base_lengths = [copies * k for n in counts(texts or sample.texts) for k in plain[1].forwards(n)]
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
            key: _costs(counter, key[0], texts, sweep, counts, copies=copies, reads=key[1])
            for key in {plain, *(keys[m] for m in methods)}
        }  # (window switched off, how texts are read) -> (FLOPs of every text, with prefix sharing)
        model_tokenizer = _tokenizer(weights[name], weights[first], tokenizer) if here else None
        cell = _ModelCosts(
            counter, counts, copies, widens, reads, keys, bare, gflops, sample, passes,
            sharing=_sharing_of(spec, model, model_tokenizer, stacks, context) if here else _unknown_sharing,
        )  # fmt: skip
        passes_of = cell.passes_of
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
                added, said = passes_of(method)
                total += added
                lines += [f"  {name} x {method}: {line}" for line in said]
            continue
        n_docs, n_lengths = len(longest), len(config.lengths)
        for method in methods:
            if method in bare:
                lines.append(f"  {name} x {method}: {_BARE}")
            else:
                sweep_how = (cell.sharing(method), prefix_texts, n_docs, n_lengths)
                flops, how = _swept(costs[keys[method]], *sweep_how, **cell.bounded(method))
                seconds = flops / (gflops * 1e9)
                total += seconds
                window = "; sliding window off: full attention in every layer" if widens[method] else ""
                lines.append(
                    f"  {name} x {method}: {how}{window}; ~{flops / 1e12:.2f} TFLOP, ~{seconds / 60:.1f} min"
                )
            added, said = passes_of(method)
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


@dataclass(frozen=True)
class _Sample:
    """The shared sample as the tasks' passes read it: its texts, its prefix sweep, texts per length, and whether
    any task embeds it through the cache (else a pass replaces its plain forwards)."""

    texts: list[str]
    sweep: tuple[set[str], list[str]]
    per_length: int
    embedded: bool
    lengths: tuple[int, ...] = ()

    @classmethod
    def of(cls, inputs: RunInputs, per_length: int, embedded: bool) -> _Sample:
        part = inputs.sample
        swept, longest = part.sweep() if part is not None else ([], [])
        lengths = tuple(sorted(part.by_length())) if part is not None else ()
        texts = part.documents() if part is not None else []
        return cls(texts, (set(swept), longest), per_length, embedded, lengths)


@functools.lru_cache(maxsize=64)
def _pair_seconds(width: int, tokens: int) -> float:
    """Seconds of one pair's statistics (`llm_collapse.metrics.socm.cloud_terms`) at ``width`` for texts of about
    ``tokens`` pooled tokens (the cross-Gram route below the width, eigh from it), timed here on two random
    clouds, best of three."""
    import numpy as np

    from llm_collapse.metrics.socm import TextCloud, cloud_terms

    rng = np.random.default_rng(0)
    n = max(2, tokens)
    clouds = [TextCloud.of(rng.normal(size=(n, width)) + 1.0) for _ in range(2)]
    best = math.inf
    for _ in range(3):
        fresh = [TextCloud(c.mu, c.sigma, c.n, c.tokens) for c in clouds]  # no cached root: as a new pair
        clock = time.perf_counter()
        cloud_terms(*fresh)
        best = min(best, time.perf_counter() - clock)
    return best


def _sharing_of(
    spec, model, tokenizer, stacks: dict, context: ModelContext
) -> Callable[[str], PrefixSharing]:
    """Each method's prefix sharing on the meta model (`prefix_sharing`), asked once per method."""
    return functools.cache(
        lambda method: prefix_sharing(spec, model, tokenizer, stacks[method].parts, context)
    )


def _unknown_sharing(method: str) -> PrefixSharing:
    """A model without weights here: its sharing is decided when it loads, so the plan is an upper bound."""
    return PrefixSharing(0, "not known without the weights: an upper bound")


@dataclass
class _ModelCosts:
    """One model's costing in a plan, per method: how its forwards read texts (``keys``: window and reads), its
    rate, and the tasks' passes over the sample with what they cost (`passes_of`)."""

    counter: _Counter
    counts: _Tokens
    copies: int
    widens: dict[str, bool]
    reads: dict[str, _Reads]
    keys: dict[str, tuple]
    bare: set[str]
    gflops: float
    sample: _Sample
    passes: list[tuple[str, Pass]]
    sharing: Callable[[str], PrefixSharing]
    _sample_costs: dict = field(default_factory=dict)

    def bounded(self, method: str) -> dict:
        """`_bounded_cost`'s arguments for ``method``."""
        return dict(counter=self.counter, window_off=self.widens[method], counts=self.counts, copies=self.copies,
                    reads=self.reads[method])  # fmt: skip

    def passes_of(self, method: str) -> tuple[float, list[str]]:
        """What the tasks' passes add to ``method`` (`_pass_costs`): its plain seconds of the sample, with the
        sharing of the sample's own sweep (one forward per document where exact), and without it (a pass of one
        text per forward)."""
        passes, sample, rate = self.passes, self.sample, self.gflops * 1e9
        pairs = functools.partial(_pair_seconds, self.counter.width)
        if not passes or method in self.bare:
            return _pass_costs(passes, method, 0.0, 0.0 if sample.sweep[0] else None, sample, pairs)
        key = self.keys[method]
        if key not in self._sample_costs:
            self._sample_costs[key] = _costs(
                self.counter,
                key[0],
                sample.texts,
                sample.sweep,
                self.counts,
                copies=self.copies,
                reads=key[1],
            )
        every, shared = self._sample_costs[key]
        if not sample.sweep[0]:
            return _pass_costs(passes, method, every / rate, None, sample, pairs)
        flops = _swept((every, shared), self.sharing(method), sample.sweep[0], 0, 0, **self.bounded(method))[
            0
        ]
        return _pass_costs(passes, method, flops / rate, every / rate, sample, pairs)


def _swept(
    cost: tuple[float, float], sharing: PrefixSharing, swept: set[str], n_docs: int, n_lengths: int, **bounded
) -> tuple[float, str]:
    """FLOPs of a method's forwards over a prefix sweep and how they run: one per document where sharing is exact
    (``cost`` = (every text, shared)), up to a token limit (`_bounded_cost`), else every text."""
    every, shared = cost
    limit, why = sharing.limit, sharing.reason
    if limit is None:
        return shared, f"{n_docs} prefix-sweep forwards (one per document: sharing is exact)"
    if limit:
        flops, runs = _bounded_cost(every, prefix_texts=swept, limit=limit, **bounded)
        return flops, (
            f"{runs} prefix-sweep forwards ({n_docs} documents: one per document up to {limit} tokens, one per "
            f"length above: {why})"
        )
    return (
        every,
        f"{n_docs * n_lengths} prefix-sweep forwards ({n_docs} documents x {n_lengths} lengths: {why})",
    )


def _pass_costs(
    passes: list[tuple[str, Pass]],
    method: str,
    seconds: float,
    unshared: float | None,
    sample: _Sample,
    pair_seconds: Callable[[int], float] = lambda tokens: 0.0,
) -> tuple[float, list[str]]:
    """Seconds the tasks' passes (`Pass`) add to a method whose plain forwards of the sample's texts take
    ``seconds``, and a line for each: a pass reads its share of the sample's texts per length at its factor, and
    compares its pairs at every length (``pair_seconds(length)`` each: `_pair_seconds`); ``unshared``: those seconds
    without prefix sharing, which a pass of one text per forward costs (its batch of one costs about the same
    FLOPs as the batched forwards)."""
    added, lines = 0.0, []
    for task, each in passes:
        if each.base_only and method != BASE_METHOD:
            continue
        alone = each.one_per_forward and unshared is not None and unshared != seconds
        share = min(each.texts, sample.per_length) / max(sample.per_length, 1)
        cost = each.factor * share * (unshared if alone else seconds)
        cost += sum(each.pairs * pair_seconds(length) for length in sample.lengths) if each.pairs else 0.0
        added += cost
        lines.append(
            f"{task}: {each.says}"
            + (", one text per forward (no prefix sharing: its forward mixes rows)" if alone else "")
            + f": ~{cost / 60:.1f} min"
            + (
                ""
                if sample.embedded
                else " (instead of plain forwards: no task embeds these texts through the cache)"
            )
        )
    return added, lines


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
