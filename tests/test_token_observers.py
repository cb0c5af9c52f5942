"""`Embedder.observe_tokens` (`llm_collapse.encoding.tokens`): every text a forward reads is handed on with the
last layer's states of its input and its pool mask, equal to a forward of that text alone, in batches, with
padding and under prefix sharing; their masked mean is the embedding itself; roads without token states refuse."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_collapse.interventions import NotApplicable

TEXTS = [
    "a short text",
    "another text that is a little longer than the first one, with a few more words in it",
    "a third",
]


def _alone(embedder, text: str) -> tuple[np.ndarray, np.ndarray]:
    """The text's states and pool mask from a forward of it alone (batch of one, no padding)."""
    item = embedder.tokenize([text])[0]
    ids = torch.tensor([item.input_ids])
    out = embedder.backend.forward(ids, torch.ones_like(ids))
    return out.last_hidden_state[0].float().cpu().numpy(), np.array(item.pool_mask, dtype=bool)


def _observed(embedder, texts, **options) -> tuple[dict, np.ndarray]:
    seen = {}

    def observer(text, states, mask):
        seen.setdefault(text, []).append((states.float().cpu().numpy(), mask.cpu().numpy()))

    with embedder.observe_tokens(observer):
        vectors = embedder.encode(texts, **options)
    assert embedder.token_observers == ()
    return seen, vectors


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_observed_states_equal_a_forward_alone_and_pool_to_the_embedding(tiny_embedder, padding_side):
    embedder = tiny_embedder("gemma3-270m")
    embedder.padding_side = padding_side
    seen, vectors = _observed(embedder, TEXTS, batch_size=3)
    assert set(seen) == set(TEXTS) and all(len(v) == 1 for v in seen.values())
    for text, vector in zip(TEXTS, vectors, strict=True):
        (states, mask), = seen[text]
        alone, alone_mask = _alone(embedder, text)
        np.testing.assert_array_equal(mask, alone_mask)
        np.testing.assert_allclose(states, alone, rtol=1e-4, atol=1e-5)
        mean = states[mask].astype(np.float64).mean(axis=0)  # gemma3-270m: mean pooling, BOS skipped
        np.testing.assert_allclose(mean / np.linalg.norm(mean), vector, rtol=1e-5, atol=1e-6)
        assert not mask[0] and mask[1:].all()  # its card's rule: the BOS is not pooled


def test_prefix_sharing_hands_each_prefix_its_own_span(tiny_embedder):
    """Token prefixes of one text are read from its forward: each is observed once, with its own span."""
    embedder = tiny_embedder("gemma3-270m")
    ids = embedder.tokenizer("one two three four five six seven eight nine ten", add_special_tokens=False)
    prefixes = [embedder.tokenizer.decode(ids["input_ids"][:n]) for n in (3, 6, 10)]
    assert embedder.prefix_sharing().ok
    seen, _ = _observed(embedder, prefixes, share_prefixes=True)
    for text in prefixes:
        (states, mask), = seen[text]
        alone, alone_mask = _alone(embedder, text)
        assert states.shape == alone.shape
        np.testing.assert_array_equal(mask, alone_mask)
        np.testing.assert_allclose(states, alone, rtol=1e-4, atol=1e-5)


def test_a_road_without_token_states_refuses_to_be_observed():
    """PCW embeds an input from forwards of its own chunks, averaged: there is no one forward's states."""
    import llm_collapse as lc

    embedder = lc.load_embedder("minilm", device="cpu")
    with embedder.intervene("pcw:2"), embedder.observe_tokens(lambda *a: None):
        with pytest.raises(NotApplicable, match="token states are not available"):
            embedder.encode(["a text"])
    assert embedder.encode(["a text"]).shape == (1, 384)  # observing ended with the block
