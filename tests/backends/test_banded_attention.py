"""``attn_implementation="banded"``: equal to eager on sliding-window models, and it computes only the band."""

from __future__ import annotations

import pytest
import torch
from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

import llm_collapse.backends.banded_attention as banded
from llm_collapse.encoding.forward import collate

TEXTS = [
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five",
    "a much shorter text",
    "length collapse: longer inputs crowd their embeddings together, " * 3,
]

MODELS = {
    # embedder name -> its tiny checkpoint's layout overrides
    "gemma3-270m": {},
    "mistral": {"sliding_window": 8},  # e5-mistral layout with an 8-token window, so the test texts slide
}


def _hidden(embedder, side: str) -> list[torch.Tensor]:
    encoded = embedder.tokenize(TEXTS)
    embedder.padding_side = side
    input_ids, attention_mask, _ = collate(embedder, encoded)
    out = embedder.backend.forward(input_ids, attention_mask, output_hidden_states=False)
    return [out.last_hidden_state[i][attention_mask[i].bool()] for i in range(len(TEXTS))]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", list(MODELS))
def test_banded_equals_eager_padded_and_unpadded(name, side, tiny_embedder):
    eager = _hidden(tiny_embedder(name, layout=MODELS[name], attn_implementation="eager"), side)
    got = _hidden(tiny_embedder(name, layout=MODELS[name], attn_implementation="banded"), side)
    window = tiny_embedder(name, layout=MODELS[name]).model.config.sliding_window
    assert max(a.shape[0] for a in eager) > 2 * window  # the band path runs, over several chunks
    for a, b in zip(eager, got, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    # one text alone (no padding, no mask: the band is built from positions)
    embedder = tiny_embedder(name, layout=MODELS[name], attn_implementation="banded")
    reference = tiny_embedder(name, layout=MODELS[name], attn_implementation="eager")
    torch.testing.assert_close(
        torch.as_tensor(embedder.encode(TEXTS[:1])),
        torch.as_tensor(reference.encode(TEXTS[:1])),
        atol=1e-6,
        rtol=0,
    )


def test_sliding_layers_see_only_their_band(tiny_embedder, monkeypatch):
    """Every sdpa call of a sliding layer gets at most 2 x window keys; full layers get all of them."""
    seen: list[tuple[int, int]] = []
    original = banded.sdpa_attention_forward

    def spy(module, query, key, *args, **kwargs):
        seen.append((query.shape[2], key.shape[2]))
        return original(module, query, key, *args, **kwargs)

    monkeypatch.setattr(banded, "sdpa_attention_forward", spy)
    embedder = tiny_embedder("gemma3-270m", attn_implementation="banded")
    window = embedder.model.config.sliding_window
    length = len(embedder.tokenize(TEXTS[:1])[0])
    assert length > 3 * window
    embedder.encode(TEXTS[:1])
    band_calls = [keys for queries, keys in seen if queries < length]
    full_calls = [keys for queries, keys in seen if queries == length]
    assert band_calls and max(band_calls) <= 2 * window - 1
    assert full_calls and set(full_calls) == {length}  # the 1 full layer of the 6 in the tiny Gemma 3


def test_mask_is_none_only_for_unpadded_causal_bands():
    window = 4
    sliding = sliding_window_causal_mask_function(window)
    common = {"batch_size": 1, "q_length": 12, "kv_length": 12}
    assert banded.banded_mask(**common, mask_function=sliding, local_size=window) is None
    assert (
        banded.banded_mask(
            **common, mask_function=sliding, local_size=window, attention_mask=torch.ones(1, 12)
        )
        is None
    )
    padded = torch.ones(1, 12, dtype=torch.bool)
    padded[0, :3] = False
    mask = banded.banded_mask(**common, mask_function=sliding, local_size=window, attention_mask=padded)
    assert mask is not None and mask.shape[-2:] == (12, 12)
    # a local mask that is not the causal band (bidirectional window) keeps its real mask
    bidirectional = lambda b, h, q, k: (q - k).abs() < window  # noqa: E731
    assert banded.banded_mask(**common, mask_function=bidirectional, local_size=window) is not None
    assert (
        banded.banded_mask(**common, mask_function=sliding, local_size=window, allow_is_causal_skip=False)
        is not None
    )
    # plain causal layers fall through to sdpa_mask (None when unpadded: is_causal in the kernel)
    assert banded.banded_mask(**common, mask_function=causal_mask_function) is None
