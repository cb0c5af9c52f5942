"""Stage 1 of the road from texts to vectors: which forwards embed a list of texts.

The texts are tokenised exactly as the model reads them (`Embedder.tokenize`: template, special tokens,
truncation); texts whose input is a token prefix of another's are grouped under it where that is exact
(`llm_collapse.encoding.prefix`); batches are planned, length-sorted under the token budget, over the inputs
that are run (`llm_collapse.encoding.batching`). Nothing runs the model here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from llm_collapse.adapters.inputs import EncodedText, Kind
from llm_collapse.encoding.batching import plan_batches
from llm_collapse.encoding.prefix import sharing_groups
from llm_collapse.encoding.texts import check_count
from llm_collapse.interventions import NotApplicable

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForwardPlan:
    """The forwards that embed a list of texts.

    Attributes:
        encoded: Every text's model input, in input order.
        groups: ``{root: members}``: each member is read from its root's forward (`prefix.sharing_groups`);
            None when every input runs in its own row.
        batches: The inputs run together, as indices into ``encoded`` (roots only, when ``groups`` is set).
        batch_size: Most texts per batch, as planned.
        output_hidden_states: Whether the forwards also return every layer's token states.
    """

    encoded: list[EncodedText]
    groups: dict[int, list[int]] | None
    batches: list[list[int]]
    batch_size: int
    output_hidden_states: bool


def plan_forwards(
    embedder,
    texts: Sequence[str],
    *,
    kind: Kind = "document",
    instruction: str | None = None,
    batch_size: int | None = None,
    output_hidden_states: bool = False,
    share_prefixes: bool | None = None,
) -> ForwardPlan:
    """Tokenises ``texts`` for ``embedder`` and plans their forwards.

    Refuses hidden states where there is no forward of the whole text (an `InputEmbedding` such as PCW) or
    no token states (a backend that pools itself); logs truncated and empty inputs once per call. A backend
    whose forward mixes rows (`Backend.mixes_rows`: bitsandbytes int8) runs one text per forward.

    Args:
        embedder: The `Embedder`.
        texts: A list of strings.
        kind: ``"query"`` (instruction template) or ``"document"`` (bare, as on the model cards).
        instruction: Task instruction for queries; defaults to the card's example instruction.
        batch_size: Most texts per batch (the token budget may make batches smaller); None: the embedder's.
        output_hidden_states: Also every layer's token states (`EmbeddedBatch.hidden_states`).
        share_prefixes: Embed texts whose input is a token prefix of another's from that forward, where
            exact; None means ``embedder.share_prefixes``.
    """
    backend = embedder.backend
    if batch_size is not None:
        check_count("batch_size", batch_size)
    own = embedder.input_embedding
    if output_hidden_states and own is not None:
        raise NotApplicable(f"{own.slug} embeds a text from several forwards: it has no hidden states")
    if output_hidden_states and backend.returns_pooled:
        raise ValueError(
            f"backend={backend.name!r} returns pooled embeddings only; use backend='hf' for hidden states"
        )
    share = embedder.share_prefixes if share_prefixes is None else share_prefixes
    batch_size = batch_size or embedder.batch_size
    if backend.mixes_rows:  # one text per forward, so each vector is the text's own
        batch_size, share = 1, False
    encoded = embedder.tokenize(texts, kind=kind, instruction=instruction)
    _log_inputs(embedder.name, embedder.token_cap, encoded)
    groups = None
    if share and not output_hidden_states and len(encoded) > 1:
        groups = sharing_groups(embedder.name, embedder.prefix_sharing(kind), encoded)
    roots = sorted(groups) if groups else list(range(len(encoded)))  # the inputs that are run
    planned = plan_batches(
        [len(encoded[r]) for r in roots],
        max_batch_size=batch_size,
        max_tokens=embedder.max_tokens_per_batch,
        max_padding=embedder.max_padding,
    )
    batches = [[roots[b] for b in batch] for batch in planned]
    return ForwardPlan(encoded, groups, batches, batch_size, output_hidden_states)


def _log_inputs(name: str, token_cap: int, encoded: list[EncodedText]) -> None:
    if n_truncated := sum(e.truncated for e in encoded):
        logger.warning(
            "%s: %d of %d texts truncated to max_length=%d tokens", name, n_truncated, len(encoded), token_cap
        )
    if n_empty := sum(not any(e.pool_mask) for e in encoded):
        logger.warning(
            "%s: %d texts have no token to pool (the prompt fills max_length); their vectors are zero",
            name,
            n_empty,
        )
