"""Long documents on tiny replicas of bge-gemma2 and NV-Embed: does memory grow linearly in length?

The 9B/7B checkpoints do not fit a CPU machine's time budget, and what makes memory quadratic does not depend on
the width: a (B, 1, L, L) mask or L x L logits. So each model is rebuilt as a tiny random replica in its published
layout (`llm_collapse.testing.checkpoints`: bge-gemma2 with its 4096-token window on alternate layers and the 50.0
softcap, NV-Embed's bidirectional Mistral and latent pooler; 2 layers, 64-wide heads, 32k positions) and one
document of 8k, 16k and 32k tokens runs through the `long_docs.worker` of the long-document section (fresh
process per length, RSS polled during the forward). The attention paths measured by default are bge-gemma2's
``chunked`` (the CPU default) and ``fused`` (torch flex_attention, compiled; warmed up on the timed document so
compiling is outside the clock and the memory baseline) and NV-Embed's ``sdpa``. Linear memory shows as RSS growth
of at most `TARGET_MEMORY_GROWTH` per doubling over the range (`replica_targets`); the old dense masks gave 4x per
doubling in their share.
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path

from llm_collapse.bench.config import TARGET_MEMORY_GROWTH, BenchConfig
from llm_collapse.bench.corpus import long_document
from llm_collapse.bench.long_docs import run_long_document

logger = logging.getLogger("llm_collapse.bench")

__all__ = ["REPLICA_BUILDERS", "build_replica", "replica_documents", "replica_targets"]

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


def replica_targets(rows: list[dict]):
    """One target per (model, attention): RSS growth from the shortest to the longest length at most
    `TARGET_MEMORY_GROWTH` per doubling (2.2^2 = 4.84x for 8k -> 32k; linear is 4x, a dense L x L term 16x).

    The whole range is compared rather than each doubling: at 8k a tiny replica grows by tens of MiB, where the
    allocator's noise alone can move one doubling past 2.2x.
    """
    from llm_collapse.bench.targets import Target

    targets = []
    for model, attention in dict.fromkeys((r["model"], r["attention"]) for r in rows):
        runs = [r for r in rows if (r["model"], r["attention"]) == (model, attention)]
        runs.sort(key=lambda r: r["length"])
        name = f"{model} replica ({attention}): RSS growth with length"
        bad = next((r for r in runs if r["status"] != "ok"), None)
        if bad is not None or len(runs) < 2:
            threshold = f"<= {TARGET_MEMORY_GROWTH}x per doubling"
            targets.append(Target(name, threshold, bad["status"] if bad else "not measured", None))
            continue
        first, last = runs[0], runs[-1]
        allowed = TARGET_MEMORY_GROWTH ** math.log2(last["length"] / first["length"])
        ratio = last["growth_bytes"] / max(first["growth_bytes"], 1)
        shown = " -> ".join(f"+{r['growth_bytes'] / 2**30:.3f}" for r in runs)
        lengths = "/".join(f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in (r["length"] for r in runs))
        targets.append(
            Target(
                name,
                f"<= {allowed:.2f}x for {last['length'] / first['length']:.0f}x the tokens "
                f"({TARGET_MEMORY_GROWTH}x per doubling)",
                f"{ratio:.2f}x ({shown} GiB at {lengths})",
                ratio <= allowed,
                {"growth_ratio": ratio, "allowed": allowed},
            )
        )
    return targets
