"""Labelled passages placed inside neutral filler: the same label information at every length.

A probe over texts that grow by adding more of the same document (the prefix design) sees the information
grow with the length, which can outweigh any collapse. Here a labelled passage (a short movie review for
sentiment, a sotu paragraph for ``major_party``) is put, byte for byte, at a chosen depth inside sentences
of another corpus, and only the filler grows: a change of a label probe with length is what length does
to the embedding, not what the text says.

Decisions:

- Each passage has its own filler stream (a seeded start sentence in the filler corpus), the same at every
  length and depth: a longer text of an item holds the shorter one's filler and more of it.
- The passage goes to the filler's sentence boundary nearest ``depth`` x the filler words (0: first, 1:
  last, after the filler's end), and the filler is fitted so the whole text is ``length`` tokens (within 2%, cut at the length
  where needed, never inside the passage: `llm_collapse.data.synthetic.fit_document`).
- Every passage must fit the shortest length with room for filler (`MIN_FILLER_TOKENS`); `short_passages`
  draws a label-balanced sample of those that do.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llm_collapse.data.bins import count_tokens
from llm_collapse.data.corpora import Document, paragraphs
from llm_collapse.data.synthetic import WORDS_PER_TOKEN, Haystack, fit_document, warn_misfits
from llm_collapse.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MIN_FILLER_TOKENS = 16
"""Filler a text holds at least, at its shortest length (below it, the length is the passage's own)."""
MIN_PASSAGE_TOKENS = 32
"""Shortest passage `short_passages` draws: a sentence or two carries too little of a label to probe."""


class PlacementError(UserError, ValueError):
    """The passages do not fit the lengths asked for, or too few passages carry the label."""


@dataclass(frozen=True)
class PlacedPassage:
    """One passage at one length and depth.

    Attributes:
        item_id: The passage's document id: the same item at every length and depth (paired).
        label: Its label.
        length: Target length in tokens (no special tokens).
        depth: Where the passage sits in the filler (0 first, 1 last).
        text: Filler, the passage byte for byte, filler.
        n_tokens: The text's tokens under the builder's tokenizer.
    """

    item_id: str
    label: str
    length: int
    depth: float
    text: str
    n_tokens: int


def short_passages(
    documents: Sequence[Document],
    label_key: str,
    tokenizer: PreTrainedTokenizerBase,
    max_tokens: int,
    per_label: int,
    *,
    min_tokens: int = MIN_PASSAGE_TOKENS,
    seed: int = 0,
) -> list[Document]:
    """A label-balanced, seeded sample of ``per_label`` passages per label value: paragraphs of ``min_tokens``
    to ``max_tokens`` tokens, at most one per document (paragraphs of one speech share its speaker and topic,
    which a probe could read instead of the label), unlabelled documents left out; in label then draw order.

    A passage keeps its document's labels and source; its id is ``<doc_id>#<paragraph index>`` where the
    document has more than one paragraph, else the document's id (a movie review is one paragraph)."""
    rng = random.Random(f"placed|{seed}|{label_key}")
    candidates = [
        (
            index,
            Document(text, doc.doc_id if len(paras) == 1 else f"{doc.doc_id}#{i}", doc.labels, doc.source),
        )
        for index, doc in enumerate(documents)
        if doc.labels.get(label_key) is not None
        for paras in [paragraphs(doc.text)]
        for i, text in enumerate(paras)
    ]
    counts = count_tokens([p.text for _, p in candidates], tokenizer) if candidates else []
    by_document: dict[int, list[Document]] = {}
    for (index, passage), n in zip(candidates, counts, strict=True):
        if min_tokens <= n <= max_tokens:
            by_document.setdefault(index, []).append(passage)
    by_label: dict[str, list[Document]] = {}
    for options in by_document.values():
        passage = rng.choice(options)
        by_label.setdefault(passage.labels[label_key], []).append(passage)
    short = {value: len(docs) for value, docs in sorted(by_label.items()) if len(docs) < per_label}
    if len(by_label) < 2 or short:
        raise PlacementError(
            f"need {per_label} passages of {min_tokens}-{max_tokens} tokens (one per document) for each of "
            f">= 2 values of {label_key!r}; found {dict(sorted((v, len(d)) for v, d in by_label.items()))}; "
            "ask fewer per label (--max-per-bin), allow longer passages (a higher shortest length) or choose "
            "a label with fewer values"
        )
    return [doc for value in sorted(by_label) for doc in rng.sample(by_label[value], per_label)]


def place_passages(
    passages: Sequence[Document],
    label_key: str,
    filler: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    lengths: Sequence[int],
    depths: Sequence[float],
    *,
    seed: int = 0,
) -> list[PlacedPassage]:
    """Every passage at every length and depth, in passage, length, depth order.

    Args:
        passages: Labelled documents, each placed whole.
        label_key: The label the probe reads.
        filler: Sentences of another corpus (`llm_collapse.data.synthetic.corpus_sentences`).
        tokenizer: Counts and fits the lengths (no special tokens).
        lengths: Target lengths in tokens; the shortest must hold every passage and `MIN_FILLER_TOKENS`.
        depths: Positions of the passage in [0, 1].
        seed: Chooses each passage's filler stream (its start sentence).

    Raises:
        PlacementError: A passage does not fit the shortest length, or a depth is outside [0, 1].
    """
    if not filler or not lengths or not depths or any(not 0.0 <= d <= 1.0 for d in depths):
        raise PlacementError(
            f"need filler sentences, lengths and depths in [0, 1]; got depths {list(depths)}"
        )
    tokens = count_tokens([p.text for p in passages], tokenizer)
    if (longest := max(tokens, default=0)) + MIN_FILLER_TOKENS > min(lengths):
        raise PlacementError(
            f"a passage of {longest} tokens does not fit the shortest length {min(lengths)} with "
            f"{MIN_FILLER_TOKENS} tokens of filler; use lengths from {longest + MIN_FILLER_TOKENS} tokens"
        )
    out = []
    for passage, n_passage in zip(passages, tokens, strict=True):
        hay = _filler_stream(filler, max(lengths), random.Random(f"placed|{seed}|{passage.doc_id}"))
        for length in lengths:
            fitted = []
            for depth in depths:
                words = int((length - n_passage) * WORDS_PER_TOKEN)

                make = functools.partial(hay.build, depth=depth, insert=passage.text, sep=" ", end=True)
                text, _, n_tokens = fit_document(make, tokenizer, length, words, len(hay.words), passage.text)
                fitted.append(n_tokens)
                out.append(
                    PlacedPassage(passage.doc_id, passage.labels[label_key], length, depth, text, n_tokens)
                )
            warn_misfits(f"placed passage {passage.doc_id} at {length} tokens", length, fitted)
    return out


def _filler_stream(sentences: Sequence[str], length: int, rng: random.Random) -> Haystack:
    """Sentences from a random start (wrapping round) until they hold more words than ``length`` tokens need
    (every word is at least one token)."""
    start, chosen, words = rng.randrange(len(sentences)), [], 0
    while words < length + 64:
        sentence = sentences[(start + len(chosen)) % len(sentences)]
        chosen.append(sentence)
        words += len(sentence.split())
        if len(chosen) > 10 * len(sentences):
            break  # a corpus of empty sentences; fit_document then says the length was not reached
    return Haystack(chosen)
