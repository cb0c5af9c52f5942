"""Expected GPU time and peak memory per model and length, by counting (CLI: ``python -m llm_collapse.estimate``).

Usage::

    python -m llm_collapse.estimate --config experiments/gpu_7b.yaml --tflops 400 --gpu-gib 80
    python -m llm_collapse.estimate --config experiments/gpu_7b.yaml --markdown reports/gpu_7b/estimate.md
    python -m llm_collapse.estimate --config experiments/gpu_7b.yaml --tasks collapse,position  # any flag

These are **estimates from FLOP and byte counting, not measurements**: no model is loaded and no weights are
needed, so they can be made on a machine that will never hold the 7B-9B checkpoints. Exit codes: 0 done,
2 bad input (one line on stderr).

Decisions
    * Dimensions come from the published ``config.json`` files (each catalog spec's ``published``),
      not from the tiny test replicas in `llm_collapse.testing.checkpoints`, which keep the layout but shrink
      every size. A model without an entry is refused (exit 2) rather than guessed.
    * Model FLOPs per text follow `llm_collapse.models.flops.FlopModel` (the one FLOP formula of the package):
      ``2 x linear params x n`` plus ``4 x heads x head_dim x pairs`` per layer, where ``pairs`` is
      ``n (n + 1) / 2`` for a causal layer, ``sum_i min(i + 1, window)`` for a sliding-window layer and
      ``n^2`` for a bidirectional one (NV-Embed). NV-Embed adds its latent-attention pooler: the per-token
      projections (to_q, to_out, the GEGLU feed-forward) as linear FLOPs, ``4 x heads x head_dim x latents``
      per token for the cross-attention, and ``to_kv`` on the 512 latents once per text. Echo runs the text
      twice: ``n = 2 L`` positions (the template's few tokens are left out).
    * The attention path is the one ``load_embedder`` picks on CUDA: a spec asking for ``chunked`` (bge-gemma2's
      exact softcap) runs ``fused`` there (`llm_collapse.backends.fused_attention.choose_attention`).
    * Time per text counts the work the package's attention path *executes*, which is not always the useful
      work: ``banded`` (Mistral) runs each chunk of ``window`` queries against ``2 window - 1`` keys; ``fused``
      (flex attention) computes every 128 x 128 block that holds an allowed pair (`fused_pairs`) and keeps its
      logits on chip; ``chunked`` (the fallback without flex attention/Triton, ``--softcap-attention chunked``) and
      SelfExtend compute every (query, key) pair of every layer, causal or sliding, and move each float32 logit
      through HBM about `LOGIT_BYTES` times (scale, softcap, mask, softmax, casts), which dominates bge-gemma2
      above ~8k tokens. Seconds = executed FLOPs at the assumed sustained TFLOP/s + logit bytes at the assumed
      sustained HBM bandwidth. Both assumptions are command-line options and are printed in the header; the
      defaults are 40% of an H100 SXM's 989 dense bf16 TFLOP/s and 70% of its 3.35 TB/s.
    * Peak memory = weights (every parameter, embedding table included, in the run's dtype or quantization)
      + the largest forward pass: ``T = rows x n`` tokens, ``rows = min(batch_size, max(1, 16384 // n))``
      (the embedder's token budget), with KV-free activations: 8 bf16-sized hidden-size tensors (residual,
      RMSNorm's float32 copies, sub-layer output, last hidden state and its float32 pooling copy), then the
      largest of the gated MLP (3 intermediate-size tensors: act(gate), up and their product are alive
      together), the attention projections (q, k, v, output; the fused kernels' own memory is O(T)), a
      ``chunked`` query chunk's logits (8 bytes per logit: float32 logits plus the bf16 copies), and
      NV-Embed's pooler (3 tensors of heads x head_dim = 32768 channels); plus the boolean (rows, 1, n, n)
      mask transformers' ``sdpa_mask`` builds for sliding layers when n exceeds the window and the path is
      ``sdpa``/``eager`` (``banded``, ``chunked`` and ``fused`` apply the window from positions, and an unpadded
      bidirectional batch gets no mask: `llm_collapse.backends.mask_patterns`, `models.nv_embed.key_padding_mask`),
      every layer's hidden states for ``layerwise``, and a fixed CUDA context/allocator overhead. Batches are
      assumed unpadded (the planner sorts by length).
    * One sustained TFLOP/s for every matmul and fused attention kernel: kernel efficiency differences
      (NV-Embed's masked sdpa runs the memory-efficient kernel, not flash) are inside that assumption.
    * Totals: texts per length as the tasks count them (`llm_collapse.tasks.task.Workload`): ``max_per_bin``
      texts of the shared sample where a task embeds it (an upper bound: a corpus may hold fewer long texts),
      each task's own documents (``retrieval_docs`` for each of passkey, needle and their ``-start`` variants,
      two position variants for ``position``) and queries at `QUERY_TOKENS` tokens, and the extra forwards
      with hidden states of a pass (``layerwise_per_bin``); times
      the methods (each method re-embeds everything; ``window:off`` on a model without a window is not
      applicable and costs nothing). Prefix sharing and the embedding cache of an earlier run are not counted (an upper
      bound): the ``-start`` tasks cost one forward per document and length here, which is exact for the
      models that never share (e5-mistral and NV-Embed append EOS or attend bidirectionally, echo repeats the
      text) and an upper bound for bge-gemma2 (one forward per document where sharing is exact; ``--dry-run``
      counts that); their queries, the same at every length, are counted at every length. Quantized matmuls
      are costed like bf16.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llm_collapse.adapters.dims import PublishedDims
from llm_collapse.errors import UserError
from llm_collapse.utils.markdown import markdown_table

if TYPE_CHECKING:
    from llm_collapse.interventions import Method

logger = logging.getLogger(__name__)

__all__ = [
    "Assumptions",
    "EstimateError",
    "Estimate",
    "Row",
    "TextCost",
    "estimate",
    "forward_rows",
    "fused_pairs",
    "model_for",
    "text_cost",
    "to_markdown",
]

GIB = 1024**3
H100_DENSE_BF16_TFLOPS = 989.0
"""NVIDIA H100 SXM datasheet, dense (no sparsity) bf16 tensor-core TFLOP/s."""
H100_HBM_TBS = 3.35
"""NVIDIA H100 SXM datasheet HBM3 bandwidth, TB/s."""
DEFAULT_TFLOPS = 0.4 * H100_DENSE_BF16_TFLOPS
DEFAULT_HBM_TBS = 0.7 * H100_HBM_TBS
DEFAULT_GPU_GIB = 80.0
DEFAULT_OVERHEAD_GIB = 1.5
"""CUDA context, cuBLAS workspaces and allocator slack, held fixed."""
QUERY_TOKENS = 64
"""Tokens per retrieval query, prompt included (passkey/needle/position queries are one sentence)."""
LOGIT_BYTES = 90
"""HBM bytes moved per materialised logit in `llm_collapse.backends.chunked_attention`: bf16 matmul output
(2), ``.float()`` (2 + 4), scale, softcap div/tanh/mul in place (4 x 8), mask (1 + 8), softmax
max/sub/exp/sum/div (4 + 8 + 8 + 4 + 8), cast to bf16 (4 + 2), read by the PV matmul (2); chunks of up to
256 MiB do not stay in L2."""
LOGIT_CHUNK_BYTES = 8
"""Live bytes per logit of one query chunk: float32 logits plus the bf16 matmul output / probabilities."""
PAIR_SECONDS_4096 = 1.0
"""Seconds of one pair of d x d statistics (two eigendecompositions and a sandwich product, O(d^3)) at d = 4096 on
an H100 (anchors.md 12.4; an estimate, not measured here)."""
MAX_TOKENS_PER_BATCH = 16384
"""`llm_collapse.load.load_embedder`'s default token budget per forward pass (the runner keeps it)."""


class EstimateError(UserError, ValueError):
    """An estimate that cannot be made from the given input; the message is one line."""


# --------------------------------------------------------------------------------------- published dims


# ------------------------------------------------------------------------------------------ counting


@dataclass(frozen=True)
class Assumptions:
    """Hardware numbers the estimate divides by; printed with every table."""

    tflops: float = DEFAULT_TFLOPS
    hbm_tbs: float = DEFAULT_HBM_TBS
    gpu_gib: float = DEFAULT_GPU_GIB
    overhead_gib: float = DEFAULT_OVERHEAD_GIB
    softcap_attention: str = "fused"  # how a spec asking for "chunked" runs: fused (CUDA default) or chunked

    def check(self) -> Assumptions:
        for name in ("tflops", "hbm_tbs", "gpu_gib"):
            if not getattr(self, name) > 0:
                raise EstimateError(f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")
        if not self.overhead_gib >= 0:
            raise EstimateError(f"--overhead-gib must be >= 0, got {self.overhead_gib}")
        if self.softcap_attention not in ("fused", "chunked"):
            raise EstimateError(
                f"--softcap-attention must be 'fused' or 'chunked', got {self.softcap_attention!r}"
            )
        return self


@dataclass(frozen=True)
class ModelPlan:
    """What the estimate needs about one registered model as the package runs it."""

    name: str
    dims: PublishedDims
    attention: str  # the path run on CUDA: "banded", "fused", "chunked", "eager" or "sdpa"
    copies: int  # copies of the text in one input (echo: 2)
    causal: bool = True  # the spec's (`EmbedderSpec.causal`): NV-Embed and gte-Qwen2 are bidirectional


def model_for(name: str, attention: str | None = None) -> ModelPlan:
    """The published dimensions and CUDA attention path of a registered model (`EstimateError` if none).

    ``attention="chunked"`` costs the fallback a spec asking for ``chunked`` runs where flex attention is
    unavailable; by default such a spec is costed as ``fused``, what CUDA runs.
    """
    from llm_collapse.adapters import EMBEDDERS, resolve_spec

    CHUNKED, FUSED = "chunked", "fused"  # the backends' names; not imported from them (they import torch)

    spec, _ = resolve_spec(name)
    dims = spec.published
    if dims is None:
        covered = sorted(n for n in EMBEDDERS if EMBEDDERS.get(n).published is not None)
        raise EstimateError(
            f"no published dimensions for {name!r} (its spec has none); the estimate covers {', '.join(covered)}"
        )
    path = spec.attn_implementation
    if path == CHUNKED:
        path = attention if attention in (CHUNKED, FUSED) else FUSED
    return ModelPlan(name, dims, path, spec.input_format.text_copies, spec.causal)


def _band_pairs(n: int, window: int) -> int:
    """(query, key) pairs `banded` attention computes: each chunk of ``window`` queries x its key band."""
    pairs = 0
    for start in range(0, n, window):
        stop = min(start + window, n)
        pairs += (stop - start) * (stop - max(0, start - window + 1))
    return pairs


def fused_pairs(n: int, window: int | None, causal: bool = True, block: int = 128) -> int:
    """(query, key) pairs flex attention computes: ``block x block`` tiles holding at least one allowed pair.

    A tile of query rows ``[qa, qb]`` and keys ``[ka, kb]`` is computed when some key is allowed for some query:
    ``ka <= qb`` (causal) and ``kb > qa - window`` (sliding). Edge tiles count their real rows and keys.
    """
    pairs = 0
    for qa in range(0, n, block):
        qb = min(qa + block, n) - 1
        if not causal:
            pairs += (qb - qa + 1) * n
            continue
        first = max(0, qa - window + 1) // block if window is not None else 0  # the oldest key's tile
        keys = min((qb // block + 1) * block, n) - first * block
        pairs += (qb - qa + 1) * keys
    return pairs


def _executed_pairs(causal: bool, attention: str, n: int, window: int | None, *, materialised: bool) -> int:
    """(query, key) pairs one layer's kernel computes for an unpadded text of ``n`` positions."""
    if attention == "fused" and not materialised:
        return fused_pairs(n, window, causal)
    if materialised or attention in ("chunked", "eager") or not causal:
        return n * n  # every key for every query chunk; bidirectional needs them all anyway
    if window is not None and n > window:
        return _band_pairs(n, window) if attention == "banded" else n * n  # sdpa: dense boolean mask
    return n * (n + 1) // 2  # fused kernel with is_causal skips the upper triangle


@dataclass(frozen=True)
class TextCost:
    """Cost of one text of ``positions`` positions under one method."""

    positions: int
    model_flops: float  # useful FLOPs (cost.flops.FlopModel convention + NV-Embed's pooler)
    executed_flops: float  # what the attention path really computes
    logit_bytes: float  # HBM traffic of materialised float32 logits
    seconds: float


def text_cost(
    plan: ModelPlan,
    length: int,
    assumptions: Assumptions,
    *,
    window_off: bool = False,
    selfextend: bool = False,
) -> TextCost:
    """FLOPs and seconds for one text of ``length`` tokens (``copies x length`` positions: echo reads it twice)."""
    n = plan.copies * length
    dims = plan.dims
    counter = dims.flop_model(causal=plan.causal, window_off=window_off)
    pooler = dims.pooler.flops(n, dims.hidden) if dims.pooler else 0.0
    model = counter.flops(n) + pooler
    materialised = selfextend or plan.attention in ("chunked", "eager")
    executed_pairs = sum(
        _executed_pairs(plan.causal, plan.attention, n, w, materialised=materialised)
        for w in counter.layer_windows
    )
    qk_passes = 2 if selfextend else 1  # SelfExtend: a neighbour and a grouped logit matrix per chunk
    executed = counter.pair_flops(n, executed_pairs, qk_passes=qk_passes) + pooler
    logit_bytes = float(LOGIT_BYTES * qk_passes * dims.heads * executed_pairs) if materialised else 0.0
    seconds = executed / (assumptions.tflops * 1e12) + logit_bytes / (assumptions.hbm_tbs * 1e12)
    return TextCost(n, model, executed, logit_bytes, seconds)


def forward_rows(positions: int, batch_size: int, max_tokens: int = MAX_TOKENS_PER_BATCH) -> int:
    """Texts in the largest forward pass of texts of ``positions`` positions (`plan_batches`' budget)."""
    return min(batch_size, max(1, max_tokens // positions))


def _weight_bytes(dims: PublishedDims, dtype_bytes: int, quant: str | None) -> float:
    per_param = {"nf4": 0.5, "int8": 1.0}.get(quant or "", dtype_bytes)
    return dims.params() * per_param


def peak_bytes(
    plan: ModelPlan,
    positions: int,
    rows: int,
    *,
    dtype_bytes: int = 2,
    quant: str | None = None,
    window_off: bool = False,
    selfextend: bool = False,
    hidden_states: bool = False,
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
) -> float:
    """Peak device memory of one forward of ``rows`` unpadded texts of ``positions`` positions (see above)."""
    dims, n, b = plan.dims, positions, dtype_bytes
    tokens = rows * n
    residual = 8 * tokens * dims.hidden * b  # RMSNorm and pooling run in float32: 2 x 2 bf16-sized copies
    mlp = 3 * tokens * dims.intermediate * b
    projections = tokens * (2 * dims.heads + 2 * dims.kv_heads) * dims.head_dim * b
    if selfextend or plan.attention in ("chunked", "eager"):
        from llm_collapse.backends.chunked_attention import query_chunk_size  # imports torch: only here

        chunk = query_chunk_size(rows, dims.heads, n) if plan.attention != "eager" else n
        projections += (2 if selfextend else 1) * rows * dims.heads * chunk * n * LOGIT_CHUNK_BYTES
    pooler = 3 * tokens * dims.pooler.heads * dims.pooler.head_dim * b if dims.pooler else 0
    windows = dims.layer_windows(window_off=window_off)
    mask = 0  # unpadded: no mask for bidirectional or plain causal layers, none built by our kernels
    if plan.attention in ("sdpa", "eager") and any(w is not None and n > w for w in windows):
        mask = rows * n * n  # sdpa_mask for the sliding layers (one, shared by them)
    states = (dims.layers + 1) * tokens * dims.hidden * b if hidden_states else 0
    activations = residual + max(mlp, projections, pooler) + mask + states
    return _weight_bytes(dims, b, quant) + activations + overhead_gib * GIB


def gpu_gib(name: str, length: int, *, overhead_gib: float = DEFAULT_OVERHEAD_GIB) -> float | None:
    """Peak GiB of one bf16 text of ``length`` tokens on ``name`` under base (None: no published dims)."""
    try:
        plan = model_for(name)
    except EstimateError:
        return None
    positions = plan.copies * length
    return peak_bytes(plan, positions, 1, overhead_gib=overhead_gib) / GIB


# ------------------------------------------------------------------------------------------- a run


def _method_effect(method: Method, dims: PublishedDims) -> tuple[bool, bool, bool]:
    """(applicable, window_off, selfextend) of a method such as ``ntk:1e5+window:off``, read from its
    interventions: a LongEmbed preset switches the window off where there is one (``"window"`` among its
    `Intervention.kinds`) and ``longembed-se`` replaces attention like SelfExtend."""
    parts = method.stack.parts
    explicit_off = any(p.kind == "window" for p in parts)  # window:off alone needs a window to act on
    preset_off = any(p.kind != "window" and "window" in p.kinds for p in parts)
    selfextend = any(p.replaces_attention for p in parts)
    window_off = (explicit_off or preset_off) and dims.window is not None
    applicable = not (explicit_off and dims.window is None)
    return applicable, window_off, selfextend


@dataclass(frozen=True)
class Row:
    """One model x length: per-text cost under ``base`` and the run's totals over every method."""

    model: str
    length: int
    positions: int
    model_tflop: float
    seconds: float
    rows: int
    peak_gib: float
    texts: int
    queries: int
    minutes: float  # all methods, queries included


@dataclass
class Estimate:
    config: dict
    assumptions: Assumptions
    per_length: tuple[int, int, int]  # documents, queries, layerwise texts per length and method
    passes: float = 0.0  # other passes' texts per length and method, at their factor of a forward
    pairs: int = 0  # pairs of texts per length and method compared by a d x d statistic
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def model_minutes(self, model: str) -> float:
        return sum(r.minutes for r in self.rows if r.model == model)

    @property
    def total_minutes(self) -> float:
        return sum(r.minutes for r in self.rows)


@dataclass(frozen=True)
class PerLength:
    """What the tasks of a run embed per length and method (`_per_length`)."""

    texts: int  # documents through the cache
    queries: int
    hidden: int  # texts a pass re-reads with every layer's hidden states
    passes: float  # texts other passes re-read, each at its factor of a forward
    pairs: int  # pairs of texts compared by a d x d statistic (`Pass.pairs`)


def _per_length(config) -> PerLength:
    """What the tasks of ``config`` count (`llm_collapse.tasks.task.Task.count`): the shared sample once where a
    task embeds it, each task's own documents and queries, and its passes over the sample (with every layer's
    hidden states, at a factor of a forward, or comparing pairs of texts)."""
    from llm_collapse.tasks.registry import TASKS

    workloads = [TASKS[name].count(config, options, "cuda") for name, options in config.tasks.items()]
    per_length = config.max_per_bin
    if getattr(config, "design", None) == "prefix":
        per_length = config.prefix_docs or config.max_per_bin
    texts = per_length if any(w.sample for w in workloads) else 0  # shared by every task that embeds it
    texts += sum(w.documents for w in workloads)
    queries = sum(w.queries for w in workloads)
    passes = [each for w in workloads for each in w.passes]
    hidden = sum(each.texts for each in passes if each.hidden_states)
    others = sum(each.texts * each.factor for each in passes if not each.hidden_states)
    return PerLength(texts, queries, hidden, others, sum(each.pairs for each in passes))


def pair_seconds(hidden: int, assumptions: Assumptions) -> float:
    """Seconds of one pair's d x d statistic at width ``hidden``: `PAIR_SECONDS_4096` scaled as d^3 and by the
    assumed throughput."""
    return PAIR_SECONDS_4096 * (hidden / 4096) ** 3 * DEFAULT_TFLOPS / assumptions.tflops


def estimate(config, assumptions: Assumptions | None = None) -> Estimate:
    """Time and memory for every model x length of a validated `CompareConfig` (no weights are read)."""
    assumptions = (assumptions or Assumptions()).check()
    dtype_bytes = 4 if config.dtype == "fp32" else 2  # auto is bf16 on a bf16 GPU
    plans = [model_for(name, assumptions.softcap_attention) for name in config.models]
    counted = _per_length(config)
    texts, queries, layerwise = counted.texts, counted.queries, counted.hidden
    result = Estimate(
        config.to_dict(), assumptions, (texts, queries, layerwise), counted.passes, counted.pairs
    )
    for plan in plans:
        effects = [_method_effect(m, plan.dims) for m in config.parsed_methods()]
        for method, (applicable, _, _) in zip(config.methods, effects, strict=True):
            if not applicable:
                result.notes.append(f"{plan.name} x {method}: not applicable (no sliding window), not costed")
        active = [(w, s) for ok, w, s in effects if ok]
        for length in config.lengths:
            base = text_cost(plan, length, assumptions)
            seconds = 0.0
            peak = 0.0
            for window_off, selfextend in active:
                doc = text_cost(plan, length, assumptions, window_off=window_off, selfextend=selfextend)
                query = text_cost(
                    plan, QUERY_TOKENS, assumptions, window_off=window_off, selfextend=selfextend
                )
                seconds += (texts + layerwise + counted.passes) * doc.seconds + queries * query.seconds
                seconds += counted.pairs * pair_seconds(plan.dims.hidden, assumptions)
                for hidden_states in {False, bool(layerwise)}:
                    memory = peak_bytes(
                        plan,
                        doc.positions,
                        forward_rows(doc.positions, config.batch_size),
                        dtype_bytes=dtype_bytes,
                        quant=config.quant,
                        window_off=window_off,
                        selfextend=selfextend,
                        hidden_states=hidden_states,
                        overhead_gib=assumptions.overhead_gib,
                    )
                    peak = max(peak, memory)
            result.rows.append(
                Row(
                    model=plan.name,
                    length=length,
                    positions=base.positions,
                    model_tflop=base.model_flops / 1e12,
                    seconds=base.seconds,
                    rows=forward_rows(base.positions, config.batch_size),
                    peak_gib=peak / GIB,
                    texts=texts + layerwise + round(counted.passes),
                    queries=queries,
                    minutes=seconds / 60,
                )
            )
        logger.debug("%s: %.1f min estimated", plan.name, result.model_minutes(plan.name))
    if config.quant:
        result.notes.append(f"--quant {config.quant}: weights counted at its size, matmuls costed like bf16")
    return result


# ------------------------------------------------------------------------------------------ output


def summary(config, models: list[str], assumptions: Assumptions | None = None) -> str:
    """One sentence: the GPU time and peak memory of ``config`` restricted to ``models`` (those with published
    dims; the rest are named as not estimated)."""
    from dataclasses import replace

    assumptions = assumptions or Assumptions()
    covered = [m for m in models if gpu_gib(m, 1) is not None]
    left = [m for m in models if m not in covered]
    said = f"; not estimated (no published dimensions): {', '.join(left)}" if left else ""
    if not covered:
        return f"No GPU estimate{said}"
    result = estimate(replace(config, models=covered), assumptions)
    peak = max(r.peak_gib for r in result.rows)
    return (
        f"Estimate for {', '.join(covered)} on one GPU at {assumptions.tflops:.0f} TFLOP/s sustained: "
        f"~{_duration(result.total_minutes)}, peak {peak:.0f} GiB "
        f"(python -m llm_collapse.estimate with the same flags){said}"
    )


def _duration(minutes: float) -> str:
    return f"{minutes:.1f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def to_markdown(result: Estimate) -> str:
    """The header (assumptions), one table of every model x length, totals per model and notes."""
    a, c = result.assumptions, result.config
    texts, queries, layerwise = result.per_length
    lines = [
        "**Estimates from FLOP and byte counting (`python -m llm_collapse.estimate`), not measurements.**",
        f"Assumed sustained throughput {a.tflops:g} TFLOP/s (bf16 matmuls) and {a.hbm_tbs:g} TB/s (HBM); "
        f"GPU memory {a.gpu_gib:g} GiB; {a.overhead_gib:g} GiB fixed overhead; softcapped attention "
        f"(bge-gemma2) as `{a.softcap_attention}`; "
        f"dtype {c['dtype'] or 'auto (bf16)'}"
        f"{', quant ' + c['quant'] if c['quant'] else ''}.",
        f"Per length and method: {texts} texts of L tokens"
        + (f" ({layerwise} layerwise, with hidden states)" if layerwise else "")
        + f" + {queries} queries of ~{QUERY_TOKENS} tokens"
        + (f" + {result.passes:g} texts read again by a pass" if result.passes else "")
        + (
            f" + {result.pairs} pairs of d x d statistics (~{PAIR_SECONDS_4096:g} s each at d = 4096)"
            if result.pairs
            else ""
        )  # fmt: skip
        + "; the shared sample counts max_per_bin texts, an upper bound where the corpus holds fewer long texts. "
        f"Methods {c['methods']}; tasks {c['tasks']}; batch_size {c['batch_size']}, at most "
        f"{MAX_TOKENS_PER_BATCH} tokens per forward. Peak GiB is the largest forward over the methods.",
        "",
        markdown_table(
            (
                "model",
                "L",
                "positions",
                "TFLOP/text",
                "s/text (base)",
                "texts/forward",
                "peak GiB",
                "fits",
                "texts + queries per method",
                "minutes, all methods",
            ),
            [
                (
                    r.model,
                    r.length,
                    r.positions,
                    f"{r.model_tflop:.2f}",
                    f"{r.seconds:.3g}",
                    r.rows,
                    f"{r.peak_gib:.1f}",
                    "yes" if r.peak_gib <= a.gpu_gib else "**no**",
                    f"{r.texts} + {r.queries}",
                    f"{r.minutes:.1f}",
                )
                for r in result.rows
            ],
            "lrrrrrrcrr",
            escape=False,
            compact_rule=True,
        ),
        "",
    ]
    models = list(dict.fromkeys(r.model for r in result.rows))
    lines.append(
        "Totals: "
        + "; ".join(f"{m} {_duration(result.model_minutes(m))}" for m in models)
        + f"; **all {_duration(result.total_minutes)}** (one GPU, models one after another)."
    )
    lines += [f"- {note}" for note in result.notes]
    return "\n".join(lines) + "\n"
