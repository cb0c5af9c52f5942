"""Tiny checkpoint builders: published layouts, loadability, determinism, tokenizers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

from llm_collapse.testing import (
    NV_EMBED_FF_KEY_STYLES,
    TINY_BUILDERS,
    build_gemma_tokenizer,
    build_llama_tokenizer,
    nv_embed_expected_keys,
    save_tiny_bge_gemma2,
    save_tiny_e5_mistral,
    save_tiny_gemma3,
    save_tiny_gte_qwen2,
    save_tiny_mistral_instruct,
    save_tiny_nv_embed,
    save_tiny_qwen3_embedding,
    save_tokenizer,
)

TEXTS = [
    "Instruct: Given a question, retrieve passages that answer the question\nQuery: what is food?",
    "The passkey is 68217. Remember it. 68217 is the passkey.",
    "Document: the baby eats bread again!  Ünïcode ✓ (42)",
]
HF_LOADABLE = ["e5-mistral", "bge-gemma2", "mistral-instruct", "gemma3", "qwen3-embedding", "gte-qwen2"]


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Build each tiny checkpoint at most once per module (seed 0)."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = TINY_BUILDERS[name](tmp_path_factory.mktemp(name.replace("-", "_")))
        return cache[name]

    return get


# ----------------------------------------------------------------------------- tokenizers


@pytest.mark.parametrize("add_eos", [False, True])
def test_llama_tokenizer_roundtrip(tmp_path: Path, add_eos: bool) -> None:
    tok = build_llama_tokenizer(add_bos=True, add_eos=add_eos)
    assert 1000 <= len(tok) <= 2000
    save_tokenizer(tok, tmp_path)
    config = _read_json(tmp_path / "tokenizer_config.json")
    assert config["add_bos_token"] is True
    assert config["add_eos_token"] is add_eos
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["tokenizer_class"] == "LlamaTokenizer"
    assert config["model_max_length"] == 32768
    backend = _read_json(tmp_path / "tokenizer.json")
    assert backend["post_processor"]["type"] == "TemplateProcessing"
    assert backend["pre_tokenizer"]["type"] == "Metaspace"
    assert backend["pre_tokenizer"]["prepend_scheme"] == "first"
    assert backend["model"]["byte_fallback"] is True

    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded).__name__ == "LlamaTokenizer"
    assert (loaded.unk_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)
    for text in TEXTS:
        ids = loaded(text)["input_ids"]
        assert ids == tok(text)["input_ids"]
        assert ids[0] == 1
        assert (ids[-1] == 2) is add_eos
        bare = loaded(text, add_special_tokens=False)["input_ids"]
        assert bare == ids[1 : len(ids) - int(add_eos)]
        assert loaded.decode(bare) == text
    literal = loaded("<s>hello</s> again", add_special_tokens=False)["input_ids"]
    assert literal[0] == 1 and 2 in literal
    assert literal.count(1) == 1 and literal.count(2) == 1
    assert (
        loaded.convert_ids_to_tokens(loaded("a\nb", add_special_tokens=False)["input_ids"]).count("<0x0A>")
        == 1
    )


def test_gemma_tokenizer_roundtrip(tmp_path: Path) -> None:
    tok = build_gemma_tokenizer(extra_special_tokens=("<instruct>", "<query>"))
    save_tokenizer(tok, tmp_path)
    config = _read_json(tmp_path / "tokenizer_config.json")
    assert config["tokenizer_class"] == "GemmaTokenizer"
    assert (config["add_bos_token"], config["add_eos_token"]) == (True, False)
    assert config["padding_side"] == "left"

    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded).__name__ == "GemmaTokenizer"
    ids = (loaded.pad_token_id, loaded.eos_token_id, loaded.bos_token_id, loaded.unk_token_id)
    assert ids == (0, 1, 2, 3)
    assert loaded.padding_side == "left"
    n = len(loaded)
    assert loaded.convert_tokens_to_ids(["<instruct>", "<query>"]) == [n - 2, n - 1]
    text = "<instruct>Given a question\n<query>what is x"
    encoded = loaded(text)["input_ids"]
    assert encoded == tok(text)["input_ids"]
    assert encoded[0] == 2 and encoded[-1] != 1
    assert encoded[1] == n - 2 and encoded.count(n - 1) == 1
    for sample in TEXTS:
        assert loaded(sample)["input_ids"] == tok(sample)["input_ids"]
        assert loaded.decode(loaded(sample, add_special_tokens=False)["input_ids"]) == sample


def test_plain_gemma_tokenizer_has_no_extras() -> None:
    tok = build_gemma_tokenizer()
    assert len(tok) == tok.vocab_size
    assert tok.convert_ids_to_tokens(list(range(5))) == ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]


# ----------------------------------------------------------------------------- NV-Embed


def _published_nv_keys(n_layers: int, ff0: str) -> set[str]:
    """The key list written out by hand, independent of `nv_embed_expected_keys`."""
    keys = {
        "embedding_model.embed_tokens.weight",
        "embedding_model.norm.weight",
        "latent_attention_model.latents",
    }
    for i in range(n_layers):
        layer = f"embedding_model.layers.{i}"
        keys |= {
            f"{layer}.self_attn.q_proj.weight",
            f"{layer}.self_attn.k_proj.weight",
            f"{layer}.self_attn.v_proj.weight",
            f"{layer}.self_attn.o_proj.weight",
            f"{layer}.mlp.gate_proj.weight",
            f"{layer}.mlp.up_proj.weight",
            f"{layer}.mlp.down_proj.weight",
            f"{layer}.input_layernorm.weight",
            f"{layer}.post_attention_layernorm.weight",
        }
    b0 = "latent_attention_model.cross_attend_blocks.0"
    b1 = "latent_attention_model.cross_attend_blocks.1"
    keys |= {
        f"{b0}.norm.weight", f"{b0}.norm.bias", f"{b0}.norm_context.weight", f"{b0}.norm_context.bias",
        f"{b0}.fn.to_q.weight", f"{b0}.fn.to_kv.weight", f"{b0}.fn.to_out.weight",
        f"{b1}.norm.weight", f"{b1}.norm.bias", f"{b1}.fn.{ff0}.weight", f"{b1}.fn.{ff0}.bias",
        f"{b1}.fn.net.2.weight", f"{b1}.fn.net.2.bias",
    }  # fmt: skip
    return keys


@pytest.mark.parametrize("ff_key_style", NV_EMBED_FF_KEY_STYLES)
def test_nv_embed_layout(tmp_path: Path, ff_key_style: str) -> None:
    out = save_tiny_nv_embed(tmp_path, ff_key_style=ff_key_style)
    tensors = load_file(out / "model.safetensors")
    assert (
        set(tensors)
        == _published_nv_keys(2, ff_key_style)
        == nv_embed_expected_keys(2, ff_key_style=ff_key_style)
    )

    config = _read_json(out / "config.json")
    assert config["architectures"] == ["NVEmbedModel"]
    assert config["model_type"] == "nvembed"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_nvembed.NVEmbedConfig",
        "AutoModel": "modeling_nvembed.NVEmbedModel",
    }
    flags = ("add_eos", "add_pad_token", "is_mask_instruction", "mask_type", "padding_side")
    assert [config[k] for k in flags] == [True, True, True, "b", "right"]
    assert (config["torch_dtype"], config["transformers_version"]) == ("float32", "4.42.4")
    text = config["text_config"]
    assert (text["model_type"], text["architectures"]) == ("bidir_mistral", ["MistralModel"])
    assert (text["bos_token_id"], text["eos_token_id"], text["sliding_window"]) == (1, 2, 4096)
    assert (text["max_position_embeddings"], text["rope_theta"]) == (32768, 10000.0)
    h, heads, n_kv = text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"]
    head_dim = text["head_dim"]
    assert config["hidden_size"] == h and head_dim >= 32
    latent = config["latent_attention_config"]
    assert latent["model_type"] == "latent_attention"
    assert latent["latent_dim"] == latent["hidden_dim"] == latent["cross_dim_head"] == h
    n_lat, x_heads = latent["num_latents_value"], latent["num_cross_heads"]

    b0 = "latent_attention_model.cross_attend_blocks.0"
    b1 = "latent_attention_model.cross_attend_blocks.1"
    expected_shapes = {
        "embedding_model.embed_tokens.weight": (text["vocab_size"], h),
        "embedding_model.layers.0.self_attn.q_proj.weight": (heads * head_dim, h),
        "embedding_model.layers.0.self_attn.k_proj.weight": (n_kv * head_dim, h),
        "latent_attention_model.latents": (n_lat, h),
        f"{b0}.norm.weight": (h,),
        f"{b0}.norm_context.bias": (h,),
        f"{b0}.fn.to_q.weight": (x_heads * h, h),
        f"{b0}.fn.to_kv.weight": (2 * x_heads * h, h),
        f"{b0}.fn.to_out.weight": (h, x_heads * h),
        f"{b1}.fn.{ff_key_style}.weight": (8 * h, h),
        f"{b1}.fn.{ff_key_style}.bias": (8 * h,),
        f"{b1}.fn.net.2.weight": (h, 4 * h),
        f"{b1}.fn.net.2.bias": (h,),
    }
    for name, shape in expected_shapes.items():
        assert tuple(tensors[name].shape) == shape, name
    assert all(t.dtype == torch.float32 for t in tensors.values())
    for name in (f"{b0}.norm.weight", f"{b0}.norm.bias", f"{b1}.norm.weight", "embedding_model.norm.weight"):
        assert not torch.allclose(tensors[name], torch.round(tensors[name])), name

    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        assert handle.metadata() == {"format": "pt"}
    tok = AutoTokenizer.from_pretrained(out)
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (1, 2, 0)
    assert tok("Query: food")["input_ids"][0] == 1 and tok("Query: food")["input_ids"][-1] != 2
    assert len(tok) == text["vocab_size"]


def test_nv_embed_ff_styles_share_values(tmp_path: Path) -> None:
    a = load_file(save_tiny_nv_embed(tmp_path / "a", ff_key_style="net.0") / "model.safetensors")
    b = load_file(save_tiny_nv_embed(tmp_path / "b", ff_key_style="net.0.proj") / "model.safetensors")
    renamed = {k.replace(".fn.net.0.proj.", ".fn.net.0."): v for k, v in b.items()}
    assert renamed.keys() == a.keys()
    assert all(torch.equal(a[k], renamed[k]) for k in a)


def test_nv_embed_rejects_unknown_ff_style(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ff_key_style"):
        save_tiny_nv_embed(tmp_path, ff_key_style="net.zero")


# ----------------------------------------------------------------------------- HF loadable


@pytest.mark.parametrize("name", HF_LOADABLE)
def test_loads_with_auto_classes(built: Callable[[str], Path], name: str) -> None:
    out = built(name)
    config = AutoConfig.from_pretrained(out)
    head_dim = (
        getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    )  # Qwen2: derived
    assert head_dim >= 32
    assert config.vocab_size == len(AutoTokenizer.from_pretrained(out))
    auto = AutoModelForCausalLM if config.architectures[0].endswith("ForCausalLM") else AutoModel
    model, info = auto.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    saved = load_file(out / "model.safetensors")
    state = model.state_dict()
    # Qwen3-Embedding names Qwen3ForCausalLM but ships base-model keys; transformers loads them under "model."
    assert all(torch.equal(state[k] if k in state else state[f"model.{k}"], v) for k, v in saved.items())
    tok = AutoTokenizer.from_pretrained(out)
    if tok.pad_token is None:  # Mistral-7B-Instruct-v0.1 ships without one
        tok.pad_token = tok.eos_token
    ids = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = model(**ids, output_hidden_states=True)
    last = outputs.hidden_states[-1]
    assert torch.isfinite(last).all()
    assert 0.1 < last.std().item() < 10.0


@pytest.mark.parametrize("name", list(TINY_BUILDERS))
def test_deterministic(tmp_path: Path, name: str) -> None:
    builder = TINY_BUILDERS[name]
    rng_before = torch.get_rng_state()
    first = load_file(builder(tmp_path / "a") / "model.safetensors")
    assert torch.equal(torch.get_rng_state(), rng_before)
    second = load_file(builder(tmp_path / "b") / "model.safetensors")
    other = load_file(builder(tmp_path / "c", seed=1) / "model.safetensors")
    assert first.keys() == second.keys() == other.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first if first[k].numel() > 1)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (
        tmp_path / "b" / "tokenizer.json"
    ).read_bytes()


def test_e5_mistral_layout(built: Callable[[str], Path]) -> None:
    out = built("e5-mistral")
    config = _read_json(out / "config.json")
    assert config["architectures"] == ["MistralModel"]
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (2, 1, 2)
    assert (config["use_cache"], config["sliding_window"], config["max_position_embeddings"]) == (
        False,
        4096,
        32768,
    )
    assert AutoConfig.from_pretrained(out).rope_parameters["rope_theta"] == 10000.0
    assert not any(k.startswith(("lm_head", "model.")) for k in load_file(out / "model.safetensors"))
    tok_config = _read_json(out / "tokenizer_config.json")
    assert (tok_config["add_bos_token"], tok_config["add_eos_token"], tok_config["pad_token"]) == (
        True,
        True,
        "</s>",
    )

    # transformers 5 follows tokenizer.json (adds only <s>) and ignores add_eos_token.
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.pad_token_id == 2
    ids = tok("Query: food")["input_ids"]
    assert ids[0] == 1 and ids[-1] != 2
    # Passing only add_eos_token drops <s>; both flags restore the card's intent.
    only_eos = AutoTokenizer.from_pretrained(out, add_eos_token=True)("Query: food")["input_ids"]
    assert only_eos[-1] == 2 and only_eos[0] != 1
    both = AutoTokenizer.from_pretrained(out, add_bos_token=True, add_eos_token=True)("Query: food")[
        "input_ids"
    ]
    assert both == [*ids, 2]


def test_mistral_instruct_layout(built: Callable[[str], Path]) -> None:
    out = built("mistral-instruct")
    config = _read_json(out / "config.json")
    assert config["architectures"] == ["MistralForCausalLM"]
    keys = set(load_file(out / "model.safetensors"))
    assert "lm_head.weight" in keys and "model.embed_tokens.weight" in keys
    tok_config = _read_json(out / "tokenizer_config.json")
    assert (tok_config["add_bos_token"], tok_config["add_eos_token"]) == (True, False)


def test_bge_gemma2_layout(built: Callable[[str], Path]) -> None:
    out = built("bge-gemma2")
    config = AutoConfig.from_pretrained(out)
    assert config.architectures == ["Gemma2Model"]
    assert (config.attn_logit_softcapping, config.final_logit_softcapping) == (50.0, 30.0)
    assert config.query_pre_attn_scalar == config.head_dim >= 32
    assert config.num_attention_heads * config.head_dim != config.hidden_size
    assert config.num_hidden_layers >= 2
    assert config.layer_types[:2] == ["sliding_attention", "full_attention"]
    assert (config.sliding_window, config.max_position_embeddings) == (4096, 8192)
    assert config.hidden_activation == "gelu_pytorch_tanh"
    assert (config.pad_token_id, config.eos_token_id, config.bos_token_id) == (0, 1, 2)
    assert not any(k.startswith("lm_head") for k in load_file(out / "model.safetensors"))

    tok = AutoTokenizer.from_pretrained(out)
    assert config.vocab_size == len(tok)
    assert tok.convert_tokens_to_ids(["<instruct>", "<query>"]) == [len(tok) - 2, len(tok) - 1]
    ids = tok("<instruct>Given a question\n<query>what is x")["input_ids"]
    assert ids[:2] == [2, len(tok) - 2] and ids.count(len(tok) - 1) == 1


def test_bge_gemma2_softcap_matters(built: Callable[[str], Path]) -> None:
    """Attention logits are large enough that dropping the 50.0 softcap shows.

    transformers 5 refuses sdpa for Gemma2 (sdpa cannot softcap); a run with the softcap
    switched off in the config computes what an sdpa backend would. Should a later
    transformers accept sdpa, that run is compared too.
    """
    out = built("bge-gemma2")
    batch = AutoTokenizer.from_pretrained(out)(TEXTS[:2], padding=True, return_tensors="pt")
    mask = batch["attention_mask"].bool()

    def last_hidden(**kwargs: object) -> torch.Tensor:
        model = AutoModel.from_pretrained(out, **kwargs)
        with torch.no_grad():
            return model(**batch).last_hidden_state[mask]

    eager = last_hidden(attn_implementation="eager")
    uncapped = last_hidden(attn_implementation="eager", attn_logit_softcapping=None)
    assert (eager - uncapped).abs().max().item() > 1e-3
    try:
        sdpa = last_hidden(attn_implementation="sdpa")
    except ValueError:
        return
    assert (eager - sdpa).abs().max().item() > 1e-3


def test_gemma3_layout(built: Callable[[str], Path]) -> None:
    out = built("gemma3")
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "gemma3_text"
    assert config.architectures == ["Gemma3ForCausalLM"]
    assert config.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    assert config.sliding_window == 16
    assert config.query_pre_attn_scalar == config.head_dim >= 32
    assert (config.num_attention_heads, config.num_key_value_heads) == (2, 1)
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    assert config.rope_parameters["full_attention"]["rope_theta"] == 1000000.0
    assert config.max_position_embeddings == 32768
    tok = AutoTokenizer.from_pretrained(out)
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = tok(" ".join(TEXTS), return_tensors="pt")["input_ids"]
    assert ids.shape[1] > 2 * config.sliding_window
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok)) and torch.isfinite(logits).all()


@pytest.mark.parametrize(
    "builder",
    [
        save_tiny_nv_embed,
        save_tiny_e5_mistral,
        save_tiny_bge_gemma2,
        save_tiny_mistral_instruct,
        save_tiny_gemma3,
        save_tiny_qwen3_embedding,
        save_tiny_gte_qwen2,
    ],
)
def test_builders_return_folder_and_accept_overrides(tmp_path: Path, builder: Callable[..., Path]) -> None:
    out = builder(tmp_path / "deep" / "dir", seed=3, num_hidden_layers=3)
    assert out == tmp_path / "deep" / "dir"
    config = _read_json(out / "config.json")
    assert config.get("text_config", config)["num_hidden_layers"] == 3
    assert any(".layers.2." in k or k.startswith("layers.2.") for k in load_file(out / "model.safetensors"))


def test_qwen3_embedding_layout(built: Callable[[str], Path]) -> None:
    out = built("qwen3-embedding")
    config = _read_json(out / "config.json")
    assert (config["model_type"], config["architectures"]) == ("qwen3", ["Qwen3ForCausalLM"])
    assert (config["use_sliding_window"], config["sliding_window"], config["tie_word_embeddings"]) == (
        False,
        None,
        True,
    )
    assert config["max_position_embeddings"] == 32768 and config["head_dim"] == 64
    keys = set(load_file(out / "model.safetensors"))
    assert "embed_tokens.weight" in keys and "layers.0.self_attn.q_norm.weight" in keys
    assert not any(k.startswith(("model.", "lm_head")) for k in keys)  # base-model weights only
    tok = AutoTokenizer.from_pretrained(out)
    eod = tok.convert_tokens_to_ids("<|endoftext|>")
    assert type(tok).__name__ == "Qwen2Tokenizer" and tok.bos_token is None
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert config["eos_token_id"] == config["bos_token_id"] == eod
    ids = tok("Query:what is food?")["input_ids"]
    assert ids[-1] == eod and ids.count(eod) == 1  # tokenizer.json appends <|endoftext|>, not eos_token
    assert tok("word " * 40, truncation=True, max_length=8)["input_ids"][-1] == eod


def test_gte_qwen2_layout(built: Callable[[str], Path]) -> None:
    out = built("gte-qwen2")
    config = _read_json(out / "config.json")
    assert (config["model_type"], config["architectures"]) == ("qwen2", ["Qwen2Model"])
    assert config["auto_map"]["AutoModel"] == "modeling_qwen.Qwen2Model"
    assert (config["max_position_embeddings"], config["sliding_window"], config["use_sliding_window"]) == (
        131072,
        None,
        False,
    )
    keys = set(load_file(out / "model.safetensors"))
    assert "layers.0.self_attn.q_proj.bias" in keys and not any(
        k.startswith(("model.", "lm_head")) for k in keys
    )
    tok_config = _read_json(out / "tokenizer_config.json")
    assert tok_config["add_eos_token"] is True and "AutoTokenizer" in tok_config["auto_map"]
    tok = AutoTokenizer.from_pretrained(out, trust_remote_code=False)
    eod = tok.convert_tokens_to_ids("<|endoftext|>")
    assert tok.eos_token_id == config["eos_token_id"] == eod
    assert tok("Query: what is food?")["input_ids"][-1] != eod  # the stock class appends nothing
