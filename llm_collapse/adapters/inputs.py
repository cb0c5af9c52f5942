"""How texts become model inputs: token ids plus a pool mask, one `EncodedText` per text.

Every adapter is "prompt format -> token ids -> forward -> pool over `pool_mask` -> L2 normalise". The pool
mask says which positions pooling may read: last-token pooling takes the last position whose mask is 1,
mean pooling averages over the masked positions. Because pooling never looks at padding, embeddings do not
depend on padding side or batch composition.

Texts are tokenised without truncation first, and only the texts that overflow `max_length` are
re-tokenised with the model's own truncation rule, so every truncation is known and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from llm_collapse.errors import UserError

Kind = Literal["query", "document"]
KINDS: tuple[str, ...] = ("query", "document")


class TokenNotFoundError(UserError, ValueError):
    """A token a spec names (``eos_token``) that the tokenizer does not have."""


@dataclass(frozen=True)
class EncodedText:
    """One text, ready for the model.

    Attributes:
        input_ids: Token ids, special tokens included.
        pool_mask: 1 where pooling may read the position, else 0; same length as ``input_ids``.
        truncated: Whether the text was cut to fit ``max_length``.
    """

    input_ids: tuple[int, ...]
    pool_mask: tuple[int, ...]
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.input_ids)


class InputFormat(Protocol):
    """Turns texts into `EncodedText`s for one model family."""

    def encode(
        self, tokenizer, texts: Sequence[str], *, kind: Kind, instruction: str | None, max_length: int
    ) -> list[EncodedText]: ...

    def describe(self) -> dict:
        """Plain-data description for run metadata."""
        ...


EosPolicy = Literal["tokenizer", "exactly-one", "as-text"]
PoolSpan = Literal["all", "skip-bos", "skip-instruction", "first"]


@dataclass(frozen=True)
class TemplateFormat:
    """Instruction template + EOS policy + which tokens pooling reads.

    Attributes:
        query_template: Python format string with ``{instruction}`` and ``{text}``.
        document_template: Format string with ``{text}`` (documents carry no instruction on these cards).
        eos: ``"tokenizer"``: whatever the tokenizer adds. ``"exactly-one"``: strip a trailing EOS the
            tokenizer may add, truncate to ``max_length - 1``, append one EOS (survives truncation).
            ``"as-text"``: append ``tokenizer.eos_token`` to the string before tokenising, so truncation
            drops it (NV-Embed-v2's published behaviour).
        eos_token: The token ``eos`` appends, when it is not ``tokenizer.eos_token`` (Qwen3-Embedding ends
            every input with ``<|endoftext|>`` while its tokenizer may name ``<|im_end|>`` as EOS); None: the
            tokenizer's.
        pool_span: ``"all"``: every real token. ``"skip-bos"``: all but a leading BOS.
            ``"skip-instruction"``: zero the first ``len(tokenizer.tokenize(prefix))`` positions, where
            ``prefix`` is the query template up to ``{text}`` (NV-Embed-v2's ``pool_mask``). ``"first"``: only
            the first token (sentence-transformers' ``cls`` pooling, read from a model folder by
            `llm_collapse.adapters.folder`).
    """

    query_template: str = "{text}"
    document_template: str = "{text}"
    eos: EosPolicy = "tokenizer"
    pool_span: PoolSpan = "all"
    eos_token: str | None = None

    @property
    def takes_instruction(self) -> bool:
        return "{instruction}" in self.query_template

    @property
    def text_copies(self) -> int:
        """How many copies of a document's text its input holds (what the cost estimates multiply by)."""
        return self.document_template.count("{text}")

    def format(self, text: str, *, kind: Kind, instruction: str | None) -> tuple[str, str]:
        """Returns ``(prefix, full_string)`` for one text; the prefix is what precedes the text."""
        template = self.query_template if kind == "query" else self.document_template
        head, _, tail = template.partition("{text}")
        prefix = head.format(instruction=instruction or "")
        return prefix, prefix + text + tail.format(instruction=instruction or "")

    def encode(
        self, tokenizer, texts: Sequence[str], *, kind: Kind, instruction: str | None, max_length: int
    ) -> list[EncodedText]:
        pairs = [self.format(t, kind=kind, instruction=instruction) for t in texts]
        eos_text, eos_id = self.eos_of(tokenizer)
        strings = [full + (eos_text if self.eos == "as-text" else "") for _, full in pairs]
        limit = max_length - 1 if self.eos == "exactly-one" else max_length
        strip = eos_id if self.eos == "exactly-one" else None
        ids_list = _tokenize_capped(tokenizer, strings, limit, strip_eos=strip)
        out = []
        for (prefix, _), (ids, truncated) in zip(pairs, ids_list, strict=True):
            if self.eos == "exactly-one":
                ids = [*ids, eos_id]
            out.append(EncodedText(tuple(ids), tuple(self.pool_mask(tokenizer, ids, prefix)), truncated))
        return out

    def eos_of(self, tokenizer) -> tuple[str, int]:
        """The EOS text and id this format appends: ``eos_token`` when set, else the tokenizer's."""
        if self.eos_token is None:
            return tokenizer.eos_token, tokenizer.eos_token_id
        eos_id = token_id(tokenizer, self.eos_token)
        if eos_id is None:
            raise TokenNotFoundError(
                f"eos_token {self.eos_token!r} is not a token of this tokenizer; name one of its special tokens"
            )
        return self.eos_token, eos_id

    def pool_mask(self, tokenizer, ids: Sequence[int], prefix: str) -> list[int]:
        """The pool mask of ``ids`` as a whole input; ``prefix`` is what precedes the text (`format`).

        Public because `llm_collapse.encoding.prefix` asks it for each token prefix of a longer input: a prefix gets
        the mask its own encoding would, not a slice of the long input's.
        """
        mask = [1] * len(ids)
        if self.pool_span == "skip-bos" and ids and ids[0] == tokenizer.bos_token_id and len(ids) > 1:
            mask[0] = 0
        elif self.pool_span == "first":
            mask[1:] = [0] * (len(mask) - 1)
        elif self.pool_span == "skip-instruction" and prefix:
            # NV-Embed-v2 quirk, kept on purpose: the count excludes BOS but starts at position 0, so BOS is
            # masked and the last instruction token stays in the pool.
            n = min(len(tokenizer.tokenize(prefix)), len(ids))
            mask[:n] = [0] * n
        return mask

    def describe(self) -> dict:
        # eos_token appears only when set, so the formats written before it existed keep their cache keys.
        fields = {k: v for k, v in self.__dict__.items() if not (k == "eos_token" and v is None)}
        return {"type": "template", **fields}


def token_id(tokenizer, token: str) -> int | None:
    """The id of ``token`` when it is in the tokenizer's vocabulary (added tokens included), else None.

    Membership, not ``id != unk_token_id``: Qwen-family tokenizers name ``<|endoftext|>`` as their unk token, so
    their EOS has the unk id and is still a token. The vocabulary is read only when the id is the unk id.
    """
    found = tokenizer.convert_tokens_to_ids(token)
    if found is not None and (found != tokenizer.unk_token_id or token == tokenizer.unk_token):
        return int(found)
    vocab = {**tokenizer.get_vocab(), **tokenizer.get_added_vocab()}
    return int(vocab[token]) if token in vocab else None


def _tokenize_capped(
    tokenizer, strings: Sequence[str], max_length: int, *, strip_eos: int | None = None
) -> list[tuple[list[int], bool]]:
    """Tokenises with special tokens; only overflowing strings are re-tokenised with truncation.

    With ``strip_eos`` (an EOS id) a trailing EOS added by the tokenizer is removed first and truncation is
    manual (keep the first ``max_length`` ids), because the caller appends its own EOS afterwards.
    """
    if not strings:
        return []
    full = tokenizer(list(strings), add_special_tokens=True, truncation=False)["input_ids"]
    out: list[tuple[list[int], bool]] = []
    for string, ids in zip(strings, full, strict=True):
        if strip_eos is not None:
            if ids and ids[-1] == strip_eos:
                ids = ids[:-1]
            out.append((ids[:max_length], len(ids) > max_length))
        elif len(ids) > max_length:
            cut = tokenizer(string, add_special_tokens=True, truncation=True, max_length=max_length)
            out.append((cut["input_ids"], True))
        else:
            out.append((ids, False))
    return out
