"""The device check's replicas at the published widths, their texts, and how one forward is timed.

Shared by `llm_collapse.bench.device_check` (the layer fit) and `llm_collapse.bench.device_pairs` (the paired
comparisons), and by ``tests/test_gpu.py`` (the synthetic document).
"""

from __future__ import annotations

import time

from llm_collapse.cost.timing import sync_device

__all__ = ["MAX_POSITIONS", "error_status", "release", "replica_fields", "synthetic_document", "time_forward"]

MAX_POSITIONS = 32768


def replica_fields(model: str, layers: int, *, quick: bool = False) -> dict:
    """Builder overrides: the published dims of ``model`` with ``layers`` layers (only the depth when quick)."""
    from llm_collapse.adapters import resolve_spec

    fields: dict = {"num_hidden_layers": layers, "max_position_embeddings": MAX_POSITIONS}
    if quick:
        return fields
    dims = resolve_spec(model)[0].published
    fields |= {
        "hidden_size": dims.hidden,
        "intermediate_size": dims.intermediate,
        "num_attention_heads": dims.heads,
        "num_key_value_heads": dims.kv_heads,
        "head_dim": dims.head_dim,
    }
    if dims.window is not None:
        fields["sliding_window"] = dims.window
    if dims.pooler is not None:  # NV-Embed's latent-attention pooler
        fields |= {
            "num_latents_value": dims.pooler.latents,
            "num_cross_heads": dims.pooler.heads,
            "cross_dim_head": dims.pooler.head_dim,
        }
    return fields


def synthetic_document(tokenizer, n_tokens: int) -> str:
    """Exactly ``n_tokens`` text tokens of the tiny tokenizers' own deterministic corpus, repeated."""
    from llm_collapse.data.bins import token_prefix
    from llm_collapse.testing.tokenizers import training_corpus

    paragraph = "\n\n".join(training_corpus(200, seed=1))
    per_copy = len(tokenizer(paragraph, add_special_tokens=False)["input_ids"])
    return token_prefix("\n\n".join([paragraph] * (n_tokens // per_copy + 1)), n_tokens, tokenizer)


def time_forward(embedder, text: str, device: str) -> tuple[float, int | None, object]:
    """Best-of seconds of one encode after a warm-up on the same text, the CUDA peak bytes (None on CPU), and the
    warm-up's embedding of ``text`` (so a caller comparing vectors needs no extra forward)."""
    import torch

    vector = embedder.encode([text], show_progress_bar=False)[0]  # compiles/plans outside the clock
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for _ in range(2):
        sync_device(device)
        start = time.perf_counter()
        embedder.encode([text], show_progress_bar=False)
        sync_device(device)
        best = min(best, time.perf_counter() - start)
    return best, (torch.cuda.max_memory_allocated() if cuda else None), vector


def release(device: str) -> None:
    """Frees what a dropped replica held before the next one loads."""
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def error_status(err: Exception) -> str:
    """The status of a replica or pair that failed: its error's first line (or its type when it has no text)."""
    text = str(err).strip()
    return f"error: {text.splitlines()[0][:300]}" if text else f"error: {type(err).__name__}"
