"""LongEmbed-style synthetic retrieval tasks (passkey, needle), generated offline and by seed.

Construction follows LongEmbed section 3.2 (anchors.md 3.2-3.3); decisions where it is silent or where we
differ:

* Lengths default to 256 ... 32768. LongEmbed controls length in **words** (at most ``L x 0.75``
  words for a length-L document); that is the default here too. With ``fit_to_tokens=True`` and a
  tokenizer (what ``compare`` uses), the number of haystack words is searched so that every document
  lands within 2% of ``L`` tokens under THAT tokenizer (internally aiming at 1%); a document that
  cannot get there (a haystack too short) logs a warning. Token counts never include special tokens.
* Per length: candidate documents shared by all queries of that length (LongEmbed footnote 3); each
  query is about a different document (the relevant index is recorded), so chance Acc@1 is
  ``1 / n_docs``. Each length draws from its own ``random.Random`` seeded by ``(task, seed, length)``,
  so any subset of lengths gives the same tasks for the lengths it shares.
* Sizes: LongEmbed has 100 documents and 50 queries per length (`LONGEMBED_DOCS`, `LONGEMBED_QUERIES`;
  ``compare --retrieval-docs 100 --retrieval-queries 50``). The default here is `SWEEP_DOCS` documents
  and as many queries, sized for a 256..32768 sweep of gemma3-270m on a CPU: the FLOP model
  (`llm_collapse.models.flops.FlopModel`, 14.2 TFLOP for one 32k text) puts the eight lengths of one document
  slot at 1.68 x a 32k text, i.e. ~151 s at the measured 90 s per 32k text (bf16, AMX), ~278 s in fp32
  without bf16 (165 s per 32k text). 24 slots: ~60 min per task and method (fp32: ~1.9 h); LongEmbed's
  100 would take ~4.2 h (~7.7 h). Queries cost ~nothing (one sentence), so every document is queried:
  n = 24 queries per length. Consequence: the exact McNemar test against ``base`` (two-sided, 0.05)
  needs at least 6 discordant queries all one way, so the smallest Acc@1 difference it can detect at
  one length is 6/24 = 0.25 (LongEmbed's 50 queries: 0.12); pooled over the eight lengths (LongEmbed's
  average) 6/192 = 0.031. A 95% Wilson interval at Acc@1 = 0.5 spans about +-0.19 at n = 24.
* The insert goes at a sentence boundary of the haystack: the one nearest ``depth x (haystack
  words)``, where ``depth`` ~ U(0, 1) is recorded per document. The haystack is cut at a word
  boundary at its end (LongEmbed cuts mid-word).
* Passkey: the five filler sentences repeated; the key line sits on its own line; one unique
  "First Last" name (from the lists below) and one unique 4-5 digit key per document.
* Needle: one of the project's own 100 facts (:mod:`llm_collapse.data.needles`) per document,
  inserted inline as a sentence into a haystack of State of the Union text (public domain) or, when
  asked and installed, the Paul Graham essays (LongEmbed's haystack; copyrighted, so not the default).
  By default all documents of a length share the same haystack (the start of the chronological
  stream), so they differ only by needle and depth; ``vary_haystack=True`` starts each document at a
  random sentence instead. Which of the two LongEmbed did is not documented.
* "Key at the start, haystack grows" (`passkey_start_tasks`, `needle_start_tasks`; not in LongEmbed):
  each of N documents opens with its key line (or needle) followed by the shared haystack, and the
  document at length L is the first L tokens of the same longest document (`token_prefixes`, as the
  prefix design cuts them). The same N documents and the same queries appear at every length, so
  lengths are paired, and where prefix sharing is exact (`llm_collapse.encoding.prefix`: causal decoder,
  mean/last pooling, nothing after the text) one forward per document gives every length: a 256..32k
  sweep costs one 32k text per document (~36 min for 24 on gemma3-270m, bf16 AMX). Names, keys and
  queries are seeded by ``(task, seed)`` only; the shortest length must hold every key line whole.
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

from llm_collapse.data.bins import count_tokens, token_prefix, token_prefixes, tokenizer_name
from llm_collapse.data.needles import NEEDLES
from llm_collapse.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

DEFAULT_LENGTHS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
WORDS_PER_TOKEN = 0.75
SWEEP_DOCS = 24
"""Default candidate documents per length: a 256..32k gemma3-270m sweep in ~1 h per task and method on a CPU."""
SWEEP_QUERIES = 24
"""Default queries per length: every document (queries are one sentence, nearly free)."""
LONGEMBED_DOCS = 100
LONGEMBED_QUERIES = 50
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
MAX_DOCUMENTS: dict[str, int] = {
    "passkey": len(FIRST_NAMES) * len(LAST_NAMES),  # one unique "First Last" name per document
    "passkey-start": len(FIRST_NAMES) * len(LAST_NAMES),
    "needle": len(NEEDLES),  # one fact per document
    "needle-start": len(NEEDLES),
}
"""The most documents per length each generated task can make (``--retrieval-docs``); position depends on
its corpus and is checked when its documents are built."""


@dataclass(frozen=True)
class Draw:
    """One draw of a synthetic retrieval task's documents and queries, and how their lengths are met.

    Attributes:
        seed: Generation seed (a second draw of the same task is another seed).
        n_docs: Candidate documents per length.
        n_queries: Queries per length, each about a different document (at most ``n_docs``).
        tokenizer: Measures (and with ``fit_to_tokens`` fits) the document lengths; the ``-start`` tasks need
            it (they cut every length as a token prefix).
        fit_to_tokens: Land every document within 2% of its length in tokens under ``tokenizer``.
    """

    seed: int = 0
    n_docs: int = SWEEP_DOCS
    n_queries: int = SWEEP_QUERIES
    tokenizer: PreTrainedTokenizerBase | None = None
    fit_to_tokens: bool = False


@dataclass(frozen=True)
class RetrievalTask:
    """One length of a synthetic retrieval task.

    Attributes:
        name: ``"passkey"``, ``"needle"``, ``"passkey-start"`` or ``"needle-start"``.
        length: Target length in tokens.
        queries: Query texts.
        documents: Candidate documents shared by all queries.
        relevant: Index into ``documents`` of the relevant document of each query.
        depths: Insertion depth of each document's key/needle (fraction of its haystack words; 0.0 for the
            ``-start`` tasks).
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
    def item_ids(self) -> tuple[str, ...]:
        """Each query's id in the per-item results: ``q<i>`` where every length asks the same queries (the
        ``-start`` tasks), else ``<length>/q<i>`` (another length asks other keys), with the key's position
        in the position test (``<length>/<depth>/q<i>``: early and late are other documents)."""
        if self.name.endswith("-start"):
            return tuple(f"q{i}" for i in range(len(self.queries)))
        where = f"{self.length}/{self.depths[0]:g}" if self.name == "position" else f"{self.length}"
        return tuple(f"{where}/q{i}" for i in range(len(self.queries)))

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


class Haystack:
    """Words of a sentence stream and the word index where each sentence starts."""

    def __init__(self, sentences: Sequence[str]) -> None:
        self.words: list[str] = []
        self.starts: list[int] = []
        for sentence in sentences:
            self.starts.append(len(self.words))
            self.words.extend(sentence.split())

    def build(self, n_words: int, depth: float, insert: str, sep: str, *, end: bool = False) -> str:
        """The first ``n_words`` words with ``insert`` at the sentence start nearest ``depth * n_words``; with
        ``end`` the end of the words counts as a boundary too (so depth 1 puts ``insert`` last)."""
        bounds = self.starts[: bisect.bisect_right(self.starts, n_words)] + ([n_words] if end else [])
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


def _window(sentences: Sequence[str], start: int, min_words: int) -> Haystack:
    """Sentences from ``start`` until at least ``min_words`` words (or the stream ends)."""
    end, words = start, 0
    while end < len(sentences) and words < min_words:
        words += len(sentences[end].split())
        end += 1
    return Haystack(sentences[start:end])


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
    return best


def warn_misfits(what: str, target: int, counts: Sequence[int]) -> None:
    """One warning for the fitted texts of one task and length that miss ``target`` tokens by more than
    `FIT_TOLERANCE` (one per task, not per text, so a long run's warning tally folds nothing away)."""
    off = [c for c in counts if abs(c - target) > FIT_TOLERANCE * target]
    if off:
        logger.warning(
            "%s: %d of %d could not be fitted to %d tokens within %.0f%% (%d..%d tokens); the nearest fit is used",
            what, len(off), len(counts), target, FIT_TOLERANCE * 100, min(off), max(off),
        )  # fmt: skip


def _assemble(
    name: str,
    length: int,
    draw: Draw,
    hays: Sequence[Haystack],
    inserts: Sequence[str],
    depths: Sequence[float],
    queries: Sequence[str],
    relevant: Sequence[int],
    sep: str,
    haystack_name: str,
) -> RetrievalTask:
    tokenizer, fit_to_tokens = draw.tokenizer, draw.fit_to_tokens
    if fit_to_tokens and tokenizer is None:
        raise ValueError("fit_to_tokens=True needs a tokenizer")
    if tokenizer is not None:  # a shorter document would be the key line alone, labelled with this length
        key_tokens = max(count_tokens(list(inserts), tokenizer))
        if length < key_tokens + 2:
            raise too_short(name, length, key_tokens, tokenizer_name(tokenizer), where="hold")
    budget = int(length * WORDS_PER_TOKEN)
    docs, fitted, guess = [], [], None
    for hay, insert, depth in zip(hays, inserts, depths, strict=True):
        words = budget - len(insert.split()) if guess is None else guess
        if fit_to_tokens:
            make = functools.partial(hay.build, depth=depth, insert=insert, sep=sep)
            text, guess, n_tokens = fit_document(make, tokenizer, length, words, len(hay.words), insert)
            fitted.append(n_tokens)
        else:
            text = hay.build(max(0, min(words, len(hay.words))), depth, insert, sep)
        docs.append(text)
    warn_misfits(f"{name} documents at {length} tokens", length, fitted)
    if fit_to_tokens:  # the fit counted each document already
        n_tokens = tuple(fitted)
    else:
        n_tokens = tuple(count_tokens(docs, tokenizer)) if tokenizer is not None else ()
    return RetrievalTask(
        name=name, length=length, queries=tuple(queries), documents=tuple(docs), relevant=tuple(relevant),
        depths=tuple(depths), seed=draw.seed, inserts=tuple(inserts), n_tokens=n_tokens,
        tokenizer=tokenizer_name(tokenizer) if tokenizer is not None else "", haystack=haystack_name,
    )  # fmt: skip


def passkey_task(length: int, draw: Draw = Draw()) -> RetrievalTask:
    """The personalised passkey task at one length (word budget ``length x 0.75``); at most
    ``len(FIRST_NAMES) x len(LAST_NAMES)`` documents."""
    _check_passkey_sizes(draw)
    rng = random.Random(f"passkey|{draw.seed}|{length}")
    names, inserts = _passkey_keys(rng, draw.n_docs)
    depths = [rng.random() for _ in range(draw.n_docs)]
    relevant = rng.sample(range(draw.n_docs), draw.n_queries)
    hay = _passkey_haystack(length)
    queries = [_passkey_query(names[i]) for i in relevant]
    return _assemble(
        "passkey",
        length,
        draw,
        [hay] * draw.n_docs,
        inserts,
        depths,
        queries,
        relevant,
        "\n",
        "passkey-filler",
    )


def _check_passkey_sizes(draw: Draw) -> None:
    if not 0 < draw.n_queries <= draw.n_docs <= MAX_DOCUMENTS["passkey"]:
        raise ValueError(f"need 0 < n_queries <= n_docs <= {MAX_DOCUMENTS['passkey']}")


def _passkey_keys(rng: random.Random, n_docs: int) -> tuple[list[str], list[str]]:
    """Unique names and their key lines (two draws from ``rng``: names, then keys)."""
    names = rng.sample([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES], n_docs)
    keys = rng.sample(range(1000, 100000), n_docs)
    inserts = [
        f"{p}'s pass key is {k}. Remember it. {k} is the pass key for {p}."
        for p, k in zip(names, keys, strict=True)
    ]
    return names, inserts


def _passkey_query(name: str) -> str:
    return f"what is the passkey for {name}?"


def _passkey_haystack(length: int) -> Haystack:
    """The filler repeated to more words than ``length`` (every filler word is at least one token)."""
    return Haystack(split_sentences(PASSKEY_FILLER) * (length // len(PASSKEY_FILLER.split()) + 8))


def needle_task(
    length: int, draw: Draw = Draw(), *, haystack: str | Sequence[str] = "sotu", vary_haystack: bool = False
) -> RetrievalTask:
    """The needle task at one length (word budget ``length x 0.75``): one fact of :data:`NEEDLES` hidden in each
    document (at most 100 documents, one needle each).

    Args:
        length: Target length in tokens.
        draw: Seed, sizes and how lengths are met.
        haystack: A corpus name (``"sotu"``, ``"paul-graham"``, ...) or the haystack texts themselves.
        vary_haystack: Start each document at a random sentence instead of the stream's start.
    """
    sentences, hay_name = _needle_sentences(haystack, draw)
    rng = random.Random(f"needle|{draw.seed}|{length}")
    needles = rng.sample(NEEDLES, draw.n_docs)
    depths = [rng.random() for _ in range(draw.n_docs)]
    relevant = rng.sample(range(draw.n_docs), draw.n_queries)
    min_words = length + 64
    if vary_haystack:
        cum = list(itertools.accumulate(len(s.split()) for s in sentences))
        last = bisect.bisect_right(cum, cum[-1] - min_words)  # later starts leave < min_words
        hays = [_window(sentences, rng.randrange(last + 1), min_words) for _ in range(draw.n_docs)]
    else:
        hays = [_window(sentences, 0, min_words)] * draw.n_docs
    if len(hays[0].words) < int(length * WORDS_PER_TOKEN):
        logger.warning("haystack %r has only %d words for length %d", hay_name, len(hays[0].words), length)
    queries = [needles[i].question for i in relevant]
    facts = [n.fact for n in needles]
    return _assemble("needle", length, draw, hays, facts, depths, queries, relevant, " ", hay_name)


def _needle_sentences(haystack: str | Sequence[str], draw: Draw) -> tuple[tuple[str, ...], str]:
    """The haystack's sentences and name; checks the needle task sizes."""
    if isinstance(haystack, str):
        sentences, hay_name = corpus_sentences(haystack), haystack
    else:
        sentences, hay_name = tuple(s for text in haystack for s in split_sentences(text)), "custom"
    if not sentences:
        raise ValueError(f"haystack {hay_name!r} has no text")
    if not 0 < draw.n_queries <= draw.n_docs <= MAX_DOCUMENTS["needle"]:
        raise ValueError(
            f"need 0 < n_queries <= n_docs <= {MAX_DOCUMENTS['needle']}, got {draw.n_queries} and {draw.n_docs}"
        )
    return sentences, hay_name


def passkey_tasks(lengths: Sequence[int] = DEFAULT_LENGTHS, draw: Draw = Draw()) -> list[RetrievalTask]:
    """:func:`passkey_task` for each length."""
    return [passkey_task(length, draw) for length in lengths]


def needle_tasks(
    lengths: Sequence[int] = DEFAULT_LENGTHS, draw: Draw = Draw(), **options
) -> list[RetrievalTask]:
    """:func:`needle_task` for each length (``options``: ``haystack``, ``vary_haystack``)."""
    return [needle_task(length, draw, **options) for length in lengths]


# ------------------------------------------------------------------ key at the start, haystack grows


class StartTaskError(UserError, ValueError):
    """A length too short to hold every document's key line (or needle) whole: at the start of the document
    for the ``-start`` tasks, anywhere in it for passkey, needle and position."""


def passkey_start_tasks(lengths: Sequence[int], draw: Draw) -> list[RetrievalTask]:
    """Passkey with the key line first and the filler after it; one task per length, paired across lengths.

    Args:
        lengths: Document lengths in tokens under ``draw.tokenizer`` (no special tokens).
        draw: Its tokenizer (required) cuts every length as a token prefix of the longest document; its seed
            draws names, keys and queries (not the lengths); the same documents and queries at every length.

    Returns:
        One `RetrievalTask` per length, in ``lengths`` order; task k's document i is the first
        ``lengths[k]`` tokens of document i at ``max(lengths)`` tokens.

    Raises:
        StartTaskError: The shortest length cannot hold a key line whole.
    """
    _check_passkey_sizes(draw)
    rng = random.Random(f"passkey-start|{draw.seed}")
    names, inserts = _passkey_keys(rng, draw.n_docs)
    relevant = rng.sample(range(draw.n_docs), draw.n_queries)
    queries = [_passkey_query(names[i]) for i in relevant]
    hay = _passkey_haystack(max(lengths, default=0))
    return _start_tasks(
        "passkey-start", lengths, draw, inserts, queries, relevant, hay, "\n", "passkey-filler"
    )


def needle_start_tasks(
    lengths: Sequence[int], draw: Draw, *, haystack: str | Sequence[str] = "sotu"
) -> list[RetrievalTask]:
    """The needle opens each document and the (shared) haystack follows; see `passkey_start_tasks`.

    Args:
        lengths: Document lengths in tokens under ``draw.tokenizer``.
        draw: As for `passkey_start_tasks` (at most 100 documents, one needle each).
        haystack: A corpus name or the haystack texts; every document continues with its start.

    Returns:
        One `RetrievalTask` per length, in ``lengths`` order.

    Raises:
        StartTaskError: The shortest length cannot hold a needle whole.
    """
    sentences, hay_name = _needle_sentences(haystack, draw)
    rng = random.Random(f"needle-start|{draw.seed}")
    needles = rng.sample(NEEDLES, draw.n_docs)
    relevant = rng.sample(range(draw.n_docs), draw.n_queries)
    hay = _window(sentences, 0, max(lengths, default=0) + 64)
    queries = [needles[i].question for i in relevant]
    facts = [n.fact for n in needles]
    return _start_tasks("needle-start", lengths, draw, facts, queries, relevant, hay, " ", hay_name)


def _start_tasks(
    name: str,
    lengths: Sequence[int],
    draw: Draw,
    inserts: Sequence[str],
    queries: Sequence[str],
    relevant: Sequence[int],
    hay: Haystack,
    sep: str,
    haystack_name: str,
) -> list[RetrievalTask]:
    """Each insert + ``sep`` + the haystack, grown to ``max(lengths)`` tokens, cut at every length."""
    tokenizer = draw.tokenizer
    if tokenizer is None:
        raise ValueError(f"{name} cuts its documents as token prefixes: pass a tokenizer")
    if not lengths or min(lengths) < 1:
        raise ValueError(f"need positive lengths, got {list(lengths)}")
    longest, shortest = max(lengths), min(lengths)
    key_tokens = max(count_tokens(list(inserts), tokenizer))
    tok_name = tokenizer_name(tokenizer)
    if shortest < key_tokens:  # refused before any long text is built; a cut inside the key line, below
        raise too_short(name, shortest, key_tokens, tok_name)
    texts, n_words = [], min(longest, len(hay.words))  # every word is at least one token: usually enough
    for insert in inserts:
        while True:
            text = sep.join(part for part in (insert, " ".join(hay.words[:n_words])) if part)
            total = count_tokens([text], tokenizer)[0]
            if total >= longest or n_words >= len(hay.words):
                break
            n_words = min(len(hay.words), 2 * n_words)
        if total < longest:
            logger.warning("%s: haystack %r gives only %d of %d tokens", name, haystack_name, total, longest)
        texts.append(text)
    cuts = [token_prefixes(text, lengths, tokenizer) for text in texts]  # one tokenisation per document
    first = list(lengths).index(shortest)
    if any(insert not in row[first] for insert, row in zip(inserts, cuts, strict=True)):
        raise too_short(name, shortest, key_tokens, tok_name)
    out = []
    for column, length in enumerate(lengths):
        documents = tuple(row[column] for row in cuts)
        out.append(
            RetrievalTask(
                name=name,
                length=length,
                queries=tuple(queries),
                documents=documents,
                relevant=tuple(relevant),
                depths=(0.0,) * len(inserts),
                seed=draw.seed,
                inserts=tuple(inserts),
                n_tokens=tuple(count_tokens(list(documents), tokenizer)),
                tokenizer=tok_name,
                haystack=haystack_name,
            )
        )
    return out


def too_short(
    name: str, shortest: int, key_tokens: int, tokenizer: str, *, where: str = "open with"
) -> StartTaskError:
    return StartTaskError(
        f"length {shortest} is too short for {name}: its documents {where} key lines of up to {key_tokens} "
        f"tokens under {tokenizer!r}, which must fit whole; use lengths >= {key_tokens + 2} (--lengths)"
    )
