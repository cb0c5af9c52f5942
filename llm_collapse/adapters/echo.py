"""Echo embeddings (Springer et al., arXiv 2402.15449): the decoder reads the text twice, pooling the repeat.

Reference semantics (jakespringer/echo-embeddings `EchoParser` / `EchoPooling`), kept exactly:

- A template is split on ``{...}`` braces. Literal text between braces is tokenised once; each brace piece
  gets its ``%%var%%`` placeholders filled and is tokenised *separately* per text; the id lists are
  concatenated. No joint tokenisation, so piece boundaries can tokenise differently from the joined string.
- Pieces are tokenised with no special tokens added (the reference loads the tokenizer with
  ``add_bos_token=False, add_eos_token=False``); BOS and EOS are written literally in the template.
- A brace starting with ``!`` is context only (pool mask 0); other braces are pooled (mask 1); literals 0.
  So the pooled span is the second copy of the text plus the EOS, which sits in its own brace so that it
  survives truncation.
- ``max_length`` applies *per piece*: each copy of the text is truncated on its own, so a document costs
  about ``2 * max_length`` positions plus the template.

Gotcha: the reference writes Mistral's ``<s>``/``</s>``; we write ``{bos}``/``{eos}`` and substitute the
tokenizer's own tokens, so one template serves any causal decoder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llm_collapse.adapters.inputs import EncodedText, Kind

# The official templates (echo-embeddings README / example.py), with BOS/EOS made tokenizer-neutral.
ECHO_QUERY_TEMPLATE = "{bos}Instruct:{!%%prompt%%,}\nQuery:{!%%text%%}\nQuery again:{%%text%%}{{eos}}"
ECHO_DOCUMENT_TEMPLATE = "{bos}Document:{!%%text%%}\nDocument again:{%%text%%}{{eos}}"
ECHO_DEFAULT_INSTRUCTION = "Retrieve passages that answer the question"

_BRACE = re.compile(r"\{(.|\n|\r|\t)+?\}")


@dataclass(frozen=True)
class _Piece:
    literal: str | None = None  # template text between braces, tokenised once
    variable: str | None = None  # brace content without braces and without a leading "!"
    pooled: bool = False


def parse_echo_template(template: str) -> list[_Piece]:
    """Splits an echo template into literal and brace pieces (reference `_parse_template`)."""
    pieces: list[_Piece] = []
    end = 0
    for match in _BRACE.finditer(template):
        if match.start() > end:
            pieces.append(_Piece(literal=template[end : match.start()]))
        body = match.group()[1:-1]
        pieces.append(_Piece(variable=body.removeprefix("!"), pooled=not body.startswith("!")))
        end = match.end()
    if end < len(template):
        pieces.append(_Piece(literal=template[end:]))
    if not any(p.pooled for p in pieces):
        raise ValueError(f"echo template {template!r} has no pooled brace piece (a brace without '!')")
    return pieces


@dataclass(frozen=True)
class EchoFormat:
    """Echo prompting for any causal decoder.

    Attributes:
        query_template: Template with ``%%prompt%%`` (the instruction) and ``%%text%%``.
        document_template: Template with ``%%text%%``.
    """

    query_template: str = ECHO_QUERY_TEMPLATE
    document_template: str = ECHO_DOCUMENT_TEMPLATE
    takes_instruction: bool = True

    @property
    def text_copies(self) -> int:
        """How many copies of a document's text its input holds (echo: 2; the prompt-only control: 1)."""
        pieces = parse_echo_template(self.document_template)
        return sum(1 for p in pieces if p.variable is not None and "%%text%%" in p.variable)

    def encode(
        self, tokenizer, texts: Sequence[str], *, kind: Kind, instruction: str | None, max_length: int
    ) -> list[EncodedText]:
        template = self.query_template if kind == "query" else self.document_template
        # Substitute BOS/EOS before parsing: "{{eos}}" becomes the brace piece "{</s>}".
        template = template.replace("{bos}", tokenizer.bos_token or "").replace("{eos}", tokenizer.eos_token)
        pieces = parse_echo_template(template)
        values = {"prompt": instruction or ECHO_DEFAULT_INSTRUCTION}

        def ids_of(strings: list[str]) -> list[list[int]]:
            return tokenizer(strings, add_special_tokens=False)["input_ids"] if strings else []

        # (n_pieces, n_texts) token lists; a piece with no %%text%% is the same for every text.
        columns: list[list[list[int]]] = []
        for piece in pieces:
            if piece.literal is not None:
                columns.append(ids_of([piece.literal]) * len(texts))
            elif "%%text%%" in piece.variable:
                filled = [_fill(piece.variable, {**values, "text": t}) for t in texts]
                columns.append(ids_of(filled))
            else:
                columns.append(ids_of([_fill(piece.variable, values)]) * len(texts))
        out = []
        for i in range(len(texts)):
            ids: list[int] = []
            mask: list[int] = []
            truncated = False
            for piece, column in zip(pieces, columns, strict=True):
                piece_ids = column[i]
                if piece.variable is not None and "%%text%%" in piece.variable:
                    truncated |= len(piece_ids) > max_length  # only cutting the text counts as truncation
                piece_ids = piece_ids[:max_length]  # every piece, literals too, as in the reference
                ids += piece_ids
                mask += [int(piece.pooled)] * len(piece_ids)
            out.append(EncodedText(tuple(ids), tuple(mask), truncated))
        return out

    def describe(self) -> dict:
        return {
            "type": "echo",
            "query_template": self.query_template,
            "document_template": self.document_template,
        }


def _fill(body: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        body = body.replace(f"%%{key}%%", value)
    return body
