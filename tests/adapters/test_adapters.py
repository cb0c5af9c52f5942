"""Every adapter against an independent, straightforward computation written here from its model card.

The tiny checkpoints are random replicas in the published layouts: these tests check code paths and
conventions (prompt, tokens, forward, pooling), never model quality. All in fp32.
"""

from __future__ import annotations

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


def _normalize(x: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(x.float(), dim=-1).numpy()


def _assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    cos = (got * expected).sum(1)
    assert cos.min() >= 0.99999, cos


def _right_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask


# --- e5-mistral ----------------------------------------------------------------------------------------


def _card_e5(directory, texts, max_length):
    """Original card code: BOS + text truncated to max_length - 1, append EOS, pad, last-token pool."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModel.from_pretrained(directory, dtype=torch.float32)
    rows = [
        [tokenizer.bos_token_id]
        + tokenizer(t, add_special_tokens=False)["input_ids"][: max_length - 2]
        + [tokenizer.eos_token_id]
        for t in texts
    ]
    ids, mask = _right_pad(rows, tokenizer.eos_token_id)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    last = mask.sum(1) - 1
    return _normalize(hidden[torch.arange(len(rows)), last]), rows


@pytest.mark.parametrize("max_length", [4096, 12])
def test_e5_mistral_matches_card(tiny_dir, tiny_embedder, max_length):
    embedder = tiny_embedder("mistral", max_length=max_length)
    task = "Given a web search query, retrieve relevant passages that answer the query"
    prompted = [f"Instruct: {task}\nQuery: {q}" for q in QUERIES]
    expected_q, rows_q = _card_e5(tiny_dir("mistral"), prompted, max_length)
    expected_d, rows_d = _card_e5(tiny_dir("mistral"), DOCS, max_length)
    _assert_same(embedder.encode(QUERIES, kind="query", instruction=task), expected_q)
    _assert_same(embedder.encode(QUERIES, kind="query"), expected_q)  # the card's instruction is the default
    _assert_same(embedder.encode(DOCS), expected_d)
    assert [list(e.input_ids) for e in embedder.tokenize(DOCS)] == rows_d


@pytest.mark.parametrize("tokenizer_adds_eos", [False, True])
def test_e5_mistral_exactly_one_trailing_eos(tiny_dir, tmp_path, tokenizer_adds_eos):
    import shutil

    from llm_collapse.testing.tokenizers import build_llama_tokenizer, save_tokenizer

    directory = tmp_path / "e5"
    shutil.copytree(tiny_dir("mistral"), directory)
    save_tokenizer(build_llama_tokenizer(add_bos=True, add_eos=tokenizer_adds_eos), directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    assert (tokenizer("x")["input_ids"][-1] == tokenizer.eos_token_id) == tokenizer_adds_eos
    embedder = lc.load_embedder("mistral", path=directory, dtype="fp32", max_length=10)
    for encoded in embedder.tokenize(DOCS + ["word " * 50, ""], kind="document"):
        assert encoded.input_ids[-1] == tokenizer.eos_token_id
        assert encoded.input_ids.count(tokenizer.eos_token_id) == 1
        assert encoded.input_ids[0] == tokenizer.bos_token_id
        assert len(encoded) <= 10
    assert embedder.tokenize(["word " * 50])[0].truncated


# --- NV-Embed-v2 ---------------------------------------------------------------------------------------


def _card_nv_embed(model, tokenizer, texts, instruction, max_length):
    """Card / remote-code semantics: instruction + text + eos as one string, truncate, right-pad with EOS,
    zero the first len(tokenize(instruction)) positions of the pool mask, mean over it, normalise."""
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, "right"
    batch = tokenizer(
        [instruction + t + tokenizer.eos_token for t in texts],
        max_length=max_length,
        padding=True,
        truncation=True,
        return_tensors="pt",
    )
    pool_mask = batch["attention_mask"].clone()
    if instruction:
        pool_mask[:, : len(tokenizer.tokenize(instruction))] = 0
    with torch.no_grad():
        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    pooled = (hidden * pool_mask.unsqueeze(-1)).sum(1) / pool_mask.sum(1, keepdim=True)
    return _normalize(pooled)


@pytest.mark.parametrize("room", [None, 4])
def test_nv_embed_matches_card(tiny_dir, tiny_embedder, room):
    from llm_collapse.models.nv_embed import load_nv_embed

    model = load_nv_embed(tiny_dir("nv-embed"), dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir("nv-embed"), trust_remote_code=False)
    task = "Given a question, retrieve passages that answer the question"
    prefix = f"Instruct: {task}\nQuery: "
    # room=4: truncation leaves 4 tokens after the instruction, and drops the EOS appended as text
    max_length = 32768 if room is None else len(tokenizer(prefix)["input_ids"]) + room
    embedder = tiny_embedder("nv-embed", max_length=max_length)
    _assert_same(
        embedder.encode(QUERIES, kind="query", instruction=task),
        _card_nv_embed(model, tokenizer, QUERIES, prefix, max_length),
    )
    _assert_same(embedder.encode(DOCS), _card_nv_embed(model, tokenizer, DOCS, "", max_length))


# --- bge-multilingual-gemma2 ---------------------------------------------------------------------------


def _card_bge(directory, texts, max_length):
    """Card (transformers usage): tokenizer defaults, pad_to_multiple_of=8, eager Gemma2Model, last_token_pool."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModel.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager"
    )
    batch = tokenizer(
        texts, max_length=max_length, padding=True, truncation=True, return_tensors="pt", pad_to_multiple_of=8
    )
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"]
    if bool((mask[:, -1] == 1).all()):  # FlagEmbedding's last_token_pool: left padding
        return _normalize(hidden[:, -1])
    return _normalize(hidden[torch.arange(len(texts)), mask.sum(1) - 1])


@pytest.mark.parametrize("max_length", [4096, 16])
def test_bge_gemma2_matches_card(tiny_dir, tiny_embedder, max_length):
    embedder = tiny_embedder("bge-gemma2", max_length=max_length)
    task = "Given a web search query, retrieve relevant passages that answer the query."
    _assert_same(
        embedder.encode(QUERIES, kind="query", instruction=task),
        _card_bge(tiny_dir("bge-gemma2"), [f"<instruct>{task}\n<query>{q}" for q in QUERIES], max_length),
    )
    _assert_same(embedder.encode(DOCS), _card_bge(tiny_dir("bge-gemma2"), DOCS, max_length))
    assert embedder.model.config._attn_implementation == "chunked"  # softcap-exact, memory-linear (not sdpa)


def test_bge_gemma2_instruction_tokens_are_single_added_tokens(tiny_embedder):
    embedder = tiny_embedder("bge-gemma2")
    ids = embedder.tokenize(["q"], kind="query", instruction="task")[0].input_ids
    vocab = embedder.tokenizer.get_vocab()
    assert vocab["<instruct>"] in ids and vocab["<query>"] in ids


# --- echo ----------------------------------------------------------------------------------------------


def _reference_echo(directory, texts, *, pooling="mean", max_length=None, query_prompt=None):
    """Reference EchoParser semantics written out: pieces tokenised separately without special tokens,
    BOS/EOS written literally, each piece truncated on its own, pool the second copy plus EOS."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModel.from_pretrained(directory, dtype=torch.float32)

    def tok(s):
        ids = tokenizer(s, add_special_tokens=False)["input_ids"]
        return ids[:max_length] if max_length else ids

    rows, masks = [], []
    for text in texts:
        if query_prompt is None:
            pieces = [
                (f"{tokenizer.bos_token}Document:", 0),
                (text, 0),
                ("\nDocument again:", 0),
                (text, 1),
                (tokenizer.eos_token, 1),
            ]
        else:
            pieces = [
                (f"{tokenizer.bos_token}Instruct:", 0),
                (query_prompt + ",", 0),
                ("\nQuery:", 0),
                (text, 0),
                ("\nQuery again:", 0),
                (text, 1),
                (tokenizer.eos_token, 1),
            ]
        ids = [tok(s) for s, _ in pieces]
        rows.append(sum(ids, []))
        masks.append(sum(([m] * len(i) for i, (_, m) in zip(ids, pieces, strict=False)), []))
    ids, attention = _right_pad(rows, tokenizer.unk_token_id or 0)
    embed_mask, _ = _right_pad(masks, 0)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=attention).last_hidden_state
    if pooling == "mean":
        pooled = (hidden * embed_mask.unsqueeze(-1)).sum(1) / embed_mask.sum(1, keepdim=True)
    else:
        last = torch.tensor([max(i for i, m in enumerate(row) if m) for row in masks])
        pooled = hidden[torch.arange(len(rows)), last]
    return _normalize(pooled), rows


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_echo_matches_reference(tiny_dir, pooling):
    directory = tiny_dir("echo-mistral")
    embedder = lc.load_embedder(f"echo:{directory}", dtype="fp32", pooling=pooling)  # the echo:PATH spelling
    expected, rows = _reference_echo(directory, DOCS, pooling=pooling)
    _assert_same(embedder.encode(DOCS), expected)
    assert [list(e.input_ids) for e in embedder.tokenize(DOCS)] == rows
    prompt = "Retrieve passages that answer the question"
    expected_q, _ = _reference_echo(directory, QUERIES, pooling=pooling, query_prompt=prompt)
    _assert_same(embedder.encode(QUERIES, kind="query"), expected_q)


def test_echo_truncates_each_copy_on_its_own(tiny_dir, tiny_embedder):
    embedder = tiny_embedder("echo-mistral", max_length=5)
    expected, rows = _reference_echo(tiny_dir("echo-mistral"), DOCS, max_length=5)
    encoded = embedder.tokenize(DOCS)
    assert [list(e.input_ids) for e in encoded] == rows
    assert encoded[0].truncated and not encoded[2].truncated
    assert encoded[0].input_ids[-1] == embedder.tokenizer.eos_token_id  # EOS survives truncation
    _assert_same(embedder.encode(DOCS), expected)


def test_echo_on_gemma3_layout_uses_its_own_bos_eos(tiny_dir):
    embedder = lc.load_embedder(f"echo:{tiny_dir('gemma3-270m')}", dtype="fp32")  # the echo:PATH spelling
    encoded = embedder.tokenize(["hello"])[0]
    assert encoded.input_ids[0] == embedder.tokenizer.bos_token_id
    assert encoded.input_ids[-1] == embedder.tokenizer.eos_token_id and encoded.pool_mask[-1] == 1
    assert embedder.max_length == (32768 - 64) // 2  # derived from the positions: two copies must fit


@pytest.mark.parametrize("name", ["prompt-gemma3-270m", "twice-gemma3-270m"])
def test_echo_controls_pool_what_they_say(name, tiny_embedder):
    """Independent construction of the two controls' inputs from the tokenizer: the prompt control pools
    one copy of the text (+ EOS) inside echo's prompt words; the compute control pools both copies (+ EOS)."""
    embedder = tiny_embedder(name)  # the gemma3 layout
    tok = embedder.tokenizer

    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    text = "the grass is green"
    got = embedder.tokenize([text])[0]
    bos, eos, body = [tok.bos_token_id], [tok.eos_token_id], ids(text)
    if name == "prompt-gemma3-270m":
        expected = bos + ids("Document:") + body + eos
        mask = [0] * (1 + len(ids("Document:"))) + [1] * (len(body) + 1)
        copies = 1
    else:
        expected = bos + body + ids("\n") + body + eos
        mask = [0] + [1] * len(body) + [0] * len(ids("\n")) + [1] * (len(body) + 1)
        copies = 2
    assert list(got.input_ids) == expected and list(got.pool_mask) == mask
    assert embedder.spec.input_format.text_copies == copies  # what the run estimates cost
    vectors = embedder.encode([text, "another text"])
    assert vectors.shape[0] == 2 and np.isfinite(vectors).all()


# --- invariances, shared by all adapters ----------------------------------------------------------------

ADAPTERS = [
    "mistral",
    "nv-embed",
    "bge-gemma2",
    "echo-mistral",
    "gemma3-270m",
    "qwen3-embedding-0.6b",
    "gte-qwen2",
]


@pytest.mark.parametrize("name", ADAPTERS)
def test_padding_side_batch_composition_and_order_do_not_matter(name, tiny_embedder):
    embedder = tiny_embedder(name)
    texts = DOCS + ["a considerably longer text " * 6]
    batched = embedder.encode(texts, batch_size=8)
    alone = np.concatenate([embedder.encode([t]) for t in texts])
    reordered = embedder.encode(texts[::-1], batch_size=8)[::-1]
    embedder.padding_side = "left"
    left = embedder.encode(texts, batch_size=8)
    for other in (alone, reordered, left):
        np.testing.assert_allclose(batched, other, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("name", ADAPTERS)
def test_hidden_states_come_from_the_same_forward(name, tiny_embedder):
    embedder = tiny_embedder(name)
    batches = list(embedder.iter_batches(DOCS, output_hidden_states=True))
    layers = embedder.model.config.get_text_config().num_hidden_layers
    for batch in batches:
        assert len(batch.hidden_states) == layers + 1
        assert batch.hidden_states[-1].shape[:2] == batch.attention_mask.shape
    np.testing.assert_allclose(
        np.concatenate([b.embeddings.numpy() for b in batches])[
            np.argsort(sum((b.indices for b in batches), []))
        ],
        embedder.encode(DOCS),
        atol=1e-6,
    )
