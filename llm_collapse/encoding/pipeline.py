"""The road from texts to vectors, top to bottom: plan the forwards, run them in batches, yield the vectors.

1. `plan.plan_forwards`: tokenise, group prefixes, plan length-sorted batches.
2. `forward.embed_batch`: each batch through the backend, pooled and normalised.
3. `prefix.shared_rows`: the texts read from a batch's forwards besides its own inputs (prefix sharing).

The cache wraps this road (`llm_collapse.encoding.cached`); `Embedder.encode` and `Embedder.iter_batches`
are this module's `encode` and `iter_batches`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from llm_collapse.encoding.forward import EmbeddedBatch, embed_batch
from llm_collapse.encoding.plan import plan_forwards
from llm_collapse.encoding.prefix import shared_rows
from llm_collapse.encoding.texts import as_text_list
from llm_collapse.encoding.tokens import observe
from llm_collapse.utils import progress

logger = logging.getLogger(__name__)


def iter_batches(
    embedder, texts: Sequence[str], *, show_progress_bar: bool | None = None, **options
) -> Iterator[EmbeddedBatch]:
    """Runs ``texts`` through ``embedder`` in length-sorted batches and yields each with its vectors (and
    hidden states if asked); ``options`` are `plan_forwards`'s, ``show_progress_bar`` `Embedder.iter_batches`'s."""
    texts = texts if isinstance(texts, list) else as_text_list(texts)  # indexed below (the ETA's characters)
    plan = plan_forwards(embedder, texts, **options)
    if show_progress_bar is None:  # never in a redirected log, nor under a run's own display
        show_progress_bar = (
            len(plan.batches) > 1 and logger.isEnabledFor(logging.INFO) and progress.batch_bars()
        )
    label = (
        embedder.name if embedder.interventions == "base" else f"{embedder.name} [{embedder.interventions}]"
    )
    started, tokens = time.perf_counter(), 0
    with tqdm(total=len(plan.encoded), desc=label, unit="text", disable=not show_progress_bar) as bar:
        for indices in plan.batches:
            items = [plan.encoded[i] for i in indices]
            batch, states = embed_batch(
                embedder, indices, items, output_hidden_states=plan.output_hidden_states
            )
            if embedder.token_observers:  # `Embedder.observe_tokens`: the states this forward pooled
                observe(embedder.token_observers, texts, indices, plan.groups, plan.encoded, states,
                        padding_side=embedder.padding_side)  # fmt: skip
            rows = [batch]
            if plan.groups is not None:
                rows = list(
                    shared_rows(
                        batch,
                        states,
                        plan.groups,
                        plan.encoded,
                        padding_side=embedder.padding_side,
                        pooling=embedder.spec.pooling,
                        max_tokens_per_batch=embedder.max_tokens_per_batch,
                    )
                )
            del states  # the next forward must not run beside this one's states (a 32k text's are large)
            # One update per forward: a long forward hands its rows on one at a time, and tqdm refreshes only
            # the first of those quick updates, so the bar showed 1 text per forward (ETA ~10x long).
            tokens += int(batch.attention_mask.sum())
            bar.set_postfix_str(
                f"{tokens / max(time.perf_counter() - started, 1e-9):,.0f} tok/s", refresh=False
            )
            embedded = [len(texts[i]) for row in rows for i in row.indices]  # characters: the ETA's work
            bar.update(len(embedded))
            progress.advance(len(embedded), embedded)
            yield from rows


def encode(embedder, texts: Sequence[str], **options) -> np.ndarray:
    """(n, d) float32 unit vectors of ``texts``, in input order (``options`` as in `iter_batches`, without
    hidden states)."""
    if "output_hidden_states" in options:
        raise TypeError("encode() returns embeddings only; use iter_batches(output_hidden_states=True)")
    texts = as_text_list(texts)
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for batch in iter_batches(embedder, texts, **options):
        out[batch.indices] = batch.embeddings.numpy()
    return out
