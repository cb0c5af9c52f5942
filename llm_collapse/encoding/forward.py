"""Stage 2 of the road from texts to vectors: one planned batch through the backend, pooled and normalised.

Three ways a batch becomes vectors, decided by the embedder's state: the backend's forward and the spec's
pooling over the pool mask (the usual way, with every layer's token states when asked); a backend that pools
itself (vLLM: it takes the `EncodedText`s and their pool masks); or an active `InputEmbedding` (PCW), whose
pieces run as forwards of their own and are averaged per input. Vectors are L2-normalised in float32 and
must be finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llm_collapse.adapters.inputs import EncodedText
from llm_collapse.encoding.batching import plan_batches
from llm_collapse.encoding.pooling import pool

PADDING_SIDES: tuple[str, ...] = ("right", "left")


@dataclass
class EmbeddedBatch:
    """One forward pass.

    Attributes:
        indices: Positions of these texts in the input list.
        embeddings: (B, H) float32, L2-normalised.
        encoded: The model inputs, one per text.
        attention_mask: (B, L) 1 for real tokens.
        pool_mask: (B, L) 1 where pooling read.
        hidden_states: Per-layer (B, L, H) token states (embedding output first) when requested.
    """

    indices: list[int]
    embeddings: torch.Tensor
    encoded: list[EncodedText]
    attention_mask: torch.Tensor
    pool_mask: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


def collate(embedder, items: list[EncodedText]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pads to the longest item on ``embedder.padding_side``: (B, L) input ids, attention mask and pool mask."""
    if embedder.padding_side not in PADDING_SIDES:
        raise ValueError(f"padding_side={embedder.padding_side!r}; allowed: {PADDING_SIDES}")
    tokenizer = embedder.tokenizer
    pad_id = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    width = max(len(e) for e in items)
    ids = torch.full((len(items), width), pad_id or 0, dtype=torch.long)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    pool_mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        span = slice(0, len(item)) if embedder.padding_side == "right" else slice(width - len(item), width)
        ids[row, span] = torch.tensor(item.input_ids)
        attention[row, span] = 1
        pool_mask[row, span] = torch.tensor(item.pool_mask)
    return ids, attention, pool_mask


def embed_batch(
    embedder, indices: list[int], items: list[EncodedText], *, output_hidden_states: bool = False
) -> tuple[EmbeddedBatch, torch.Tensor | None]:
    """The unit vectors of one planned batch (``items``, the inputs at ``indices``), and the (B, L, H) final
    token states where the forward gave them (shared prefixes are pooled from them)."""
    input_ids, attention_mask, pool_mask = collate(embedder, items)
    backend, own = embedder.backend, embedder.input_embedding
    states = hidden_states = None
    if own is not None:
        pooled = _pooled_pieces(embedder, *own.split_inputs(embedder, items), len(items))
    elif backend.returns_pooled:  # the backend pools our EncodedTexts itself, over their pool masks
        pooled = backend.embed(items, pooling=embedder.spec.pooling)
    else:
        out = backend.forward(input_ids, attention_mask, output_hidden_states=output_hidden_states)
        states, hidden_states = out.last_hidden_state, out.hidden_states
        pooled = pool(states, pool_mask.to(states.device), embedder.spec.pooling)
    embeddings = torch.nn.functional.normalize(pooled, p=2, dim=-1).cpu()
    if not torch.isfinite(embeddings).all():
        raise FloatingPointError(
            f"{embedder.name} [{embedder.interventions}]: the forward pass gave NaN/inf embeddings; "
            "try dtype='fp32' (fp16 overflows) or milder intervention parameters"
        )
    return EmbeddedBatch(indices, embeddings, items, attention_mask, pool_mask, hidden_states), states


def _pooled_pieces(embedder, pieces: list[EncodedText], owners: list[int], n: int) -> torch.Tensor:
    """(n, d) float32: the mean of each input's pooled, unnormalised pieces, the pieces run in length-sorted
    batches under the embedder's token budget (`InputEmbedding.split_inputs`)."""
    batches = plan_batches(
        [len(p) for p in pieces],
        max_batch_size=1 if embedder.backend.mixes_rows else embedder.batch_size,
        max_tokens=embedder.max_tokens_per_batch,
        max_padding=embedder.max_padding,
    )
    pooled = torch.zeros((len(pieces), embedder.dim), dtype=torch.float32)
    for batch in batches:
        input_ids, attention_mask, pool_mask = collate(embedder, [pieces[i] for i in batch])
        states = embedder.backend.forward(input_ids, attention_mask).last_hidden_state
        pooled[batch] = pool(states, pool_mask.to(states.device), embedder.spec.pooling).float().cpu()
    which = torch.tensor(owners)
    total = torch.zeros((n, pooled.shape[1]), dtype=torch.float32).index_add_(0, which, pooled)
    return total / torch.bincount(which, minlength=n).unsqueeze(1).float()
