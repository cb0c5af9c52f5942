"""``pcw:S[:L0]``, LongEmbed's chunked average (issue 43, item 9): LongEmbed's chunks, the mean of the chunks'
plain pooled vectors normalised, texts of at most L0 tokens unchanged, no hidden states and no prefix sharing;
and a compare run to past the position table, where base truncates and the methods read every text whole."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from llm_collapse.adapters.inputs import EncodedText
from llm_collapse.interventions import ModelContext, NotApplicable, parse_interventions
from llm_collapse.interventions.pcw import ChunkedAverage, chunk_spans

WORDS = ["river", "stone", "light", "house", "green", "music", "paper", "water", "north", "table"]


def _text(words: int, seed: int = 0) -> str:
    return " ".join(np.random.default_rng(seed).choice(WORDS, size=words))


def _longembed_chunks(tokens: list[int], size: int) -> list[list[int]]:
    """``utils.get_chunked_docs``'s loop, as LongEmbed wrote it (on token ids instead of decoded text)."""
    chunks = []
    for idx in range(0, len(tokens), size):
        if idx + size > len(tokens):
            chunks.append(tokens[-size:])
            break
        chunks.append(tokens[idx : idx + size])
    return chunks


@pytest.mark.parametrize("tokens", [1, 509, 510, 511, 1019, 1020, 1021, 4094])
def test_chunks_are_longembeds(tokens):
    ids = list(range(tokens))
    assert [ids[a:b] for a, b in chunk_spans(tokens, 510)] == _longembed_chunks(ids, 510)


def test_pcw_is_the_normalised_mean_of_the_chunks_plain_pooled_vectors(tiny_bert):
    text = _text(1100)  # 1102 input tokens: 1100 text tokens -> chunks [0, 510), [510, 1020), [590, 1100)
    ids = tiny_bert.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1100
    with tiny_bert.intervene("pcw:4"):
        got = tiny_bert.encode([text])[0]
    cls, sep = tiny_bert.tokenizer.cls_token_id, tiny_bert.tokenizer.sep_token_id
    pooled = []
    for start, stop in [(0, 510), (510, 1020), (590, 1100)]:
        chunk = torch.tensor([[cls, *ids[start:stop], sep]])
        with torch.no_grad():
            states = tiny_bert.model(input_ids=chunk, attention_mask=torch.ones_like(chunk)).last_hidden_state
        vector = states[0].mean(dim=0)  # minilm's pooling: every token, [CLS] and [SEP] included
        pooled.append(vector)
        # the chunk is what a plain encode of its words reads
        plain = tiny_bert.encode([tiny_bert.tokenizer.decode(ids[start:stop])])[0]
        np.testing.assert_allclose((vector / vector.norm()).numpy(), plain, atol=1e-6)
    mean = torch.stack(pooled).mean(dim=0)
    np.testing.assert_allclose(got, (mean / mean.norm()).numpy(), atol=1e-6)


def test_texts_of_at_most_l0_tokens_are_their_own_input_and_batching_changes_nothing(tiny_bert):
    texts = [_text(1100, seed=1), "the cat sat on the mat.", _text(510, seed=2), _text(700, seed=3)]
    base = [tiny_bert.encode([t]) for t in texts[1:3]]
    tiny_bert.max_padding = None
    with tiny_bert.intervene("pcw:4"):
        together = tiny_bert.encode(texts, batch_size=4)
        alone = [tiny_bert.encode([t]) for t in texts]
    for mine, theirs in zip(alone[1:3], base, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_allclose(together, np.concatenate(alone), atol=2e-6)


def test_no_hidden_states_and_no_prefix_sharing(tiny_bert, tiny_embedder):
    with tiny_bert.intervene("pcw:4"):
        with pytest.raises(NotApplicable, match="pcw-4 embeds a text from several forwards"):
            next(tiny_bert.iter_batches(["a text"], output_hidden_states=True))
    from llm_collapse.encoding.prefix import prefix_sharing

    decoder = tiny_embedder("gemma3-270m", device="cpu")  # a model that shares prefixes
    args = (decoder.spec, decoder.model, decoder.tokenizer)
    assert prefix_sharing(*args, [], decoder.model_context).ok
    sharing = prefix_sharing(*args, parse_interventions("pcw:4").parts, decoder.model_context)
    assert sharing.limit == 0 and "pcw-4" in sharing.reason


def test_inputs_not_framed_by_special_tokens_are_not_applicable(tiny_bert):
    cls = tiny_bert.tokenizer.cls_token_id
    with pytest.raises(NotApplicable, match=r"not \[special tokens\] text \[special tokens\]"):
        ChunkedAverage(4).split_inputs(tiny_bert, [EncodedText((cls, 7, 8), (1, 1, 1))])


def test_forward_lengths_count_longembeds_chunks():
    pcw = parse_interventions("pcw:8").parts[0]
    config, context = SimpleNamespace(max_position_embeddings=512), ModelContext()
    assert pcw.forward_lengths(300, config, context) == [300]
    assert pcw.forward_lengths(4096, config, context) == [512] * 9  # ceil(4094 / 510)
    assert pcw.token_cap(config, context) == 4096


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_a_run_past_the_table_truncates_base_only(run_compare, tiny_bert_dir, tmp_path):
    out = tmp_path / "run"
    methods = "base,ape-gp:4,ape-rp:4,ape-pi:4,pcw:4"
    flags = dict(models="minilm", model_path={"minilm": tiny_bert_dir}, methods=methods, tasks="collapse,knn")
    flags |= dict(lengths=[256, 1024], design="prefix", prefix_docs=6, dtype="fp32", no_report=True)
    assert run_compare(out, **flags) == 0
    record = json.loads((out / "run.json").read_text())
    truncated = record["models"]["minilm"]["truncated"]
    assert (
        truncated["base"] == 6
    )  # the 6 texts of 1024 tokens, once although collapse and knn both embed them
    assert {truncated[slug] for slug in ["ape-gp-4", "ape-rp-4", "ape-pi-4", "pcw-4"]} == {0}


@pytest.mark.usefixtures("needs_sotu")
def test_dry_run_counts_the_cap_and_the_chunks(run_compare, tiny_bert_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "0.001")
    flags = dict(models="minilm", model_path={"minilm": tiny_bert_dir}, tasks="collapse", dry_run=True)
    flags |= dict(lengths=[256, 1024], design="bins", max_per_bin=4)
    assert run_compare(tmp_path / "a", methods="base,ape-rp:4,pcw:4", **flags) == 0
    said = capsys.readouterr().out
    assert "minilm x ape-rp:4: texts read up to 2048 tokens:" in said
    assert (
        "minilm x pcw:4: texts read up to 2048 tokens; embedded by pcw-4's own forwards (its chunks):" in said
    )
