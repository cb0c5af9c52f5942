"""Tests for the native NV-Embed-v2 implementation (``llm_collapse.models.nv_embed``).

The tiny checkpoint comes from ``llm_collapse.testing.checkpoints.save_tiny_nv_embed`` (the published layout of
anchors.md 4.2, written from key names, not from this module's ``state_dict``). The reference forward is written
out here with a plain ``MistralModel`` and torch ops on the raw safetensors tensors; its dimensions are read from
the checkpoint's ``config.json``.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import MistralConfig, MistralModel

from llm_collapse.models.nv_embed import (
    LATENT_ATTENTION_DEFAULTS,
    NVEmbedConfig,
    NVEmbedModel,
    load_nv_embed,
)
from llm_collapse.testing.checkpoints import save_tiny_nv_embed

# Shorter than the test sequences: the reference attends over the full input, so applying Mistral's window fails.
SLIDING_WINDOW = 4
# Differs from the backbone head_dim, so a wrong latent-attention scale would show.
CROSS_DIM_HEAD = 48
EOS = 2
LA = "latent_attention_model.cross_attend_blocks"


def write_checkpoint(path: Path, *, ff_key_style: str = "net.0") -> Path:
    return save_tiny_nv_embed(
        path, seed=0, ff_key_style=ff_key_style, sliding_window=SLIDING_WINDOW, cross_dim_head=CROSS_DIM_HEAD
    )


def read_dims(ckpt: Path) -> SimpleNamespace:
    """Sizes of the tiny checkpoint, straight from its published-style config.json."""
    raw = json.loads((ckpt / "config.json").read_text())
    text, latent = raw["text_config"], raw["latent_attention_config"]
    return SimpleNamespace(
        hidden=text["hidden_size"],
        layers=text["num_hidden_layers"],
        heads=text["num_attention_heads"],
        kv_heads=text["num_key_value_heads"],
        head_dim=text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"],
        intermediate=text["intermediate_size"],
        vocab=text["vocab_size"],
        rms_eps=text["rms_norm_eps"],
        rope_theta=text["rope_theta"],
        max_pos=text["max_position_embeddings"],
        latents=latent["num_latents_value"],
        cross_heads=latent["num_cross_heads"],
        cross_dim_head=latent["cross_dim_head"],
    )


# --------------------------------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    path = write_checkpoint(tmp_path_factory.mktemp("nv_embed") / "published")
    assert json.loads((path / "config.json").read_text())["text_config"]["sliding_window"] == SLIDING_WINDOW
    return path


@pytest.fixture(scope="module")
def dims(ckpt) -> SimpleNamespace:
    return read_dims(ckpt)


@pytest.fixture(scope="module")
def model(ckpt) -> NVEmbedModel:
    return load_nv_embed(ckpt, dtype=torch.float32)


@pytest.fixture(scope="module")
def eager_model(ckpt) -> NVEmbedModel:
    return load_nv_embed(ckpt, dtype=torch.float32, attn_implementation="eager")


def right_padded(lengths: list[int], vocab: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (never a special id) right-padded with EOS, and the (B, L) attention mask."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), EOS, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(3, vocab, (n,), generator=g)
        mask[row, :n] = 1
    return ids, mask


def masked_mean(hidden: torch.Tensor, pool_mask: torch.Tensor) -> torch.Tensor:
    weights = pool_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def reference_embeddings(
    tensors: dict[str, torch.Tensor], d: SimpleNamespace, ids, attention_mask, pool_mask
) -> torch.Tensor:
    """Independent NV-Embed forward: plain MistralModel (eager, hand-made bidirectional mask) + explicit pooler."""
    config = MistralConfig(
        vocab_size=d.vocab,
        hidden_size=d.hidden,
        intermediate_size=d.intermediate,
        num_hidden_layers=d.layers,
        num_attention_heads=d.heads,
        num_key_value_heads=d.kv_heads,
        head_dim=d.head_dim,
        max_position_embeddings=d.max_pos,
        rms_norm_eps=d.rms_eps,
        rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta},
        sliding_window=None,
        attn_implementation="eager",
    )
    backbone = MistralModel(config).eval()
    backbone_weights = {
        k.removeprefix("embedding_model."): v for k, v in tensors.items() if k.startswith("embedding_model.")
    }
    backbone.load_state_dict(backbone_weights, strict=True)
    batch, length = ids.shape
    # Additive (B, 1, L, L) mask: every query sees every real key, padded keys get the dtype minimum.
    key_ok = attention_mask.bool()[:, None, None, :].expand(batch, 1, length, length)
    additive = torch.zeros(batch, 1, length, length).masked_fill(~key_ok, torch.finfo(torch.float32).min)
    with torch.no_grad():
        x = backbone(input_ids=ids, attention_mask=additive).last_hidden_state  # (B, L, H)

        w = {k.removeprefix(f"{LA}."): v for k, v in tensors.items() if k.startswith(LA)}
        lat = tensors["latent_attention_model.latents"]
        lat = F.layer_norm(lat, (d.hidden,), w["0.norm_context.weight"], w["0.norm_context.bias"])
        xn = F.layer_norm(x, (d.hidden,), w["0.norm.weight"], w["0.norm.bias"])
        q = xn @ w["0.fn.to_q.weight"].T  # (B, L, heads*d)
        kv = lat @ w["0.fn.to_kv.weight"].T  # (N, 2*heads*d): keys first, then values
        inner = d.cross_heads * d.cross_dim_head
        k, v = kv[:, :inner], kv[:, inner:]
        heads = []
        for h in range(d.cross_heads):
            sl = slice(h * d.cross_dim_head, (h + 1) * d.cross_dim_head)
            scores = q[..., sl] @ k[:, sl].T / math.sqrt(d.cross_dim_head)  # (B, L, N)
            heads.append(torch.softmax(scores, dim=-1) @ v[:, sl])  # (B, L, d)
        x = torch.cat(heads, dim=-1) @ w["0.fn.to_out.weight"].T + x
        xn = F.layer_norm(x, (d.hidden,), w["1.norm.weight"], w["1.norm.bias"])
        u = xn @ w["1.fn.net.0.weight"].T + w["1.fn.net.0.bias"]  # (B, L, 8H)
        value, gate = u[..., : 4 * d.hidden], u[..., 4 * d.hidden :]
        gelu = 0.5 * gate * (1.0 + torch.erf(gate / math.sqrt(2.0)))
        x = (value * gelu) @ w["1.fn.net.2.weight"].T + w["1.fn.net.2.bias"] + x
    return F.normalize(masked_mean(x, pool_mask), dim=-1)


def module_embeddings(model: NVEmbedModel, ids, attention_mask, pool_mask) -> torch.Tensor:
    with torch.no_grad():
        tokens = model(input_ids=ids, attention_mask=attention_mask).last_hidden_state
    return F.normalize(masked_mean(tokens, pool_mask), dim=-1)


# --------------------------------------------------------------------------------------------------------------
# 1. config and loading


def test_config_reads_published_json(ckpt, dims):
    config = NVEmbedConfig.from_pretrained(ckpt)
    assert isinstance(config.text_config, MistralConfig)
    assert config.text_config.model_type == "mistral"
    assert (config.text_config.num_hidden_layers, config.text_config.hidden_size) == (
        dims.layers,
        dims.hidden,
    )
    assert config.text_config.sliding_window is None  # the original's mask path bypassed the window
    assert config.text_config.is_causal is False
    assert getattr(config, "auto_map", None) is None
    assert (config.add_eos, config.add_pad_token, config.is_mask_instruction) == (True, True, True)
    assert (config.mask_type, config.padding_side, config.hidden_size) == ("b", "right", dims.hidden)
    assert config.latent_attention_config["num_latents_value"] == dims.latents
    assert config.latent_attention_config["cross_dim_head"] == CROSS_DIM_HEAD


def test_config_accepts_legacy_text_fields_and_fills_latent_defaults(tmp_path):
    # A transformers-4.42 era text_config carries generic and generation fields; none may break parsing.
    legacy_text = {
        "_name_or_path": "nvidia/NV-Embed-v2",
        "add_cross_attention": False,
        "architectures": ["MistralModel"],
        "bad_words_ids": None,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": 32,
        "is_decoder": False,
        "max_length": 20,
        "model_type": "bidir_mistral",
        "pruned_heads": {},
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "temperature": 1.0,
        "top_k": 50,
        "torch_dtype": "float32",
        "torchscript": False,
        "use_bfloat16": False,
    }
    raw = {
        "model_type": "nvembed",
        "text_config": legacy_text,
        "latent_attention_config": {},
        "hidden_size": 64,
    }
    raw["auto_map"] = {"AutoModel": "modeling_nvembed.NVEmbedModel"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    config = NVEmbedConfig.from_pretrained(tmp_path)
    assert config.text_config.model_type == "mistral" and config.text_config.hidden_size == 64
    assert config.text_config.rope_parameters["rope_theta"] == 10000.0
    assert getattr(config, "auto_map", None) is None
    for name, value in LATENT_ATTENTION_DEFAULTS.items():
        assert config.latent_attention_config[name] == value
    la = config.latent_attention_config
    published = (la["num_latents_value"], la["num_cross_heads"], la["latent_dim"], la["hidden_dim"])
    assert published == (512, 8, 4096, 4096) and la["cross_dim_head"] == 4096


def test_loads_every_parameter_from_the_checkpoint(ckpt, model):
    tensors = load_file(str(ckpt / "model.safetensors"))
    state = model.state_dict()
    assert set(state) == set(tensors)
    for key, tensor in tensors.items():
        assert torch.equal(state[key], tensor), key
    assert all(layer.self_attn.is_causal is False for layer in model.embedding_model.layers)
    assert model.embedding_model.config._attn_implementation == "sdpa"


def test_dtype_kwarg_reaches_from_pretrained(ckpt, dims):
    bf16 = load_nv_embed(ckpt, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    ids, mask = right_padded([5, 3], dims.vocab)
    with torch.no_grad():
        out = bf16(input_ids=ids, attention_mask=mask).last_hidden_state
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


# --------------------------------------------------------------------------------------------------------------
# 2. independent reference


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_matches_independent_reference(ckpt, dims, model, eager_model, attn):
    tensors = load_file(str(ckpt / "model.safetensors"))
    ids, mask = right_padded([11, 7, 4], dims.vocab)
    pool_mask = mask.clone()
    pool_mask[:, :2] = 0  # an "instruction" prefix excluded from the pool, as the package's formatting does
    expected = reference_embeddings(tensors, dims, ids, mask, pool_mask)
    got = module_embeddings(model if attn == "sdpa" else eager_model, ids, mask, pool_mask)
    cosine = (expected * got).sum(-1)
    assert torch.all(cosine >= 0.99999), cosine
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------------------------------------------
# 3. bidirectionality, padding, backends


def test_later_token_changes_earlier_states(dims, model):
    ids, mask = right_padded([8], dims.vocab)
    changed = ids.clone()
    changed[0, 6] = 3 if ids[0, 6] != 3 else 4
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        b = model(input_ids=changed, attention_mask=mask, output_hidden_states=True)
    assert not torch.allclose(a.last_hidden_state[0, 0], b.last_hidden_state[0, 0], atol=1e-4)
    assert not torch.allclose(a.hidden_states[-1][0, :6], b.hidden_states[-1][0, :6], atol=1e-4)

    # Control: the same backbone run causally leaves positions before 6 untouched, so the check above discriminates.
    causal_config = copy.deepcopy(model.config.text_config)
    causal_config.is_causal = True
    causal = MistralModel(causal_config).eval()
    causal.load_state_dict(model.embedding_model.state_dict())
    assert all(layer.self_attn.is_causal for layer in causal.layers)
    with torch.no_grad():
        ca = causal(input_ids=ids, attention_mask=mask).last_hidden_state
        cb = causal(input_ids=changed, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(ca[0, :6], cb[0, :6])


def test_output_hidden_states_pass_through(dims, model):
    ids, mask = right_padded([6, 4], dims.vocab)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        plain = model(input_ids=ids, attention_mask=mask)
    assert out.last_hidden_state.shape == (2, 6, dims.hidden)
    assert len(out.hidden_states) == dims.layers + 1
    assert all(h.shape == (2, 6, dims.hidden) for h in out.hidden_states)
    assert plain.hidden_states is None


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_padding_does_not_change_states(dims, model, eager_model, attn):
    m = model if attn == "sdpa" else eager_model
    ids, mask = right_padded([10, 5], dims.vocab)
    with torch.no_grad():
        batched = m(input_ids=ids, attention_mask=mask).last_hidden_state
        alone = m(input_ids=ids[1:, :5], attention_mask=mask[1:, :5]).last_hidden_state
        no_mask = m(input_ids=ids[1:, :5]).last_hidden_state
    torch.testing.assert_close(batched[1, :5], alone[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(no_mask, alone, atol=1e-5, rtol=0)


def test_sdpa_and_eager_agree(dims, model, eager_model):
    assert eager_model.embedding_model.config._attn_implementation == "eager"
    ids, mask = right_padded([9, 6, 2], dims.vocab)
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask).last_hidden_state
        b = eager_model(input_ids=ids, attention_mask=mask).last_hidden_state
    valid = mask.bool()
    torch.testing.assert_close(a[valid], b[valid], atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# 4. key spelling


def test_net0_proj_spelling_loads_identically(tmp_path, dims, model):
    proj_dir = write_checkpoint(tmp_path / "proj", ff_key_style="net.0.proj")
    assert any(".fn.net.0.proj." in k for k in load_file(str(proj_dir / "model.safetensors")))
    proj = load_nv_embed(proj_dir, dtype=torch.float32)
    for (ka, va), (kb, vb) in zip(model.state_dict().items(), proj.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb), ka
    ids, mask = right_padded([7, 3], dims.vocab)
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask).last_hidden_state
        b = proj(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------------------------
# 5. strict layout check


def _drop_bias(t: dict[str, torch.Tensor]) -> None:
    t.pop(f"{LA}.1.fn.net.2.bias")


def _add_lm_head(t: dict[str, torch.Tensor]) -> None:
    t["lm_head.weight"] = torch.zeros_like(t["embedding_model.embed_tokens.weight"])


def _shrink_latents(t: dict[str, torch.Tensor]) -> None:
    t["latent_attention_model.latents"] = t["latent_attention_model.latents"][:-1].clone()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_drop_bias, r"missing \[.*net\.2\.bias"),
        (_add_lm_head, r"unexpected \[.*lm_head"),
        (_shrink_latents, r"size-mismatched \[.*latents"),
    ],
    ids=["missing", "unexpected", "shape"],
)
def test_layout_mismatch_raises(tmp_path, ckpt, edit, message):
    shutil.copy(ckpt / "config.json", tmp_path / "config.json")
    tensors = load_file(str(ckpt / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"does not match the NV-Embed-v2 layout") as info:
        load_nv_embed(tmp_path, dtype=torch.float32)
    assert "\n" not in str(info.value)
    assert re.search(message, str(info.value)), str(info.value)
