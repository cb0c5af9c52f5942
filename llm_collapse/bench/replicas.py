"""Long documents on tiny replicas of bge-gemma2 and NV-Embed: does memory grow linearly in length?

The 9B/7B checkpoints do not fit a CPU machine's time budget, and what makes memory quadratic does not depend on
the width: a (B, 1, L, L) mask or L x L logits. So each model is rebuilt as a tiny random replica in its published
layout (`llm_collapse.testing.checkpoints`: bge-gemma2 with its 4096-token window on alternate layers and the 50.0
softcap, NV-Embed's bidirectional Mistral and latent pooler; 2 layers, 64-wide heads, 32k positions) and one
document of 8k, 16k and 32k tokens runs through the `long_docs.worker` of the long-document section (fresh
process per length, RSS polled during the forward). The attention paths measured by default are bge-gemma2's
``chunked`` (the CPU default) and ``fused`` (torch flex_attention, compiled; warmed up on the timed document so
compiling is outside the clock and the memory baseline) and NV-Embed's ``sdpa``. Linear memory shows as RSS growth
of at most `TARGET_MEMORY_GROWTH` per doubling over the range (`llm_collapse.bench.targets.replica_targets`); the
old dense masks gave 4x per doubling in their share.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from llm_collapse.bench.config import BenchConfig
from llm_collapse.bench.corpus import long_document
from llm_collapse.bench.long_docs import run_long_document

logger = logging.getLogger("llm_collapse.bench")

__all__ = ["REPLICA_BUILDERS", "build_replica", "replica_documents"]

REPLICA_BUILDERS: dict[str, tuple[str, dict]] = {
    # registry name -> (llm_collapse.testing builder, overrides): 32k positions so 32k inputs are in range
    "bge-gemma2": ("save_tiny_bge_gemma2", {"max_position_embeddings": 32768}),
    "nv-embed": ("save_tiny_nv_embed", {}),
}


def build_replica(model: str, directory: Path) -> Path:
    """Writes the tiny replica of ``model`` to ``directory`` (deterministic, seconds)."""
    from llm_collapse.testing import checkpoints

    builder, overrides = REPLICA_BUILDERS[model]
    return getattr(checkpoints, builder)(directory, **overrides)


def replica_documents(documents, config: BenchConfig, dtype: str) -> list[dict]:
    """One row per (model, attention, length) of ``config.replica_runs`` x ``config.replica_lengths``."""
    if not config.replica_lengths or not config.replica_runs:
        return []
    import llm_collapse as lc
    from llm_collapse.data.bins import token_prefix

    rows = []
    with tempfile.TemporaryDirectory(prefix="llm-collapse-replicas-") as tmp:
        for model in dict.fromkeys(m for m, _ in config.replica_runs):
            path = build_replica(model, Path(tmp) / model)
            embedder = lc.load_embedder(model, path=path, dtype=dtype, device="cpu")
            tokenizer, special = embedder.tokenizer, len(embedder.tokenize([""])[0])
            del embedder
            longest = long_document(documents, tokenizer, max(config.replica_lengths) - special)
            texts = {n: token_prefix(longest, n - special, tokenizer) for n in config.replica_lengths}
            for run_model, attention in config.replica_runs:
                if run_model != model:
                    continue
                options = {
                    "path": str(path),
                    "attn_implementation": attention,
                    "warmup": "full" if attention == "fused" else "short",
                }
                for length in config.replica_lengths:
                    row = run_long_document(
                        model,
                        dtype,
                        length,
                        texts[length],
                        backend="hf",
                        timeout=config.child_timeout_s,
                        options=options,
                    )
                    row = {**row, "replica": True, "attention": attention}
                    if row["status"] == "ok":
                        logger.info(
                            "%s replica (%s) @ %d: %.2f s, RSS growth %.3f GiB",
                            model, attention, length, row["seconds"], row["growth_bytes"] / 2**30,
                        )  # fmt: skip
                    else:
                        logger.info("%s replica (%s) @ %d: %s", model, attention, length, row["status"])
                    rows.append(row)
    return rows
