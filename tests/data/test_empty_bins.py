"""`empty_bin`: why span sampling left a length bin empty, checked against counts made here by hand; and the
one-line refusal a run gives for it (`llm_collapse.tasks.sample`)."""

from __future__ import annotations

import random

import pytest

from llm_collapse.data import Document, load_folder
from llm_collapse.data.bins import count_tokens, empty_bin, sample_length_binned, target_bins
from llm_collapse.run.config import CompareConfig
from llm_collapse.tasks.inputs import build_inputs
from llm_collapse.tasks.sample import InputsError
from llm_collapse.testing.tokenizers import build_llama_tokenizer

WORDS = "river stone light paper window garden silver morning letter forest harbour candle".split()


@pytest.fixture(scope="module")
def tok():
    return build_llama_tokenizer()


def _two_paragraph_docs(n_docs: int = 3, words: int = 120) -> list[Document]:
    """Documents of two paragraphs of about the same length: one paragraph is short of a length that the
    two together overshoot by more than 10%."""
    rng = random.Random(0)
    docs = []
    for i in range(n_docs):
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(words)) + "." for _ in range(2)]
        docs.append(Document("\n\n".join(paragraphs), f"doc{i}", source="folder:test"))
    return docs


@pytest.fixture(scope="module")
def stepped(tok):
    """(documents, a length no run of whole paragraphs can hit, single-paragraph counts, two-paragraph counts)."""
    docs = _two_paragraph_docs()
    singles = [count_tokens(d.text.split("\n\n"), tok) for d in docs]
    pairs = count_tokens([d.text for d in docs], tok)
    length = max(max(s) for s in singles) + 1
    assert min(pairs) >= target_bins([length])[0].hi  # the premise: two paragraphs step over the bin
    return docs, length, singles, pairs


def test_paragraph_runs_that_step_over_the_bin_are_named_with_the_nearest_runs(tok, stepped):
    docs, length, singles, pairs = stepped
    assert sample_length_binned(docs, tok, [length], per_bin=2) == []  # the sampler finds none indeed
    cause = empty_bin(docs, tok, length)
    assert not cause.too_long and cause.longest == max(pairs)
    assert cause.below == max(max(s) for s in singles)  # the longest single paragraph, short of the length
    assert cause.above == min(pairs)  # the shortest two-paragraph run, past the bin
    label = target_bins([length])[0].label
    assert cause.describe() == (
        f"its documents are long enough (longest: {max(pairs)} tokens), but a text of the bins design is a run "
        f"of whole paragraphs within one document, and none falls in the bin {label} (the nearest: "
        f"{cause.below} and {cause.above} tokens)"
    )


def test_a_length_past_every_document_says_so(tok, stepped):
    docs, _, _, pairs = stepped
    cause = empty_bin(docs, tok, max(pairs) + 1)
    assert cause.too_long and cause.below is None and cause.above is None
    assert (
        cause.describe()
        == f"no document reaches {max(pairs) + 1} tokens (longest document: {max(pairs)} tokens)"
    )


@pytest.fixture
def folder(tmp_path, stepped):
    docs = stepped[0]
    for doc in docs:
        (tmp_path / f"{doc.doc_id}.txt").write_text(doc.text + "\n")
    return tmp_path


def _refusal(folder, tok, lengths, **extra) -> str:
    config = CompareConfig(
        models=["minilm"], tasks=["collapse"], corpus=f"folder:{folder}", lengths=lengths, max_per_bin=2,
        out=str(folder / "run"), **extra,
    ).validate()  # fmt: skip
    with pytest.raises(InputsError) as err:
        build_inputs(config, tok, load_folder(folder))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_bins_design_refusal_names_the_paragraph_runs_not_the_document_length(tok, stepped, folder):
    _, length, _, pairs = stepped
    message = _refusal(folder, tok, [length], design="bins")
    assert message.startswith(f"--lengths {length}: corpus 'folder:{folder}' has no text for it under ")
    assert "its documents are long enough" in message and "no text that long" not in message
    assert f"use lengths below {max(pairs)}" not in message  # the old, wrong advice
    assert (
        "the bin's width (10%) is fixed, so use a length such a run reaches, or split the paragraphs"
        in message
    )
    assert message.endswith(
        "or --design prefix, which cuts every text at exactly L tokens and runs on into the following documents"
    )


def test_default_design_refusal_adds_why_the_prefix_design_could_not_be_built(tok, stepped, folder):
    _, length, _, pairs = stepped
    message = _refusal(folder, tok, [length, max(pairs) + 1])  # design unset: prefix first, then bins
    assert message.startswith(f"--lengths {max(pairs) + 1}: corpus 'folder:{folder}' has no text that long")
    assert (
        f"--lengths {length}: corpus 'folder:{folder}' has no text for it: its documents are long enough"
        in message
    )
    assert "; the prefix design, tried first, cannot be built either: corpus " in message
    assert "--design prefix, which cuts" not in message
