"""Tiny random replicas of Qwen/Qwen3-Embedding-{0.6B,4B,8B} and Alibaba-NLP/gte-Qwen2-7B-instruct.

Layouts as published (sizes shrunk: hidden 128, 2 layers, 2 heads of 64, 1 KV head):

* Qwen3-Embedding: ``config.json`` with ``model_type: qwen3``, ``architectures: ["Qwen3ForCausalLM"]``, tied
  embeddings, no sliding window, ``<|endoftext|>`` as bos/eos id; weights of the base model only (keys
  ``embed_tokens.*``, ``layers.*``, ``norm.*``: no ``model.`` prefix, no ``lm_head``), q/k RMSNorms included. The
  tokenizer appends ``<|endoftext|>`` through ``tokenizer.json`` while ``tokenizer_config.json`` names
  ``<|im_end|>`` as ``eos_token`` (inherited from Qwen3): code that appends "the EOS" by name gets it wrong.
* gte-Qwen2-7B-instruct: ``config.json`` from ``Qwen2Model`` (``architectures: ["Qwen2Model"]``, q/k/v biases, no
  sliding window, 131072 positions, ``<|endoftext|>`` as bos/eos id) plus its ``auto_map`` to the remote
  ``modeling_qwen.py`` (not shipped, never run); ``tokenizer_config.json`` says ``add_eos_token: true`` with an
  ``auto_map`` to the remote ``tokenization_qwen.py``, while ``tokenizer.json`` appends nothing, which is what
  transformers' stock ``Qwen2Tokenizer`` reads.

Read from the hub's files only through search excerpts and third-party copies (the hub is unreachable here): the
Qwen3-Embedding key prefix and ``tokenizer_config.json``'s ``eos_token`` are the least certain; the adapters do not
depend on either (AutoModel loads both key layouts; the EOS is named in the spec).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Qwen2Config, Qwen2Model, Qwen3Config, Qwen3Model

from llm_collapse.testing.qwen_tokenizer import build_qwen_tokenizer
from llm_collapse.testing.random_weights import write_checkpoint

__all__ = ["save_tiny_gte_qwen2", "save_tiny_qwen3_embedding"]

_TINY_QWEN: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "use_sliding_window": False,
    "sliding_window": None,
}
_INIT = {"norm_center": 1.0, "embed_std": 1.0}  # Qwen's RMSNorm multiplies by weight (centre 1)
_GTE_AUTO_MAP = {
    "AutoModel": "modeling_qwen.Qwen2Model",
    "AutoModelForCausalLM": "modeling_qwen.Qwen2ForCausalLM",
    "AutoModelForSequenceClassification": "modeling_qwen.Qwen2ForSequenceClassification",
}
_GTE_TOKENIZER_AUTO_MAP = {
    "AutoTokenizer": ["tokenization_qwen.Qwen2Tokenizer", "tokenization_qwen.Qwen2TokenizerFast"]
}


def save_tiny_qwen3_embedding(path: str | Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a tiny Qwen/Qwen3-Embedding replica (one layout serves 0.6B, 4B and 8B).

    ``overrides``: ``Qwen3Config`` fields (a builder's signature: `TINY_BUILDERS`); returns the folder.
    """
    tokenizer = build_qwen_tokenizer(append_eos=True, eos_token="<|im_end|>", model_max_length=32768)
    fields = {
        "head_dim": 64,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
        "attention_bias": False,
    }
    config = _config(Qwen3Config, tokenizer, {**fields, **overrides})
    edits = {"architectures": ["Qwen3ForCausalLM"]}
    return write_checkpoint(path, Qwen3Model, config, tokenizer, seed=seed, config_edits=edits, **_INIT)


def save_tiny_gte_qwen2(path: str | Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a tiny Alibaba-NLP/gte-Qwen2-7B-instruct replica (``Qwen2Model``).

    ``overrides``: ``Qwen2Config`` fields (a builder's signature: `TINY_BUILDERS`); returns the folder.
    """
    tokenizer = build_qwen_tokenizer(append_eos=False, eos_token="<|endoftext|>", model_max_length=32768)
    fields = {"max_position_embeddings": 131072, "max_window_layers": 28, "tie_word_embeddings": False}
    config = _config(Qwen2Config, tokenizer, {**fields, **overrides})
    return write_checkpoint(
        path,
        Qwen2Model,
        config,
        tokenizer,
        seed=seed,
        config_edits={"architectures": ["Qwen2Model"], "auto_map": _GTE_AUTO_MAP},
        tokenizer_config={"add_eos_token": True, "auto_map": _GTE_TOKENIZER_AUTO_MAP},
        **_INIT,
    )


def _config(config_cls, tokenizer, fields: dict[str, Any]):
    """The tiny Qwen config; ``<|endoftext|>`` is the bos/eos id."""
    eod = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return config_cls(
        **{**_TINY_QWEN, "vocab_size": len(tokenizer), "bos_token_id": eod, "eos_token_id": eod, **fields}
    )
