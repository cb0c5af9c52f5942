"""Test helpers: tiny random-weight checkpoints in published on-disk layouts.

Builders write complete folders (config, weights, locally trained tokenizer) that mirror
real embedding-model repositories, so loading code can be tested offline on CPU.
"""

from __future__ import annotations

from llm_collapse.testing.checkpoints import (
    NV_EMBED_FF_KEY_STYLES,
    TINY_BUILDERS,
    nv_embed_expected_keys,
    save_tiny_bge_gemma2,
    save_tiny_e5_mistral,
    save_tiny_gemma3,
    save_tiny_mistral_instruct,
    save_tiny_nv_embed,
)
from llm_collapse.testing.qwen_checkpoints import save_tiny_gte_qwen2, save_tiny_qwen3_embedding
from llm_collapse.testing.qwen_tokenizer import build_qwen_tokenizer
from llm_collapse.testing.tokenizers import build_gemma_tokenizer, build_llama_tokenizer, save_tokenizer

__all__ = [
    "NV_EMBED_FF_KEY_STYLES",
    "TINY_BUILDERS",
    "build_gemma_tokenizer",
    "build_llama_tokenizer",
    "build_qwen_tokenizer",
    "nv_embed_expected_keys",
    "save_tiny_bge_gemma2",
    "save_tiny_e5_mistral",
    "save_tiny_gemma3",
    "save_tiny_gte_qwen2",
    "save_tiny_mistral_instruct",
    "save_tiny_nv_embed",
    "save_tiny_qwen3_embedding",
    "save_tokenizer",
]
