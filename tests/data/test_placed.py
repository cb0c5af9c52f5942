"""Placed passages: the passage byte for byte at every length and depth, the filler the only thing that grows."""

from __future__ import annotations

import pytest

from llm_collapse.data.bins import count_tokens
from llm_collapse.data.corpora import Document
from llm_collapse.data.placed import PlacementError, place_passages, short_passages
from llm_collapse.testing.tokenizers import build_llama_tokenizer

FILLER = [
    f"The {colour} boat drifted past the {place} while {n} gulls circled overhead."
    for n, (colour, place) in enumerate(
        [(c, p) for c in ("red", "blue", "green", "grey") for p in ("harbour", "pier", "lighthouse", "dunes")]
    )
]
PASSAGES = [
    Document("A warm and funny film; I loved every minute of it.", "p0", {"sentiment": "pos"}, "toy"),
    Document("Dull, slow and far too long. I walked out early.", "n0", {"sentiment": "neg"}, "toy"),
    Document("The best performance of the year, quietly moving.", "p1", {"sentiment": "pos"}, "toy"),
    Document("A mess of a script with nothing to say.", "n1", {"sentiment": "neg"}, "toy"),
]


@pytest.fixture(scope="module")
def tok():
    return build_llama_tokenizer()


@pytest.fixture(scope="module")
def placed(tok):
    return place_passages(PASSAGES, "sentiment", FILLER, tok, [64, 128, 256], [0.0, 0.5, 1.0], seed=1)


def test_every_item_holds_its_passage_byte_for_byte_once(placed):
    assert len(placed) == len(PASSAGES) * 3 * 3
    by_id = {p.doc_id: p for p in PASSAGES}
    for item in placed:
        passage = by_id[item.item_id].text
        assert item.text.count(passage) == 1
        assert item.label == by_id[item.item_id].labels["sentiment"]


def test_lengths_are_met_and_depth_moves_the_passage(placed, tok):
    for item in placed:
        assert abs(item.n_tokens - item.length) <= max(1, 0.02 * item.length)
        assert count_tokens([item.text], tok)[0] == item.n_tokens
    starts = {
        (i.item_id, i.length, i.depth): i.text.index(PASSAGES[0].text) for i in placed if i.item_id == "p0"
    }
    for length in (64, 128, 256):
        assert starts["p0", length, 0.0] == 0
        assert starts["p0", length, 0.0] < starts["p0", length, 0.5] < starts["p0", length, 1.0]


def test_only_the_filler_grows_and_the_filler_carries_no_label(placed):
    first = {(i.item_id, i.depth): i.text for i in placed if i.length == 64}
    for item in placed:
        if item.depth == 0.0 and item.length > 64:  # the passage first: the longer text extends the shorter
            shorter = first[item.item_id, 0.0]
            assert item.text.startswith(shorter.rsplit(" ", 1)[0])
    labels = {i.item_id: i.label for i in placed}
    for item in placed:
        filler = item.text.replace(next(p.text for p in PASSAGES if p.doc_id == item.item_id), "")
        assert all(p.text not in filler for p in PASSAGES)
    assert set(labels.values()) == {"pos", "neg"}


def test_refusals_say_what_to_change(tok):
    with pytest.raises(PlacementError, match="use lengths from"):
        place_passages(PASSAGES, "sentiment", FILLER, tok, [16, 64], [0.5])
    with pytest.raises(PlacementError, match="depths"):
        place_passages(PASSAGES, "sentiment", FILLER, tok, [64], [1.5])
    with pytest.raises(PlacementError, match="per label"):
        short_passages(PASSAGES, "sentiment", tok, 64, per_label=3, min_tokens=1)


def test_short_passages_are_balanced_seeded_and_short_enough(tok):
    docs = [
        *PASSAGES,
        Document("word " * 200, "long", {"sentiment": "pos"}, "toy"),
        Document("x", "u", {}, "toy"),
    ]
    chosen = short_passages(docs, "sentiment", tok, 40, per_label=2, min_tokens=1, seed=0)
    assert sorted(d.doc_id for d in chosen) == ["n0", "n1", "p0", "p1"]
    assert [d.labels["sentiment"] for d in chosen] == ["neg", "neg", "pos", "pos"]
    assert chosen == short_passages(docs, "sentiment", tok, 40, per_label=2, min_tokens=1, seed=0)
    with pytest.raises(PlacementError, match="30-40 tokens"):  # every toy passage is shorter than 30 tokens
        short_passages(docs, "sentiment", tok, 40, per_label=2, min_tokens=30)


def test_a_passage_is_one_paragraph_and_one_per_document(tok):
    """A speech gives at most one passage (its paragraphs share speaker and topic), named by its index."""
    speech = "\n\n".join(p.text for p in PASSAGES[:2])
    docs = [Document(speech, "s1", {"party": "A"}, "toy"), Document(speech, "s2", {"party": "A"}, "toy"),
            Document(PASSAGES[2].text, "s3", {"party": "B"}, "toy"),
            Document(PASSAGES[3].text, "s4", {"party": "B"}, "toy")]  # fmt: skip
    chosen = short_passages(docs, "party", tok, 40, per_label=2, min_tokens=1, seed=3)
    ids = [d.doc_id for d in chosen]
    assert {i.partition("#")[0] for i in ids[:2]} == {"s1", "s2"} and ids[2:] in (["s3", "s4"], ["s4", "s3"])
    for passage in chosen[:2]:
        index = int(passage.doc_id.partition("#")[2])
        assert passage.text == PASSAGES[index].text and passage.labels == {"party": "A"}
