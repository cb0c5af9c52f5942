"""No (L, L) mask for the plain patterns: pattern recognition, the lean masks of ``chunked`` and NV-Embed, and the
largest tensor of one long forward growing linearly in L (recorded with a TorchDispatchMode)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import AttentionInterface
from transformers.masking_utils import (
    and_masks,
    bidirectional_mask_function,
    causal_mask_function,
    sliding_window_causal_mask_function,
)

from llm_collapse.backends import chunked_attention
from llm_collapse.backends.mask_patterns import MaskPattern, lean_mask, plain_pattern
from llm_collapse.metrics.attention import mask_rows
from llm_collapse.models.nv_embed import key_padding_mask

MODELS = {
    # embedder name -> its tiny checkpoint's layout overrides
    # a 64-token window: sliding layers need a mask at these lengths
    "bge-gemma2": {"sliding_window": 64, "max_position_embeddings": 8192},
    "nv-embed": {},
}


class LargestStorage(TorchDispatchMode):
    """Records, over every op output while active, the largest storage (bytes) and which op returned it, and the
    largest ``min(shape[-2], shape[-1])`` (an (L, L) mask or logits tensor makes it L)."""

    def __init__(self) -> None:
        super().__init__()
        self.nbytes, self.op, self.square = 0, None, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            if t.untyped_storage().nbytes() > self.nbytes:
                self.nbytes, self.op = t.untyped_storage().nbytes(), (str(func), tuple(t.shape))
            if t.dim() >= 2:
                self.square = max(self.square, min(t.shape[-2:]))
        return out


# ----------------------------------------------------------------------------- recognition


def test_plain_patterns_are_recognised_and_overlays_refused():
    sliding = sliding_window_causal_mask_function(16)
    assert plain_pattern(causal_mask_function) == MaskPattern(causal=True)
    assert plain_pattern(bidirectional_mask_function) == MaskPattern(causal=False)
    assert plain_pattern(sliding, local_size=16) == MaskPattern(causal=True, window=16)
    assert plain_pattern(sliding, local_size=8) is None  # the closure's window is not the stated one
    assert plain_pattern(sliding, local_size=16, allow_is_causal_skip=False) is None  # an overlay was added
    assert plain_pattern(and_masks(causal_mask_function, lambda b, h, q, k: k != 3)) is None
    assert plain_pattern(causal_mask_function, use_vmap=True) is None
    assert plain_pattern(causal_mask_function, q_offset=5) is None  # a KV cache


def test_lean_mask_is_none_or_key_padding_for_plain_patterns():
    common = {"batch_size": 2, "q_length": 12, "kv_length": 12}
    keys = torch.ones(2, 12, dtype=torch.bool)
    for function, local in ((causal_mask_function, None), (sliding_window_causal_mask_function(4), 4)):
        assert lean_mask(**common, mask_function=function, local_size=local) is None
        assert lean_mask(**common, mask_function=function, local_size=local, attention_mask=keys) is None
    keys[1, :3] = False
    padded = lean_mask(**common, mask_function=bidirectional_mask_function, attention_mask=keys)
    assert padded.shape == (2, 12) and torch.equal(padded, keys)
    overlay = and_masks(causal_mask_function, lambda b, h, q, k: k != 3)
    overlaid = lean_mask(**common, mask_function=overlay, use_vmap=True, allow_is_causal_skip=False)
    assert overlaid.shape == (2, 1, 12, 12)  # transformers clears the skip for overlays
    fewer_queries = lean_mask(2, 4, 12, mask_function=causal_mask_function, allow_is_causal_skip=False)
    assert fewer_queries.shape == (2, 1, 4, 12)  # a KV cache: transformers' own mask


def test_mask_rows_expands_one_row_masks():
    mask = torch.rand(2, 1, 1, 9) > 0.5
    assert mask_rows(mask, slice(3, 7)).shape == (2, 1, 4, 9)
    full = torch.rand(2, 1, 10, 9) > 0.5
    assert torch.equal(mask_rows(full, slice(3, 7)), full[:, :, 3:7])


@pytest.mark.parametrize(
    ("implementation", "padded_type"),
    [("sdpa", torch.bool), ("eager", torch.float32), ("chunked", None), ("fused", None)],
)
def test_nv_embed_mask_is_key_only(tiny_embedder, implementation, padded_type):
    embedder = tiny_embedder("nv-embed", device="cpu", attn_implementation=implementation)
    config = embedder.model.embedding_model.config
    embeds = torch.zeros(2, 40, config.hidden_size)
    keys = torch.ones(2, 40, dtype=torch.long)
    unpadded = key_padding_mask(config, embeds, keys)
    keys[1, 25:] = 0
    padded = key_padding_mask(config, embeds, keys)
    if implementation == "fused":
        assert isinstance(unpadded, BlockMask) and isinstance(padded, BlockMask)
        assert padded.seq_lengths == (40, 40)
        return
    assert unpadded is None
    if implementation == "chunked":
        assert torch.equal(padded, keys.bool())  # (B, L)
        return
    assert padded.shape == (2, 1, 1, 40) and padded.dtype == padded_type
    allowed = padded if padded_type == torch.bool else padded == 0
    assert torch.equal(allowed[:, 0, 0], keys.bool())


# ----------------------------------------------------------------------------- memory linear in L


def _record(embedder, length: int, *, padded: bool = False) -> LargestStorage:
    ids = torch.randint(3, 400, (1 + padded, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if padded:
        mask[1, length // 2 :] = 0
    with LargestStorage() as record:
        embedder.backend.forward(ids, mask)
    return record


@pytest.mark.parametrize(
    ("name", "attention", "padded"),
    [
        ("bge-gemma2", "chunked", False),
        ("bge-gemma2", "chunked", True),
        ("nv-embed", "sdpa", False),
        ("nv-embed", "sdpa", True),
        ("nv-embed", "chunked", True),
    ],
)
def test_largest_tensor_grows_linearly(name, attention, padded, tiny_embedder, monkeypatch):
    monkeypatch.setattr(chunked_attention, "_MAX_QUERY_CHUNK", 256)  # chunks of 256 query rows
    embedder = tiny_embedder(name, layout=MODELS[name], device="cpu", attn_implementation=attention)
    small = _record(embedder, 1024, padded=padded)
    large = _record(embedder, 2048, padded=padded)
    assert large.nbytes / small.nbytes <= 2.2, large.op  # a (B, 1, L, L) mask would grow 4x
    assert large.square < 2048  # no tensor is (L, L) in its last two dimensions


def test_the_recorder_sees_eager_quadratic_logits(tiny_embedder):
    eager = tiny_embedder(
        "bge-gemma2", layout=MODELS["bge-gemma2"], device="cpu", attn_implementation="eager"
    )
    small, large = _record(eager, 1024), _record(eager, 2048)
    assert large.nbytes / small.nbytes > 3.5 and large.op[1][-2:] == (2048, 2048), large.op
    assert large.square == 2048
    assert "eager" not in AttentionInterface._global_mapping  # the control really is transformers' eager path
