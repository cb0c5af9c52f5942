"""``pcw:S[:L0]``: LongEmbed's chunked average (PCW-style) for absolute-position encoders (BERT).

A text longer than L0 tokens is cut into chunks that each fill one L0-token input, every chunk is embedded by a
forward of its own with the model's pooling, and the text's vector is the mean of the chunk vectors, L2-normalised.
Texts are read up to S x L0 tokens (the token cap; ``base`` truncates at L0). Texts of at most L0 tokens are one
chunk: their own input, unchanged.

What LongEmbed did (dwzhu-pku/LongEmbed at 033dc4a, ``src/``):

- ``utils.get_chunked_docs``: tokenise the document without special tokens, truncated to ``MAX_TOKEN_NUM - 2``;
  chunks of ``CHUNK_SIZE - 2`` tokens (room for [CLS] and [SEP]) without overlap, except that the last chunk is
  the final ``CHUNK_SIZE - 2`` tokens, so it is full (it overlaps the one before); each chunk decoded to text.
- ``encoder_model.RetrievalModel.encode_corpus``: the chunk texts are encoded like documents (special tokens
  added again), pooled without normalising (``_do_encode`` skips it in chunk mode), averaged per document
  (``encoded_embeds[st:ed].mean``) and then L2-normalised. Queries are never chunked.

Where ours differs, and why:

- Chunks are cut from the model input's token ids and given the tokenizer's own special tokens around them,
  instead of decoded to text and tokenised again: decoding a WordPiece chunk that starts inside a word yields
  ``##piece``, which re-tokenises as ``#``, ``#``, ``piece``, so a re-encoded chunk can change and outgrow L0 (and
  be truncated). Ids give every chunk exactly the tokens of its span, and the cost is known in advance.
- Every input longer than L0 is chunked, queries included (LongEmbed's queries were short, so never long).
- Only inputs of the form [special tokens] text [special tokens] are chunked (minilm's): a template or an EOS
  policy of the adapter is NotApplicable, as a chunk would have to repeat it.
- Pooling: the adapter's (minilm: mean over every token, [CLS] and [SEP] included, as sentence-transformers
  pools). The minilm card normalises each vector after pooling; we follow LongEmbed, which averaged the
  unnormalised chunk vectors and normalised the mean, since that is the method being reproduced (a chunk with a
  larger pooled norm weighs more).

Mechanism: the model is not touched. While ``pcw`` is active the encoding pipeline asks
`ChunkedAverage.split_inputs` (an `InputEmbedding`) for each input's chunks, runs them in length-sorted batches
under the embedder's token budget, averages each input's pooled chunks and normalises as always
(`llm_collapse.encoding.forward`). No prefix sharing (a text's
vector is no function of its prefix's states), and no hidden states (there is no forward of the whole text).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from torch import nn

from llm_collapse.adapters.inputs import EncodedText
from llm_collapse.interventions.absolute import AbsoluteExtension
from llm_collapse.interventions.base import InputEmbedding, ModelContext, NotApplicable

logger = logging.getLogger(__name__)

__all__ = ["ChunkedAverage", "chunk_spans", "special_frame"]


def chunk_spans(tokens: int, size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of LongEmbed's chunks of ``tokens`` tokens: ``size`` each from the start, the last one
    the final ``size`` tokens (one span, the whole, when ``tokens <= size``)."""
    if tokens <= size:
        return [(0, tokens)]
    return [(start, start + size) for start in range(0, tokens - size, size)] + [(tokens - size, tokens)]


def special_frame(tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The special token ids the tokenizer puts before and after a text (BERT: ([CLS],), ([SEP],))."""
    probe = "chunk"
    bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
    framed = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for start in range(len(framed) - len(bare) + 1):
        if framed[start : start + len(bare)] == bare:
            return tuple(framed[:start]), tuple(framed[start + len(bare) :])
    raise NotApplicable("pcw: the tokenizer's special tokens do not frame the text; cannot chunk its inputs")


class ChunkedAverage(AbsoluteExtension, InputEmbedding):
    """``pcw:S[:L0]``: the mean of L0-token chunk embeddings, normalised (module docstring).

    Args:
        factor: S; texts are read up to S x L0 tokens (LongEmbed's ``MAX_TOKEN_NUM``).
        base_length: L0, the chunk input length (LongEmbed's ``CHUNK_SIZE``); None: the trained length.
    """

    method = "pcw"

    def params(self) -> dict:
        return {
            **super().params(),
            "chunks": "L0 tokens with the special tokens, no overlap but the last (the final tokens)",
            "vector": "mean of the unnormalised pooled chunk vectors, L2-normalised",
        }

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        return 0  # embedded from chunk forwards, never read from another input's states

    def forward_lengths(self, tokens: int, config, context: ModelContext) -> list[int]:
        """Chunks of L0 tokens for an input longer than L0 (two special tokens each, as on BERT)."""
        base = self.base(config, context)
        if tokens <= base:
            return [tokens]
        return [base] * len(chunk_spans(tokens - 2, base - 2))

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        # BERT-style absolute positions only (as LongEmbed's other APE methods); the model is not changed
        self.table(model, context)
        yield

    def split_inputs(self, embedder, items: list[EncodedText]) -> tuple[list[EncodedText], list[int]]:
        base = self.base(embedder.backend.config, embedder.model_context)
        head, tail = special_frame(embedder.tokenizer)
        size = base - len(head) - len(tail)
        if size < 1:
            raise NotApplicable(f"{self.slug}: L0={base} leaves no room for text between the special tokens")
        pieces: list[EncodedText] = []
        owners: list[int] = []
        for index, item in enumerate(items):
            ids = item.input_ids
            framed = (
                ids[: len(head)] == head
                and ids[len(ids) - len(tail) :] == tail
                and len(ids) >= len(head + tail)
            )
            if not framed or not all(item.pool_mask):
                raise NotApplicable(
                    f"{self.slug}: {embedder.name}'s inputs are not [special tokens] text [special tokens] with "
                    "every token pooled (a template, EOS policy or pool span), so a chunk cannot stand for its span"
                )
            text = ids[len(head) : len(ids) - len(tail)]
            for start, stop in chunk_spans(len(text), size):
                chunk = (*head, *text[start:stop], *tail)
                pieces.append(item if len(chunk) == len(ids) else EncodedText(chunk, (1,) * len(chunk)))
                owners.append(index)
        logger.debug("%s: %d inputs in %d chunk forwards", self.slug, len(items), len(pieces))
        return pieces, owners
