"""Small, locally trained tokenizers in Llama/Mistral and Gemma conventions.

Nothing here downloads: a BPE model is trained with the ``tokenizers`` library on a
deterministic in-code corpus and wrapped in the matching ``transformers`` class.

Decisions and gotchas (transformers 5.x, tokenizers 0.23):

* The vocabulary is laid out like the real SentencePiece-converted ones: special tokens
  first, then the 256 byte-fallback pieces ``<0x00>``..``<0xFF>``, then the learned pieces.
  Digits are never merged (as in Llama and Gemma), and the Llama tokenizer has no ``"\\n"``
  piece, so a newline goes through byte fallback (``<0x0A>``) as in Mistral-7B.
* When ``tokenizer.json`` exists, ``LlamaTokenizer``/``GemmaTokenizer.from_pretrained``
  keep only the vocab, merges and **post-processor** from it; normalizer, pre-tokenizer
  and decoder are rebuilt by the class ``__init__``. The backends here are therefore
  built with exactly the pipeline those classes rebuild, so both readers agree.
* ``add_bos_token``/``add_eos_token`` in ``tokenizer_config.json`` are **ignored** on load
  when ``tokenizer.json`` exists (they are popped); the post-processor inside
  ``tokenizer.json`` decides. ``save_pretrained`` also drops the two keys, so
  :func:`save_tokenizer` writes them back (the published files carry them).
* Passing ``add_eos_token=True`` to ``from_pretrained`` rebuilds the post-processor from
  both flags, and ``add_bos_token`` then defaults to ``False``: pass both.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
from transformers import GemmaTokenizer, LlamaTokenizer, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

__all__ = [
    "GEMMA_SPECIAL_TOKENS",
    "LLAMA_SPECIAL_TOKENS",
    "build_gemma_tokenizer",
    "build_llama_tokenizer",
    "save_tokenizer",
    "training_corpus",
]

LLAMA_SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>")
"""Llama/Mistral special tokens, at ids 0, 1, 2."""

GEMMA_SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")
"""Gemma special tokens, at ids 0..4 (``<mask>`` is id 4 in the real vocab too)."""

SPIECE_UNDERLINE = "▁"
BYTE_TOKENS: tuple[str, ...] = tuple(f"<0x{b:02X}>" for b in range(256))
_PRINTABLE = [chr(c) for c in range(33, 127)]
_LEARNED_VOCAB_SIZE = 1200  # trainer cap (alphabet + merges); the corpus yields ~1.1k ids in all


def _phrases(block: str) -> list[str]:
    """Comma-separated phrases of a text block, in order."""
    return [p.strip() for p in block.replace("\n", " ").split(",") if p.strip()]


_SUBJECTS = _phrases(
    """
    the baby, a baker, my friend, the doctor, our teacher, the cat, a farmer, the model,
    the student, her mother, the chef, a child, the team, his father
    """
)
_VERBS = _phrases(
    """
    eats, bakes, wants, finds, reads, writes, likes, buys, sells, cooks, remembers, forgets,
    shares, carries, needs, sees
    """
)
_OBJECTS = _phrases(
    """
    bread, food, apples, soup, the book, a letter, milk, rice, the passkey, a question,
    the answer, cheese, water, the document, a song, vegetables
    """
)
_ADJECTIVES = _phrases(
    """
    fresh, warm, small, large, happy, quiet, good, old, new, simple, healthy, sweet, long,
    short, early, late
    """
)
_ADVERBS = _phrases("again, today, slowly, quickly, every day, at night, once more, now")
_TASKS = [
    "Given a question, retrieve passages that answer the question",
    "Given a claim, find documents that refute the claim",
    "Retrieve semantically similar text",
    "Given a web search query, retrieve relevant passages that answer the query",
    "Classify the sentiment of the review",
    "Identify the topic of the news article",
]
_QUESTIONS = _phrases(
    """
    what is the best food for a baby, how is bread made, why do babies sleep so much,
    where can I buy fresh bread, what is x, how long does soup take to cook,
    when do children learn to read, is milk healthy for adults
    """
)
_PUNCT_ENDINGS = [".", "!", "?", "...", ";", ":"]
_TOPIC_WORDS = """
apple orange banana garden kitchen window river mountain forest city village market school
library hospital station airport museum theater office factory bridge street road ocean beach
island winter summer spring autumn morning evening weather rain snow wind storm cloud sunshine
music painting history science language computer network machine engine energy battery memory
system program problem solution method result report summary example number letter picture
family history country nation government money price value market company product service
customer question answer passage document query instruction reason purpose meaning structure
travel journey adventure holiday weekend birthday wedding dinner breakfast lunch dessert sugar
butter flour salt pepper honey coffee tea juice chicken fish potato tomato onion carrot garlic
doctor nurse patient teacher student parent neighbor stranger artist writer singer player
running walking swimming reading writing cooking baking sleeping learning teaching building
beautiful difficult important possible different special general private public national
""".split()


def _sentence(rng: random.Random) -> str:
    """One simple English sentence with optional adjective, adverb and punctuation."""
    obj = rng.choice(_OBJECTS)
    if rng.random() < 0.5:
        obj = f"{rng.choice(_ADJECTIVES)} {obj.split()[-1]}"
    words = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {obj}"
    if rng.random() < 0.4:
        words += f" {rng.choice(_ADVERBS)}"
    return words[0].upper() + words[1:] + rng.choice(_PUNCT_ENDINGS)


def _number(rng: random.Random) -> str:
    return str(rng.randint(0, 10 ** rng.randint(1, 6)))


def _templated(rng: random.Random) -> str:
    """One of the retrieval / passkey / list style texts that the package feeds models."""
    kind = rng.randrange(7)
    if kind == 0:
        return f"Instruct: {rng.choice(_TASKS)}\nQuery: {rng.choice(_QUESTIONS)}?"
    if kind == 1:
        return f"Document: {_sentence(rng)} {_sentence(rng)}"
    if kind == 2:
        key = _number(rng)
        return f"The passkey is {key}. Remember it. {key} is the passkey."
    if kind == 3:
        return f"({rng.randint(1, 9)}) {_sentence(rng)}\n({rng.randint(1, 9)}) {_sentence(rng)}"
    if kind == 4:
        return f'"{_sentence(rng)}" she said, and then said it again - {_number(rng)} times.'
    if kind == 5:
        return f"Rewrite the sentence: {_sentence(rng)}\nRewritten sentence: {_sentence(rng)}"
    topics = ", ".join(rng.sample(_TOPIC_WORDS, 6))
    return f"Keywords: {topics}. Topic {rng.randint(1, 99)}; score = {rng.random():.3f}"


def training_corpus(n_texts: int = 800, *, seed: int = 0) -> list[str]:
    """Return a deterministic English training corpus.

    Args:
        n_texts: Number of texts to generate.
        seed: Seed of the ``random.Random`` that picks the words.

    Returns:
        Texts with digits, punctuation, newlines and the words the tests use.
    """
    rng = random.Random(seed)
    return [_sentence(rng) if i % 2 else _templated(rng) for i in range(n_texts)]


def _train_pieces(
    texts: Iterable[str], pre_tokenizer: pre_tokenizers.PreTokenizer, alphabet: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """Train a BPE on ``texts`` and return its pieces (in id order) and merges."""
    scratch = Tokenizer(BPE())
    scratch.pre_tokenizer = pre_tokenizer
    trainer = BpeTrainer(vocab_size=_LEARNED_VOCAB_SIZE, show_progress=False, initial_alphabet=list(alphabet))
    scratch.train_from_iterator(texts, trainer=trainer)
    model = json.loads(scratch.to_str())["model"]
    pieces = sorted(model["vocab"], key=model["vocab"].__getitem__)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return pieces, merges


def _assemble_vocab(specials: Sequence[str], pieces: Iterable[str]) -> dict[str, int]:
    """Specials, then byte-fallback pieces, then learned pieces (deduplicated)."""
    vocab: dict[str, int] = {}
    for token in (*specials, *BYTE_TOKENS, *pieces):
        vocab.setdefault(token, len(vocab))
    return vocab


def _iter_lines(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        yield from text.split("\n")


def _special(content: str) -> AddedToken:
    return AddedToken(content, special=True, normalized=False)


def _template(bos: str | None, eos: str | None, ids: dict[str, int]) -> processors.TemplateProcessing:
    """``[bos] $A [eos]`` (pair: ``... [bos] $B [eos]``) like ``update_post_processor`` builds."""
    head = f"{bos}:0 " if bos else ""
    tail = f" {eos}:0" if eos else ""
    single = f"{head}$A:0{tail}"
    pair = f"{single}{' ' + bos + ':1' if bos else ''} $B:1{' ' + eos + ':1' if eos else ''}"
    specials = [(tok, ids[tok]) for tok in (bos, eos) if tok]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


@functools.cache
def _llama_backend_json() -> str:
    """Serialized Llama-style backend, trained once per process."""
    train_pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="first", split=True),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    pieces, merges = _train_pieces(_iter_lines(training_corpus()), train_pre, [SPIECE_UNDERLINE, *_PRINTABLE])
    vocab = _assemble_vocab(LLAMA_SPECIAL_TOKENS, pieces)
    backend = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    # Exactly what `LlamaTokenizer.__init__` rebuilds with legacy=False, add_prefix_space=True.
    backend.normalizer = None
    backend.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPIECE_UNDERLINE, prepend_scheme="first", split=False
    )
    backend.decoder = decoders.Sequence(
        [
            decoders.Replace(SPIECE_UNDERLINE, " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1, right=0),
        ]
    )
    backend.add_special_tokens([_special(t) for t in LLAMA_SPECIAL_TOKENS])
    logger.debug("trained llama-style tokenizer: %d ids", backend.get_vocab_size())
    return backend.to_str()


@functools.cache
def _gemma_backend_json() -> str:
    """Serialized Gemma-style backend (no extra tokens), trained once per process."""
    train_pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="never", split=True),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    pieces, merges = _train_pieces(training_corpus(), train_pre, [SPIECE_UNDERLINE, "\n", *_PRINTABLE])
    vocab = _assemble_vocab(GEMMA_SPECIAL_TOKENS, pieces)
    backend = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    # Exactly what `GemmaTokenizer.__init__` rebuilds: spaces become "▁", no prefix space.
    backend.normalizer = normalizers.Replace(" ", SPIECE_UNDERLINE)
    backend.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SPIECE_UNDERLINE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    backend.add_special_tokens([_special(t) for t in GEMMA_SPECIAL_TOKENS])
    logger.debug("trained gemma-style tokenizer: %d ids", backend.get_vocab_size())
    return backend.to_str()


def build_llama_tokenizer(
    *, add_bos: bool = True, add_eos: bool = False, model_max_length: int = 32768
) -> LlamaTokenizer:
    """Build a Mistral/Llama-convention tokenizer.

    SentencePiece-style BPE (Metaspace ``"▁"``, prepend scheme ``"first"``, byte fallback),
    ``<unk>``=0, ``<s>``=1, ``</s>``=2, and a ``TemplateProcessing`` post-processor that adds
    ``<s>`` (and ``</s>`` when ``add_eos``).

    Args:
        add_bos: Whether the post-processor prepends ``<s>``.
        add_eos: Whether the post-processor appends ``</s>``.
        model_max_length: Value saved as ``model_max_length``.

    Returns:
        A fresh ``LlamaTokenizer``; save it with :func:`save_tokenizer`.
    """
    backend = Tokenizer.from_str(_llama_backend_json())
    ids = backend.get_vocab()
    backend.post_processor = _template("<s>" if add_bos else None, "</s>" if add_eos else None, ids)
    return LlamaTokenizer(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        add_bos_token=add_bos,
        add_eos_token=add_eos,
        legacy=False,
        add_prefix_space=None,
        model_max_length=model_max_length,
    )


def build_gemma_tokenizer(
    *, extra_special_tokens: Sequence[str] = (), model_max_length: int = 8192
) -> GemmaTokenizer:
    """Build a Gemma-convention tokenizer.

    ``<pad>``=0, ``<eos>``=1, ``<bos>``=2, ``<unk>``=3, ``<mask>``=4; adds ``<bos>`` only;
    spaces are normalized to ``"▁"`` with no prefix space; left padding (Gemma's default).

    Args:
        extra_special_tokens: Tokens appended as special added tokens at the end of the
            vocab, in order (bge-multilingual-gemma2 has ``("<instruct>", "<query>")``).
        model_max_length: Value saved as ``model_max_length``.

    Returns:
        A fresh ``GemmaTokenizer``; save it with :func:`save_tokenizer`.
    """
    backend = Tokenizer.from_str(_gemma_backend_json())
    backend.post_processor = _template("<bos>", None, backend.get_vocab())
    extras = [str(t) for t in extra_special_tokens]
    if extras:
        backend.add_special_tokens([_special(t) for t in extras])
    kwargs: dict[str, Any] = {"extra_special_tokens": extras} if extras else {}
    return GemmaTokenizer(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        mask_token="<mask>",
        add_bos_token=True,
        add_eos_token=False,
        padding_side="left",
        model_max_length=model_max_length,
        **kwargs,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, path: str | Path, **config_updates: Any) -> Path:
    """Save ``tokenizer`` and write the flags transformers 5 leaves out of the config.

    ``save_pretrained`` in transformers 5 drops ``add_bos_token``/``add_eos_token`` from
    ``tokenizer_config.json``; published checkpoints carry them, so they are written back
    from the tokenizer's current flags. ``config_updates`` then override any key (e.g.
    ``add_eos_token=True`` for e5-mistral, whose ``tokenizer.json`` still adds only ``<s>``).

    Args:
        tokenizer: Tokenizer to save.
        path: Output folder (created if missing).
        **config_updates: Keys to set in ``tokenizer_config.json`` after saving.

    Returns:
        The output folder.
    """
    out = Path(path)
    tokenizer.save_pretrained(out)
    config_file = out / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["add_bos_token"] = bool(getattr(tokenizer, "add_bos_token", False))
    config["add_eos_token"] = bool(getattr(tokenizer, "add_eos_token", False))
    if isinstance(tokenizer, LlamaTokenizer):
        config.setdefault("legacy", bool(tokenizer.legacy))
    config.update(copy.deepcopy(config_updates))
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out
