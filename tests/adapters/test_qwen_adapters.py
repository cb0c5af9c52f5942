"""Qwen3-Embedding and gte-Qwen2-7B-instruct against independent computations written from their cards' example code.

The references use transformers' stock classes and the checkpoint's tokenizer the way the cards do, with no
llm_collapse code between the text and the vector. Tiny random replicas in the published layouts
(`llm_collapse.testing.qwen_checkpoints`), fp32 on CPU: these check code paths and conventions, never quality.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import transformers

import llm_collapse as lc

QUERIES = ["how much protein should a female eat", "summit define"]
DOCS = [
    "As a general guideline, the CDC's average requirement of protein for women ages 19 to 70 is 46 grams per day.",
    "Definition of summit for English Language Learners: the highest point of a mountain.",
    "short",
]
TASK = "Given a web search query, retrieve relevant passages that answer the query"
EOD = "<|endoftext|>"


def _assert_same(got: np.ndarray, expected: torch.Tensor) -> None:
    """Cosine >= 0.99999 per row between our unit vectors and the reference's pooled states."""
    reference = torch.nn.functional.normalize(expected.float(), dim=-1).numpy()
    assert got.shape == reference.shape
    assert (got * reference).sum(1).min() >= 0.99999, (got * reference).sum(1)


def _last_token_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The cards' last_token_pool: position -1 under left padding, else the last real position."""
    if bool((mask[:, -1] == 1).all()):
        return hidden[:, -1]
    return hidden[torch.arange(hidden.shape[0]), mask.sum(1) - 1]


# --- Qwen3-Embedding -----------------------------------------------------------------------------------------------


def _card_qwen3(directory, texts, max_length):
    """QwenLM/Qwen3-Embedding README, transformers usage: left padding, the tokenizer's own truncation and
    <|endoftext|>, AutoModel, last_token_pool, L2 normalisation."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, padding_side="left")
    model = transformers.AutoModel.from_pretrained(directory, dtype=torch.float32).to("cpu")
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    rows = [
        [i for i, m in zip(r, k, strict=True) if m]
        for r, k in zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist(), strict=True)
    ]
    return _last_token_pool(hidden, batch["attention_mask"]), rows


@pytest.mark.parametrize("max_length", [8192, 12])
def test_qwen3_embedding_matches_card(tiny_dir, tiny_embedder, max_length):
    directory = tiny_dir("qwen3-embedding-0.6b")
    embedder = tiny_embedder("qwen3-embedding-0.6b", device="cpu", max_length=max_length)
    prompted = [f"Instruct: {TASK}\nQuery:{q}" for q in QUERIES]  # the card's get_detailed_instruct
    for texts, kind, inputs in ((QUERIES, "query", prompted), (DOCS, "document", DOCS)):
        expected, rows = _card_qwen3(directory, inputs, max_length)  # one padded batch
        _assert_same(embedder.encode(texts, kind=kind), expected)
        alone = torch.cat([_card_qwen3(directory, [t], max_length)[0] for t in inputs])  # no padding
        _assert_same(embedder.encode(texts, kind=kind, batch_size=1), alone)
        assert [list(e.input_ids) for e in embedder.tokenize(texts, kind=kind)] == rows


def test_qwen3_embedding_ends_with_one_endoftext_whatever_the_tokenizer(tiny_dir, tiny_embedder, tmp_path):
    """The replica's tokenizer names <|im_end|> as EOS (inherited from Qwen3) and appends <|endoftext|> itself; a
    tokenizer from before the card's update appends nothing. Both give the card's ids."""
    from llm_collapse.testing.qwen_tokenizer import build_qwen_tokenizer
    from llm_collapse.testing.tokenizers import save_tokenizer

    embedder = tiny_embedder("qwen3-embedding-0.6b", device="cpu", max_length=10)
    assert embedder.tokenizer.eos_token == "<|im_end|>"
    eod = embedder.tokenizer.convert_tokens_to_ids(EOD)
    new = embedder.tokenize(DOCS + ["word " * 50, ""])
    for encoded in new:
        assert encoded.input_ids[-1] == eod and encoded.input_ids.count(eod) == 1 and len(encoded) <= 10
    old_dir = tmp_path / "old"
    shutil.copytree(tiny_dir("qwen3-embedding-0.6b"), old_dir)
    save_tokenizer(build_qwen_tokenizer(append_eos=False, eos_token="<|im_end|>"), old_dir)
    old = lc.load_embedder("qwen3-embedding-0.6b", path=old_dir, dtype="fp32", device="cpu", max_length=10)
    assert old.tokenize(DOCS + ["word " * 50, ""]) == new


def test_qwen3_sizes_share_the_card_format():
    from llm_collapse.adapters import resolve_spec

    specs = [resolve_spec(f"Qwen/Qwen3-Embedding-{size}")[0] for size in ("0.6B", "4B", "8B")]
    assert [s.name for s in specs] == ["qwen3-embedding-0.6b", "qwen3-embedding-4b", "qwen3-embedding-8b"]
    assert len({(s.input_format, s.pooling, s.attention, s.trained_length) for s in specs}) == 1
    assert specs[0].input_format.query_template == "Instruct: {instruction}\nQuery:{text}"
    assert specs[0].default_instruction == TASK and specs[0].trained_length == 32768


# --- gte-Qwen2-7B-instruct -----------------------------------------------------------------------------------------


def _card_gte(directory, texts, max_length):
    """Card usage: the repository's tokenizer (add_eos_token: text truncated to max_length - 1, then <|endoftext|>),
    right padding, the model attending bidirectionally (a 4D mask written here: every real token sees every
    real token), last_token_pool, L2 normalisation."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    eod = tokenizer.convert_tokens_to_ids(EOD)
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"][: max_length - 1] + [eod] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [eod] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    bidirectional = torch.zeros(len(rows), 1, width, width)
    bidirectional.masked_fill_(~mask.bool()[:, None, None, :], torch.finfo(torch.float32).min)
    model = transformers.AutoModel.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager"
    )
    with torch.no_grad():
        hidden = model.to("cpu")(input_ids=ids, attention_mask=bidirectional).last_hidden_state
    return _last_token_pool(hidden, mask), rows


@pytest.mark.parametrize("max_length", [8192, 12])
def test_gte_qwen2_matches_card(tiny_dir, tiny_embedder, max_length):
    directory = tiny_dir("gte-qwen2")
    embedder = tiny_embedder("gte-qwen2", device="cpu", max_length=max_length)
    prompted = [f"Instruct: {TASK}\nQuery: {q}" for q in QUERIES]
    for texts, kind, inputs in ((QUERIES, "query", prompted), (DOCS, "document", DOCS)):
        expected, rows = _card_gte(directory, inputs, max_length)
        _assert_same(embedder.encode(texts, kind=kind), expected)
        alone = torch.cat([_card_gte(directory, [t], max_length)[0] for t in inputs])
        _assert_same(embedder.encode(texts, kind=kind, batch_size=1), alone)
        assert [list(e.input_ids) for e in embedder.tokenize(texts, kind=kind)] == rows


@pytest.mark.parametrize(("name", "reads_ahead"), [
    ("gte-qwen2", True),
    ("qwen3-embedding-0.6b", False),
])  # fmt: skip
def test_attention_direction_padded_or_not(name, reads_ahead, tiny_embedder):
    """gte-Qwen2's first state reads later tokens, unpadded (sdpa's own causal flag) and padded alike."""
    embedder = tiny_embedder(name, device="cpu")
    a, b = (list(e.input_ids) for e in embedder.tokenize(["the cat eats bread", "the cat eats rice"]))
    assert a[0] == b[0] and a != b
    for pad in (0, 3):
        ids = torch.tensor([a + [a[-1]] * pad, b + [b[-1]] * pad])
        mask = torch.tensor([[1] * len(a) + [0] * pad, [1] * len(b) + [0] * pad])
        first = embedder.backend.forward(ids, mask).last_hidden_state[:, 0]
        assert (not torch.allclose(first[0], first[1], atol=1e-6)) is reads_ahead


@pytest.mark.parametrize(("name", "reason"), [
    ("gte-qwen2", "bidirectionally"),
    ("qwen3-embedding-0.6b", "exactly one EOS"),
])  # fmt: skip
def test_interventions_apply_restore_and_prefix_sharing_says_why_not(name, reason, tiny_embedder):
    from llm_collapse.interventions import InterventionError

    embedder = tiny_embedder(name, device="cpu")
    before = embedder.encode(DOCS)
    for method in ("tempscale:0.8", "ntk:1e5", "yarn:4:8192"):
        with embedder.intervene(method):
            assert not np.allclose(embedder.encode(DOCS), before, atol=1e-4), method
        np.testing.assert_array_equal(embedder.encode(DOCS), before)
    with pytest.raises(InterventionError, match="window") as info:
        with embedder.intervene("window:off"):
            pass
    assert "\n" not in str(info.value)
    sharing = embedder.prefix_sharing()
    assert not sharing.ok and reason in sharing.reason


def test_vllm_backend_runs_gte_qwen2_bidirectionally(tiny_dir, monkeypatch):
    """Engine settings only (no vLLM here): is_causal=False for gte-Qwen2, nothing for Qwen3-Embedding."""
    from llm_collapse.adapters import resolve_spec
    from llm_collapse.backends.vllm import VLLMBackend
    from llm_collapse.backends.weights import resolve_weights

    monkeypatch.setattr("llm_collapse.backends.vllm.backend.require_vllm", lambda: None)
    for name, causal in (("gte-qwen2", False), ("qwen3-embedding-0.6b", True)):
        spec, _ = resolve_spec(name)
        vllm = VLLMBackend(spec, resolve_weights(name, None, "hub", tiny_dir(name)), device="cpu")
        assert vllm.causal is causal
        assert vllm.base_overrides == ({} if causal else {"is_causal": False})
        assert getattr(vllm.config.get_text_config(), "is_causal", True) is causal


@pytest.mark.parametrize(("name", "dims"), [
    ("qwen3-embedding-0.6b", (1024, 28, 16, 8, 128, 3072)),
    ("qwen3-embedding-4b", (2560, 36, 32, 8, 128, 9728)),
    ("qwen3-embedding-8b", (4096, 36, 32, 8, 128, 12288)),
    ("gte-qwen2", (3584, 28, 28, 4, 128, 18944)),
])  # fmt: skip
def test_estimate_knows_the_published_dims(name, dims):
    from llm_collapse.cost.estimate import model_for

    plan = model_for(name)
    got = plan.dims
    assert (got.hidden, got.layers, got.heads, got.kv_heads, got.head_dim, got.intermediate) == dims
    assert plan.causal is (name != "gte-qwen2") and got.window is None
