"""Per-layer statistics from the same forward pass as the embeddings: the low-pass view of length collapse.

`measure_layers` runs `Embedder.iter_batches(output_hidden_states=True)` once and returns, per text, its
embedding, the high-frequency energy ratio of every layer's token states (`metrics.hidden`) and the attention
entropy of every layer. Attention weights are never materialised whole: `record_attention_entropy` routes the
attention modules through a registered function that calls the model's own attention for the output and, on
the side, recomputes the logits in query chunks (same ``scaling``, softcap and mask) to get each row's entropy
``H_i = logsumexp(l_i) - sum_j p_ij l_ij`` in nats, and ``H_i / ln |K_i|`` normalised by the number of
attendable keys (mask rule and entropy: `metrics.attention`). Entropy is averaged over a text's real query
rows and over heads.

Decisions: the leading BOS of decoders is left out of the high-frequency ratio (its attention-sink state is
identical for every text and can dominate ``||X||^2``); the recorder sees attention as the model computes it
under scaling/RoPE interventions, but not SelfExtend's merged logits (it raises if SelfExtend is active).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from llm_collapse.embedder import Embedder
from llm_collapse.interventions.attention import attention_modules, layer_index, routed_attention
from llm_collapse.interventions.base import NotApplicable
from llm_collapse.metrics.attention import attendable, entropy, mask_allows
from llm_collapse.metrics.hidden import layerwise_high_frequency

_CHUNK = 512


@dataclass
class LayerwiseResult:
    """Per-text results; layers are in model order (hidden states include the embedding output first).

    Attributes:
        embeddings: (n, d) the embeddings, exactly as `Embedder.encode` returns them.
        lengths: (n,) token counts.
        high_frequency: (n, n_layers + 1) high-frequency energy ratio per hidden-state layer.
        attention_entropy: (n, n_layers) mean attention entropy in nats.
        attention_entropy_normalized: (n, n_layers) the same divided by ln(number of attendable keys).
    """

    embeddings: np.ndarray
    lengths: np.ndarray
    high_frequency: np.ndarray
    attention_entropy: np.ndarray
    attention_entropy_normalized: np.ndarray


@contextlib.contextmanager
def record_attention_entropy(model: nn.Module) -> Iterator[dict[int, list[torch.Tensor]]]:
    """Records, per layer and forward call, (B, 2) [entropy, normalised entropy] averaged over rows and heads."""
    records: dict[int, list[torch.Tensor]] = defaultdict(list)
    state: dict[str, torch.Tensor] = {}
    layers = {id(module): layer_index(name) or 0 for name, module in attention_modules(model)}

    def remember_mask(_module, args, kwargs):
        state["mask"] = kwargs.get("attention_mask")

    def wrap(original, module):
        def recording(module, query, key, value, attention_mask, **kwargs):
            output = original(module, query, key, value, attention_mask, **kwargs)
            scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
            stats = _entropy(
                module,
                query,
                key,
                attention_mask,
                scaling,
                kwargs.get("softcap"),
                state.get("mask"),
                kwargs.get("sliding_window"),
            )
            records[layers[id(module)]].append(stats)
            return output

        return recording

    handle = model.register_forward_pre_hook(remember_mask, with_kwargs=True)
    try:
        with routed_attention(model, wrap, tag="entropy_recorder"):
            yield records
    finally:
        handle.remove()


@torch.no_grad()
def _entropy(module, query, key, mask4d, scaling, softcap, mask2d, window=None) -> torch.Tensor:
    batch, heads, length, _ = query.shape
    key = key.repeat_interleave(heads // key.shape[1], dim=1)  # (B, heads, Lk, d)
    real_keys = torch.ones(batch, key.shape[2], dtype=torch.bool) if mask2d is None else mask2d.bool().cpu()
    sums = torch.zeros(batch, 2, dtype=torch.float64)
    rows = torch.zeros(batch, 2, dtype=torch.float64)
    for start in range(0, length, _CHUNK):
        stop = min(start + _CHUNK, length)
        logits = (query[:, :, start:stop].float() @ key.float().transpose(-1, -2)) * scaling  # (B, h, c, Lk)
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        allowed = _allowed(module, mask4d, real_keys, start, stop, key.shape[2], window).to(
            logits.device
        )  # (B, 1, c, Lk)
        logits = logits.masked_fill(~allowed, float("-inf"))
        logp = torch.log_softmax(logits, dim=-1)
        rows_entropy = entropy(logp.exp(), logp).mean(1).double().cpu()  # (B, c)
        n_keys = allowed.sum(-1).squeeze(1).double().cpu()  # (B, c)
        real_rows = real_keys[:, start:stop] & (n_keys > 0)
        normalized = rows_entropy / torch.log(n_keys.clamp(min=2))
        sums[:, 0] += torch.where(real_rows, rows_entropy, 0.0).sum(-1)
        sums[:, 1] += torch.where(real_rows & (n_keys > 1), normalized, 0.0).sum(-1)
        rows[:, 0] += real_rows.sum(-1)
        rows[:, 1] += (real_rows & (n_keys > 1)).sum(-1)
    return sums / rows.clamp(min=1)


def _allowed(module, mask4d, real_keys, start, stop, n_keys, window=None) -> torch.Tensor:
    """Which keys each query row attends to: the 4D mask when the model built one, else causal (and the sliding
    window: ``attn_implementation="banded"`` passes no mask for unpadded sliding-window layers)."""
    if isinstance(mask4d, torch.Tensor) and mask4d.dim() == 4:
        return mask_allows(mask4d[:, :, start:stop].cpu())
    causal = bool(getattr(module, "is_causal", False))
    return attendable(n_keys, slice(start, stop), causal=causal, sliding_window=window, key_mask=real_keys)


def measure_layers(
    embedder: Embedder, texts: Sequence[str], *, kind: str = "document", batch_size: int | None = None
) -> LayerwiseResult:
    """Embeddings, per-layer high-frequency ratio and attention entropy of ``texts`` from one forward pass each."""
    if any(p.replaces_attention for p in embedder.active_interventions):
        raise NotApplicable(
            "attention entropy cannot be recorded while SelfExtend replaces the attention computation"
        )
    n = len(texts)
    n_layers = len({layer_index(name) for name, _ in attention_modules(embedder.model)})
    out = LayerwiseResult(
        embeddings=np.zeros((n, embedder.dim), np.float32),
        lengths=np.zeros(n, np.int64),
        high_frequency=np.full((n, n_layers + 1), np.nan),
        attention_entropy=np.full((n, n_layers), np.nan),
        attention_entropy_normalized=np.full((n, n_layers), np.nan),
    )
    bos = embedder.tokenizer.bos_token_id
    with record_attention_entropy(embedder.model) as records:
        for batch in embedder.iter_batches(
            texts, kind=kind, batch_size=batch_size, output_hidden_states=True
        ):
            index = batch.indices
            mask = batch.attention_mask.clone()
            first = mask.float().argmax(dim=1)  # first real position (left or right padding)
            first_ids = torch.tensor([e.input_ids[0] for e in batch.encoded])
            is_bos = first_ids == bos if bos is not None else torch.zeros(len(index), dtype=torch.bool)
            mask[torch.arange(len(index))[is_bos], first[is_bos]] = 0
            out.embeddings[index] = batch.embeddings.numpy()
            out.lengths[index] = batch.attention_mask.sum(1).numpy()
            out.high_frequency[index] = layerwise_high_frequency(batch.hidden_states, mask).T
            for layer in range(n_layers):
                stats = records[layer].pop().numpy()
                out.attention_entropy[index, layer] = stats[:, 0]
                out.attention_entropy_normalized[index, layer] = stats[:, 1]
    return out
