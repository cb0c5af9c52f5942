"""``attn_implementation="chunked"``: equals eager (softcap, GQA, every mask form, sliding windows, padding) and
its peak memory of one long forward is far below eager's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import torch
from transformers.masking_utils import AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

from llm_collapse.backends import chunked_attention
from llm_collapse.backends.chunked_attention import (
    CHUNKED,
    chunked_attention_forward,
    query_chunk_size,
    registered_name,
)
from llm_collapse.backends.mask_patterns import lean_mask

TEXTS = [
    "the quick brown fox jumps over the lazy dog while seven wizards quietly judge the boxing match",
    "a short one",
    "a sphinx of black quartz reviews my vow, and then some more words to pass the window",
]

MODELS = [
    # catalog names of the tiny checkpoints the whole-model tests run on
    "bge-gemma2",  # Gemma 2: softcap 50, sliding window 4096
    "gemma3-270m",  # Gemma 3: sliding window 16, 5 sliding : 1 full layers
    "mistral",  # Mistral: GQA, sliding window 4096
    "nv-embed",  # bidirectional backbone (None / bidirectional masks)
]

FILL = torch.finfo(torch.float32).min


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 5 query rows, so tiny inputs cross many chunk boundaries."""
    monkeypatch.setattr(chunked_attention, "_MAX_QUERY_CHUNK", 5)


def _module(*, causal=True, heads=4, kv_heads=2, head_dim=16):
    return types.SimpleNamespace(
        is_causal=causal, head_dim=head_dim, num_key_value_groups=heads // kv_heads, training=False
    )


def _qkv(batch=2, heads=4, kv_heads=2, q_len=23, k_len=23, head_dim=16, scale=4.0):
    generator = torch.Generator().manual_seed(0)
    q = scale * torch.randn(batch, heads, q_len, head_dim, generator=generator)
    k = scale * torch.randn(batch, kv_heads, k_len, head_dim, generator=generator)
    v = torch.randn(batch, kv_heads, k_len, head_dim, generator=generator)
    return q, k, v


def _allowed(batch, q_len, k_len, *, causal=True, window=None, padding=None):
    """(B, 1, Lq, Lk) boolean reference mask, bottom-right aligned."""
    q_pos = torch.arange(q_len)[:, None] + (k_len - q_len)
    k_pos = torch.arange(k_len)[None, :]
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        allowed &= k_pos <= q_pos
        if window is not None:
            allowed &= q_pos - k_pos < window
    allowed = allowed[None, None].expand(batch, 1, q_len, k_len)
    if padding is not None:
        allowed = allowed & padding.bool()[:, None, None, :]
    return allowed


def _additive(allowed):
    return torch.zeros(allowed.shape).masked_fill(~allowed, FILL)


def _eager(q, k, v, allowed, **kwargs):
    out, _ = eager_attention_forward(
        _module(heads=q.shape[1], kv_heads=k.shape[1]), q, k, v, _additive(allowed), **kwargs
    )
    return out


# ----------------------------------------------------------------------------- registration


def test_registered_under_the_user_facing_name():
    assert registered_name("chunked") == CHUNKED == "chunked"
    assert registered_name("eager") == "eager"
    assert ALL_ATTENTION_FUNCTIONS["chunked"] is chunked_attention_forward
    assert AttentionMaskInterface._global_mapping["chunked"] is lean_mask
    assert chunked_attention.register() == "chunked"  # idempotent


def test_chunk_size_respects_both_limits(monkeypatch):
    assert query_chunk_size(1, 4, 4096) == 1024
    assert query_chunk_size(1, 16, 32768) == 128  # 2**26 logits
    assert query_chunk_size(64, 64, 1 << 20) == 1
    monkeypatch.setattr(chunked_attention, "_MAX_QUERY_CHUNK", 5)
    assert query_chunk_size(1, 4, 4096) == 5


# ----------------------------------------------------------------------------- the function against eager


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("softcap", [None, 50.0, 5.0])
@pytest.mark.parametrize("form", ["bool", "additive", "none", "2d"])
def test_equals_eager_for_every_mask_form(softcap, form):
    q, k, v = _qkv()
    padding = torch.ones(2, 23, dtype=torch.long)
    if form != "none":
        padding[1, 15:] = 0  # right padding in the second row
    allowed = _allowed(2, 23, 23, padding=padding)
    mask = {"bool": allowed, "additive": _additive(allowed), "none": None, "2d": padding}[form]
    got, weights = chunked_attention_forward(_module(), q, k, v, mask, scaling=0.3, softcap=softcap)
    assert weights is None and got.shape == (2, 23, 4, 16)
    expected = _eager(q, k, v, allowed, scaling=0.3, softcap=softcap)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_softcap_matters_on_these_inputs():
    q, k, v = _qkv()
    allowed = _allowed(2, 23, 23)
    capped, _ = chunked_attention_forward(_module(), q, k, v, allowed, scaling=0.3, softcap=5.0)
    plain, _ = chunked_attention_forward(_module(), q, k, v, allowed, scaling=0.3)
    assert (capped - plain).abs().max() > 1e-2


@pytest.mark.usefixtures("small_chunks")
def test_sliding_window_without_a_mask_and_in_a_mask():
    q, k, v = _qkv()
    allowed = _allowed(2, 23, 23, window=6)
    expected = _eager(q, k, v, allowed, scaling=0.25, softcap=50.0)
    from_kwarg, _ = chunked_attention_forward(
        _module(), q, k, v, None, scaling=0.25, softcap=50.0, sliding_window=6
    )
    from_mask, _ = chunked_attention_forward(
        _module(), q, k, v, allowed, scaling=0.25, softcap=50.0, sliding_window=6
    )
    torch.testing.assert_close(from_kwarg, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(from_mask, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("small_chunks")
def test_bidirectional_and_is_causal_override():
    q, k, v = _qkv()
    full = _allowed(2, 23, 23, causal=False)
    expected = _eager(q, k, v, full, scaling=0.25)
    got, _ = chunked_attention_forward(_module(causal=False), q, k, v, None, scaling=0.25)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    overridden, _ = chunked_attention_forward(
        _module(causal=True), q, k, v, None, scaling=0.25, is_causal=False
    )
    torch.testing.assert_close(overridden, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("small_chunks")
def test_fewer_queries_than_keys_align_bottom_right_and_mha_and_default_scaling():
    q, k, v = _qkv(heads=2, kv_heads=2, q_len=7, k_len=19)
    expected, _ = eager_attention_forward(
        _module(heads=2, kv_heads=2), q, k, v, _additive(_allowed(2, 7, 19)), scaling=16**-0.5
    )
    got, _ = chunked_attention_forward(_module(heads=2, kv_heads=2), q, k, v, None)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_stay_finite_and_grad_path_matches():
    q, k, v = _qkv()
    allowed = _allowed(2, 23, 23).clone()
    allowed[1, :, 20:] = False  # padded queries that see nothing
    out, _ = chunked_attention_forward(_module(), q, k, v, allowed, scaling=0.3, softcap=50.0)
    assert torch.isfinite(out).all()
    q.requires_grad_(True)
    with torch.enable_grad():
        grad_path, _ = chunked_attention_forward(_module(), q, k, v, allowed, scaling=0.3, softcap=50.0)
        grad_path.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    torch.testing.assert_close(grad_path.detach(), out, atol=1e-6, rtol=1e-6)


def test_uneven_heads_raise():
    q, k, v = _qkv(heads=3, kv_heads=2)
    with pytest.raises(ValueError, match="3 query heads are not a multiple of 2"):
        chunked_attention_forward(_module(heads=3, kv_heads=2), q, k, v, None)


# ----------------------------------------------------------------------------- whole models against eager


def _pair(tiny_embedder, name):
    """The tiny ``name`` twice: eager, chunked."""
    return (
        tiny_embedder(name, attn_implementation="eager"),
        tiny_embedder(name, attn_implementation="chunked"),
    )


def _states(embedder, ids, mask):
    return embedder.backend.forward(ids, mask).last_hidden_state * mask[..., None]


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("name", MODELS)
def test_whole_model_equals_eager_with_padding(name, tiny_embedder):
    eager, chunked = _pair(tiny_embedder, name)
    assert chunked.model.config.get_text_config()._attn_implementation == "chunked"
    assert chunked.describe()["attn_implementation"] == "chunked"
    ids = torch.randint(3, 500, (3, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0  # right padding
    mask[2, :12] = 0  # left padding
    torch.testing.assert_close(_states(chunked, ids, mask), _states(eager, ids, mask), atol=1e-5, rtol=1e-5)
    for side in ("right", "left"):
        eager.padding_side = chunked.padding_side = side
        np.testing.assert_allclose(chunked.encode(TEXTS), eager.encode(TEXTS), atol=1e-5, rtol=0)


def test_inputs_exceed_the_gemma3_window_and_bge_softcap_is_honoured(tiny_embedder):
    gemma3 = tiny_embedder("gemma3-270m")
    assert max(len(e) for e in gemma3.tokenize(TEXTS)) > gemma3.model.config.sliding_window
    _, chunked = _pair(tiny_embedder, "bge-gemma2")
    with_cap = chunked.encode(TEXTS)
    layers = [m for _, m in chunked.model.named_modules() if hasattr(m, "attn_logit_softcapping")]
    assert layers and all(m.attn_logit_softcapping == 50.0 for m in layers)
    for m in layers:
        m.attn_logit_softcapping = None
    try:
        without_cap = chunked.encode(TEXTS)
    finally:
        for m in layers:
            m.attn_logit_softcapping = 50.0
    assert (
        np.abs(with_cap - without_cap).max() > 1e-3
    )  # so the equality with eager above is about the softcap


@pytest.mark.parametrize("spec", ["tempscale:0.7", "tempscale-log:8", "selfextend:2:8"])
def test_interventions_route_through_chunked(spec, tiny_embedder):
    eager, chunked = _pair(tiny_embedder, "bge-gemma2")
    with eager.intervene(spec), chunked.intervene(spec):
        np.testing.assert_allclose(chunked.encode(TEXTS), eager.encode(TEXTS), atol=1e-5, rtol=0)
    assert chunked.model.config._attn_implementation == "chunked"


# ----------------------------------------------------------------------------- memory

_PEAK_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch, llm_collapse
    import llm_collapse.backends.chunked_attention  # registers "chunked"

    def status(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

    path, length = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(2)
    embedder = llm_collapse.load_embedder("bge-gemma2", path=path, dtype="fp32", attn_implementation="chunked")
    ids = torch.randint(3, 500, (1, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    embedder.backend.forward(ids[:, :64], mask[:, :64])  # warm up
    out = {}
    for implementation in ("chunked", "eager"):
        embedder.model.config._attn_implementation = implementation
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (peak resident set) to the current RSS
        base = status("VmRSS:")
        embedder.backend.forward(ids, mask)
        out[implementation] = (status("VmHWM:") - base) / 2**20
    print(json.dumps(out))
    """
)


def _can_reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        with open("/proc/self/status") as f:
            return any(line.startswith("VmHWM:") for line in f)
    except OSError:
        return False


@pytest.mark.skipif(
    not _can_reset_peak_rss(), reason="needs Linux /proc/self/clear_refs to reset the peak RSS"
)
def test_peak_memory_of_a_long_forward_is_far_below_eager(tiny_dir):
    length = 4096
    result = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(tiny_dir("bge-gemma2")), str(length)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    peak = json.loads(result.stdout.strip().splitlines()[-1])  # MiB above the pre-forward RSS
    eager_logits = 4 * length * length * 4 / 2**20  # one (1, 4 heads, L, L) float32 tensor: 256 MiB
    assert peak["eager"] > eager_logits  # eager really materialises the L x L logits
    assert peak["chunked"] < peak["eager"] / 3
    assert peak["chunked"] < eager_logits * 0.75
