"""The device check's two paired comparisons (issue 47 item 3), each on one replica at the published widths.

``softcap_paths``
    bge-multilingual-gemma2 at the check's longest length, ``attn_implementation="fused"`` (flex_attention, the
    CUDA default) against ``"chunked"`` (the exact fallback): warm seconds, peak CUDA memory, and the cosine of the
    two embeddings of the same text (issue 47's target: >= 0.999 in bf16). The full-depth seconds of ``fused``
    come from the check's layer fit (its bge-gemma2 rows run the CUDA default).
``st_against_encode``
    sentence-transformers (a Transformer + Pooling pipeline on the same folder, dtype, attention and token cap:
    `llm_collapse.bench.sides.load_sentence_transformer`) against `Embedder.encode` on the e5-mistral replica
    and the same mixed-length texts: warm tokens per second of each, and ours over theirs.

Decisions
    - Both sides of a pair run in this process on the same inputs; each is warmed on those inputs first, then the
      sides alternate over ``ROUNDS`` rounds and the best round counts (a slow stretch hits both).
    - The texts are the tiny tokenizers' deterministic corpus (`synthetic_document`): nothing is read from disk
      or downloaded, and the replicas' tokenizers count the tokens both sides are credited with.
    - ``quick`` (the CPU test and a smoke run without a GPU) builds the builders' tiny sizes; a pair that fails
      is recorded with its error and the check goes on.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from llm_collapse.bench.device_replicas import error_status, release
from llm_collapse.cost.timing import sync_device

logger = logging.getLogger("llm_collapse.bench")

__all__ = ["ROUNDS", "mixed_lengths", "softcap_paths", "st_against_encode"]

ROUNDS = 3
SOFTCAP_PATHS = ("fused", "chunked")


def mixed_lengths(longest: int) -> list[int]:
    """Text lengths in tokens for the sentence-transformers pair: powers of two from 64 to ``longest``, each
    twice (and at least 8 texts), so batches mix short and long texts as a corpus does."""
    lengths, n = [], 64
    while n <= max(64, longest):
        lengths += [n, n]
        n *= 2
    while len(lengths) < 8:
        lengths += lengths[: 8 - len(lengths)]
    return sorted(lengths)


def softcap_paths(config, tmp: Path) -> dict:
    """``fused`` against ``chunked`` on the bge-gemma2 replica (``config.layers[0]`` layers) at the longest length."""
    import numpy as np
    import torch

    import llm_collapse as lc
    from llm_collapse.bench.device_replicas import replica_fields, synthetic_document, time_forward
    from llm_collapse.testing.checkpoints import save_tiny_bge_gemma2

    depth, length = config.layers[0], max(config.lengths)
    record: dict = {"model": "bge-gemma2", "layers": depth, "length": length, "dtype": config.dtype}
    try:
        folder = save_tiny_bge_gemma2(
            tmp / f"bge-softcap-{depth}", **replica_fields("bge-gemma2", depth, quick=config.quick)
        )
        vectors = {}
        for path in SOFTCAP_PATHS:
            embedder = lc.load_embedder(
                "bge-gemma2",
                path=folder,
                dtype=config.dtype,
                device=config.device,
                max_length=length + 8,
                attn_implementation=path,
            )
            text = synthetic_document(embedder.tokenizer, length - len(embedder.tokenize([""])[0]))
            seconds, peak, vector = time_forward(embedder, text, config.device)
            vectors[path] = np.asarray(vector, dtype=np.float64)
            record[path] = {
                "seconds": seconds,
                "peak_allocated_bytes": peak,
                "attention": embedder.describe().get("attn_implementation"),
            }
            logger.info("softcap %s @ %d (%d layers): %.3f s", path, length, depth, seconds)
            del embedder
            release(config.device)
        a, b = (vectors[p] for p in SOFTCAP_PATHS)
        record["cosine"] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        record["fused_over_chunked_s"] = record["fused"]["seconds"] / record["chunked"]["seconds"]
        record["status"] = "ok"
    except (RuntimeError, ValueError, OSError, torch.OutOfMemoryError) as err:
        logger.warning("softcap paths: %s", err)
        record["status"] = error_status(err)
    release(config.device)
    return record


def st_against_encode(config, tmp: Path) -> dict:
    """sentence-transformers against `Embedder.encode` on the e5-mistral replica, mixed lengths, warm tokens/s."""
    import torch

    import llm_collapse as lc
    from llm_collapse.bench.config import ST_BATCH_SIZE
    from llm_collapse.bench.device_replicas import replica_fields, synthetic_document
    from llm_collapse.bench.sides import load_sentence_transformer, st_token_counts
    from llm_collapse.testing.checkpoints import save_tiny_e5_mistral

    depth = config.layers[0]
    record: dict = {"model": "mistral", "layers": depth, "dtype": config.dtype}
    try:
        folder = save_tiny_e5_mistral(
            tmp / f"e5-st-{depth}", **replica_fields("mistral", depth, quick=config.quick)
        )
        longest = max(config.lengths)
        embedder = lc.load_embedder(
            "mistral", path=folder, dtype=config.dtype, device=config.device, max_length=longest + 8
        )
        lengths = mixed_lengths(longest - 8)
        texts = [synthetic_document(embedder.tokenizer, n) for n in lengths]
        st, record["st_settings"] = load_sentence_transformer(embedder)
        st.to(config.device)
        ours_tokens = sum(len(e) for e in embedder.tokenize(texts))
        st_tokens = sum(st_token_counts(st, texts))
        sides = {
            "ours": (lambda: embedder.encode(texts, show_progress_bar=False), ours_tokens),
            "sentence_transformers": (
                lambda: st.encode(
                    texts, batch_size=ST_BATCH_SIZE, normalize_embeddings=True, show_progress_bar=False
                ),
                st_tokens,
            ),
        }
        for run, _ in sides.values():  # warm-up on the very inputs
            run()
        best = {side: float("inf") for side in sides}
        for index in range(ROUNDS):
            for side in sides if index % 2 == 0 else reversed(list(sides)):
                sync_device(config.device)
                start = time.perf_counter()
                sides[side][0]()
                sync_device(config.device)
                best[side] = min(best[side], time.perf_counter() - start)
        record |= {
            "texts": len(texts),
            "lengths": lengths,
            "sides": {
                side: {"seconds": best[side], "tokens": tokens, "tokens_per_s": tokens / best[side]}
                for side, (_, tokens) in sides.items()
            },
        }
        record["ours_over_st_tokens_per_s"] = (
            record["sides"]["ours"]["tokens_per_s"] / record["sides"]["sentence_transformers"]["tokens_per_s"]
        )
        record["status"] = "ok"
        logger.info("ours / sentence-transformers tokens/s: %.2f", record["ours_over_st_tokens_per_s"])
    except (RuntimeError, ValueError, OSError, ImportError, torch.OutOfMemoryError) as err:
        logger.warning("sentence-transformers pair: %s", err)
        record["status"] = error_status(err)
    release(config.device)
    return record
