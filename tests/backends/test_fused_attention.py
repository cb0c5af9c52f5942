"""``attn_implementation="fused"`` (torch flex_attention): equals eager with Gemma 2's softcap, GQA, sliding windows,
bidirectional layers and padding; interventions and the entropy recorder apply through it; its block masks hold
only the band; failures fall back to ``chunked``; the device policy.

Most tests run torch's unfused reference path of flex (``COMPILE = False``: same score_mod and BlockMask, scores
materialised), which equals eager exactly on these inputs; the compiled kernel is checked in the ``slow`` tests
(compiling takes seconds per shape on a CPU) to eager's rounding.
"""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers.masking_utils import (
    AttentionMaskInterface,
    bidirectional_mask_function,
    causal_mask_function,
    sdpa_mask,
    sliding_window_causal_mask_function,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

from llm_collapse.backends import fused_attention
from llm_collapse.backends.block_masks import BLOCK
from llm_collapse.backends.fused_attention import (
    FUSED,
    choose_attention,
    fused_attention_forward,
    fused_mask,
)
from llm_collapse.tasks import layer_probe as layerwise
from llm_collapse.tasks.layer_probe import measure_layers

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

TEXTS = [
    "the quick brown fox jumps over the lazy dog while seven wizards quietly judge the boxing match " * 3,
    "a short one",
    "a sphinx of black quartz reviews my vow, and then some more words to pass the window " * 4,
]
FILL = torch.finfo(torch.float32).min
PATTERNS = {  # name -> (mask function, local_size, causal)
    "causal": (causal_mask_function, None, True),
    "sliding": (sliding_window_causal_mask_function(40), 40, True),
    "bidirectional": (bidirectional_mask_function, None, False),
}


@pytest.fixture
def reference(monkeypatch):
    """torch's unfused flex path (no compile): exact, fast on tiny inputs."""
    monkeypatch.setattr(fused_attention, "COMPILE", False)


MODELS = {
    # embedder name -> its tiny checkpoint's layout overrides
    # softcap 50, GQA, sliding/full layers; a 16-token window, so inputs past 128 tokens skip key blocks in
    # sliding layers
    "bge-gemma2": {"sliding_window": 16},
    "gemma3-270m": {},  # 5 sliding : 1 full, no softcap
    "nv-embed": {},  # bidirectional backbone
}


@pytest.fixture
def load(tiny_embedder):
    """``load(name, attention)``: the tiny ``name`` in its `MODELS` layout, on the CPU, with that attention."""

    def get(name, attention):
        return tiny_embedder(name, layout=MODELS[name], device="cpu", attn_implementation=attention)

    return get


def _module(causal=True):
    return types.SimpleNamespace(is_causal=causal, head_dim=16, num_key_value_groups=2, training=False)


def _qkv(batch=2, length=300):
    generator = torch.Generator().manual_seed(0)
    q = 4.0 * torch.randn(batch, 4, length, 16, generator=generator)
    k = 4.0 * torch.randn(batch, 2, length, 16, generator=generator)
    v = torch.randn(batch, 2, length, 16, generator=generator)
    return q, k, v


def _padding(kind: str, batch=2, length=300):
    keys = torch.ones(batch, length, dtype=torch.bool)
    if kind == "right":
        keys[1, 170:] = False
    elif kind == "left":
        keys[1, :140] = False
    return keys


# ----------------------------------------------------------------------------- registration and policy


def test_registered_and_chosen_on_cuda_only(monkeypatch, caplog):
    assert ALL_ATTENTION_FUNCTIONS[FUSED] is fused_attention_forward
    assert AttentionMaskInterface._global_mapping[FUSED] is fused_mask
    assert fused_attention.register() == FUSED
    with caplog.at_level(logging.INFO, logger="llm_collapse.backends.fused_attention"):
        assert choose_attention("bge-gemma2", "chunked", torch.device("cpu")) == "chunked"
    assert "attention 'chunked'" in caplog.text and "CUDA only" in caplog.text
    monkeypatch.setattr(fused_attention.importlib.util, "find_spec", lambda name: None)
    assert choose_attention("bge-gemma2", "chunked", torch.device("cuda")) == "chunked"  # no Triton
    monkeypatch.setattr(fused_attention.importlib.util, "find_spec", lambda name: object())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="llm_collapse.backends.fused_attention"):
        assert choose_attention("bge-gemma2", "chunked", torch.device("cuda")) == FUSED
    assert "attention 'fused'" in caplog.text and "fallback" in caplog.text
    for other in ("sdpa", "banded", "eager"):
        assert choose_attention("x", other, torch.device("cuda")) == other


def test_load_picks_fused_only_for_the_spec_default(tiny_embedder, monkeypatch):
    default = tiny_embedder("bge-gemma2", device="cpu")
    assert default.describe()["attn_implementation"] == "chunked"  # CPU default
    monkeypatch.setattr(fused_attention, "fused_unavailable", lambda device: None)  # as on a CUDA machine
    chosen = tiny_embedder("bge-gemma2", device="cpu")
    assert chosen.describe()["attn_implementation"] == FUSED
    explicit = tiny_embedder("bge-gemma2", device="cpu", attn_implementation="chunked")
    assert explicit.describe()["attn_implementation"] == "chunked"


# ----------------------------------------------------------------------------- the function against eager


@pytest.mark.usefixtures("reference")
@pytest.mark.parametrize("softcap", [None, 50.0, 5.0])
@pytest.mark.parametrize("padding", ["none", "right", "left"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_equals_eager_for_every_pattern(pattern, padding, softcap):
    mask_function, local_size, causal = PATTERNS[pattern]
    q, k, v = _qkv()
    keys = _padding(padding)
    common = {"batch_size": 2, "q_length": 300, "kv_length": 300, "mask_function": mask_function}
    block = fused_mask(**common, attention_mask=keys, local_size=local_size)
    assert isinstance(block, BlockMask)
    got, weights = fused_attention_forward(_module(causal), q, k, v, block, scaling=0.3, softcap=softcap)
    assert weights is None and got.shape == (2, 300, 4, 16)
    allowed = sdpa_mask(**common, attention_mask=keys, allow_is_causal_skip=False)  # transformers' own rule
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, FILL)
    expected, _ = eager_attention_forward(_module(causal), q, k, v, additive, scaling=0.3, softcap=softcap)
    rows = allowed.any(-1).squeeze(1)  # (B, L): query rows with an attendable key (the others are padding)
    torch.testing.assert_close(got[rows], expected[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("reference")
def test_without_a_mask_the_module_rule_applies_and_tensor_masks_go_to_chunked():
    q, k, v = _qkv()
    allowed = sdpa_mask(
        2, 300, 300, mask_function=sliding_window_causal_mask_function(40), allow_is_causal_skip=False
    )
    expected, _ = eager_attention_forward(
        _module(), q, k, v, torch.zeros(allowed.shape).masked_fill(~allowed, FILL), scaling=0.3, softcap=50.0
    )
    from_rule, _ = fused_attention_forward(
        _module(), q, k, v, None, scaling=0.3, softcap=50.0, sliding_window=40
    )
    from_tensor, _ = fused_attention_forward(_module(), q, k, v, allowed, scaling=0.3, softcap=50.0)
    torch.testing.assert_close(from_rule, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(from_tensor, expected, atol=1e-5, rtol=1e-5)


def test_block_masks_hold_only_the_band_and_the_real_keys():
    length, window = 2048, 256
    n_blocks = length // BLOCK
    sliding = fused_mask(
        1, length, length, mask_function=sliding_window_causal_mask_function(window), local_size=window
    )
    # (1, 1, nQ): key blocks computed per query block
    per_row = sliding.kv_num_blocks + sliding.full_kv_num_blocks
    assert int(per_row.max()) <= window // BLOCK + 1 < n_blocks
    causal = fused_mask(1, length, length, mask_function=causal_mask_function)
    causal_rows = (causal.kv_num_blocks + causal.full_kv_num_blocks).flatten().tolist()
    assert causal_rows == list(range(1, n_blocks + 1))
    keys = torch.ones(2, length, dtype=torch.bool)
    keys[1, 1000:] = False  # right padding: key blocks from 1024 on hold no real key
    padded = fused_mask(2, length, length, mask_function=bidirectional_mask_function, attention_mask=keys)
    total = padded.kv_num_blocks + padded.full_kv_num_blocks
    assert total[0].flatten().tolist() == [n_blocks] * n_blocks
    assert total[1].flatten().tolist() == [1000 // BLOCK + 1] * n_blocks
    for mask in (sliding, causal, padded):  # block-level tensors only: O((L / 128)^2), never (L, L)
        assert all(
            t.numel() <= 2 * n_blocks * n_blocks for t in mask.as_tuple() if isinstance(t, torch.Tensor)
        )


def test_masks_follow_the_layer_device_once():
    """A model sharded over GPUs: masks are built on the first device, rebuilt once per other device."""
    mask = fused_mask(1, 300, 300, mask_function=causal_mask_function)
    assert fused_attention._on_device(mask, torch.device("cpu")) is mask
    moved = fused_attention._on_device(mask, torch.device("meta"))
    assert moved.kv_num_blocks.device.type == "meta" and moved.seq_lengths == (300, 300)
    assert fused_attention._on_device(mask, torch.device("meta")) is moved


# ----------------------------------------------------------------------------- whole models against eager


def _states(embedder, ids, mask):
    return embedder.backend.forward(ids, mask).last_hidden_state * mask[..., None]


def _ids(length=260):
    ids = torch.randint(3, 500, (3, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 200:] = 0  # right padding
    mask[2, :90] = 0  # left padding
    return ids, mask


@pytest.mark.usefixtures("reference")
@pytest.mark.parametrize("name", list(MODELS))
def test_whole_model_equals_eager_padded_and_unpadded(name, load):
    eager, fused = load(name, "eager"), load(name, FUSED)
    assert fused.model.config.get_text_config()._attn_implementation == FUSED
    ids, mask = _ids()
    for m in (mask, torch.ones_like(mask)):
        torch.testing.assert_close(_states(fused, ids, m), _states(eager, ids, m), atol=1e-5, rtol=0)
    for side in ("right", "left"):
        eager.padding_side = fused.padding_side = side
        np.testing.assert_allclose(fused.encode(TEXTS), eager.encode(TEXTS), atol=1e-5, rtol=0)


@pytest.mark.usefixtures("reference")
@pytest.mark.parametrize(
    "spec", ["tempscale:0.7", "tempscale:0.7:after", "tempscale-log:8", "selfextend:2:8"]
)
def test_interventions_apply_through_fused(spec, load):
    eager, fused = load("bge-gemma2", "eager"), load("bge-gemma2", FUSED)
    base = fused.encode(TEXTS)
    with eager.intervene(spec), fused.intervene(spec):
        changed = fused.encode(TEXTS)
        np.testing.assert_allclose(changed, eager.encode(TEXTS), atol=1e-5, rtol=0)
    assert np.abs(changed - base).max() > 1e-4  # the intervention did something
    assert fused.model.config._attn_implementation == FUSED
    np.testing.assert_array_equal(fused.encode(TEXTS), base)


@pytest.mark.usefixtures("reference")
def test_entropy_recorder_works_through_fused(load, monkeypatch):
    monkeypatch.setattr(layerwise, "_CHUNK", 64)
    fused = measure_layers(load("bge-gemma2", FUSED), TEXTS)
    eager = measure_layers(load("bge-gemma2", "eager"), TEXTS)
    np.testing.assert_allclose(fused.embeddings, eager.embeddings, atol=1e-5)
    np.testing.assert_allclose(fused.attention_entropy, eager.attention_entropy, atol=1e-5)
    np.testing.assert_allclose(fused.high_frequency, eager.high_frequency, atol=1e-5)


# ----------------------------------------------------------------------------- failure fallback


def test_a_failing_kernel_falls_back_to_chunked_once(load, monkeypatch, caplog):
    def broken():
        def kernel(*args, **kwargs):
            raise RuntimeError("no compiler here")

        return kernel

    monkeypatch.setattr(fused_attention, "_kernel", broken)
    monkeypatch.setattr(fused_attention, "_failed", [])
    chunked, fused = load("bge-gemma2", "chunked"), load("bge-gemma2", FUSED)
    ids, mask = _ids()
    with caplog.at_level(logging.WARNING, logger="llm_collapse.backends.fused_attention"):
        got = _states(fused, ids, mask)
        again = _states(fused, ids, mask)
    # what chunked computes with the same key padding
    torch.testing.assert_close(got, _states(chunked, ids, mask), atol=1e-6, rtol=0)
    torch.testing.assert_close(again, got)
    assert caplog.text.count("no compiler here") == 1 and "'chunked'" in caplog.text
    foreign = create_block_mask(lambda b, h, q, k: k <= q, None, None, 256, 256, device="cpu")
    q, k, v = _qkv(length=256)
    with pytest.raises(RuntimeError, match="attn_implementation='chunked'"):
        fused_attention_forward(_module(), q, k, v, foreign, scaling=0.3)


# ----------------------------------------------------------------------------- the compiled kernel


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bge-gemma2", "nv-embed"])
def test_compiled_kernel_matches_eager(name, load):
    eager, fused = load(name, "eager"), load(name, FUSED)
    for length in (300, 420):  # a second length: dynamo recompiles with dynamic shapes
        ids, mask = _ids(length)
        for m in (mask, torch.ones_like(mask)):
            torch.testing.assert_close(_states(fused, ids, m), _states(eager, ids, m), atol=1e-4, rtol=0)
    for side in ("right", "left"):
        eager.padding_side = fused.padding_side = side
        np.testing.assert_allclose(fused.encode(TEXTS), eager.encode(TEXTS), atol=1e-5, rtol=0)
    with eager.intervene("tempscale:0.7"), fused.intervene("tempscale:0.7"):
        np.testing.assert_allclose(fused.encode(TEXTS), eager.encode(TEXTS), atol=1e-5, rtol=0)
