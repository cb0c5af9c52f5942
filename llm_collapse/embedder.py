"""`Embedder`: texts in, L2-normalised float32 embeddings out, in input order.

One forward pass serves both the embeddings and, when asked, every layer's token states
(`Embedder.iter_batches(..., output_hidden_states=True)`), so analyses of hidden states see exactly the
inputs the embeddings came from.

Without hidden states, a text whose model input is a token prefix of another's (a duplicate included) is
read from that one forward where this is exact (`llm_collapse.prefix`); ``share_prefixes`` turns it off.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from llm_collapse.adapters.inputs import KINDS, EncodedText, Kind
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.backends.base import Backend
from llm_collapse.batching import MAX_PADDING, plan_batches
from llm_collapse.interventions import (
    InterventionError,
    ModelContext,
    NotApplicable,
    Stack,
    parse_interventions,
)
from llm_collapse.interventions.base import InputEmbedding
from llm_collapse.pooling import pool
from llm_collapse.prefix import PrefixSharing, pool_prefixes, prefix_sharing, sharing_groups
from llm_collapse.utils import progress

logger = logging.getLogger(__name__)

PADDING_SIDES: tuple[str, ...] = ("right", "left")


@dataclass
class EmbeddedBatch:
    """One forward pass.

    Attributes:
        indices: Positions of these texts in the input list.
        embeddings: (B, H) float32, L2-normalised.
        encoded: The model inputs, one per text.
        attention_mask: (B, L) 1 for real tokens.
        pool_mask: (B, L) 1 where pooling read.
        hidden_states: Per-layer (B, L, H) token states (embedding output first) when requested.
    """

    indices: list[int]
    embeddings: torch.Tensor
    encoded: list[EncodedText]
    attention_mask: torch.Tensor
    pool_mask: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class Embedder:
    """A loaded embedder. Build it with `llm_collapse.load_embedder`.

    Args:
        spec: The adapter spec.
        backend: The loaded backend (`llm_collapse.backends.base.Backend`: ``hf`` or ``vllm``).
        max_length: Token cap per text (per copy for echo); an active intervention may replace it while it is
            active (`token_cap`: LongEmbed's extensions of absolute positions read S x L0 tokens).
        batch_size: Default most texts per batch.
        max_tokens_per_batch: Most padded tokens per batch (length-sorted batching).

    Attributes:
        padding_side: ``"right"`` or ``"left"``.
        share_prefixes: Default of ``share_prefixes`` in `encode` / `iter_batches` (True).
        max_padding: Most padding per text in a batch, as a fraction of its longest text
            (`llm_collapse.batching.MAX_PADDING`; None: only the token budget limits batches).
    """

    def __init__(
        self,
        spec: EmbedderSpec,
        backend: Backend,
        *,
        max_length: int,
        batch_size: int = 32,
        max_tokens_per_batch: int = 16384,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.max_length = max_length
        self.batch_size = check_count("batch_size", batch_size)
        self.max_tokens_per_batch = check_count("max_tokens_per_batch", max_tokens_per_batch)
        self.padding_side = "right"
        self.share_prefixes = True
        self.max_padding = MAX_PADDING
        self._blocks: list[InterventionBlock] = []
        self._persistent = contextlib.ExitStack()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def model(self) -> torch.nn.Module:
        """The backend's in-process torch module; AttributeError for a backend without one (vllm)."""
        model = self.backend.torch_model
        if model is None:
            raise AttributeError(
                f"backend={self.backend.name!r} runs the model outside this process: there is no in-process "
                "torch module (use backend='hf' for hidden states, attention weights or module hooks)"
            )
        return model

    @property
    def tokenizer(self):
        return self.backend.tokenizer

    @property
    def dim(self) -> int:
        return self.backend.hidden_size

    @property
    def active_interventions(self) -> tuple:
        """The interventions currently applied, in the order they were applied (`Intervention` objects)."""
        return tuple(p for stack in self._active for p in stack.parts)

    @property
    def _active(self) -> list[Stack]:
        """The stacks of the open `intervene` blocks, innermost last."""
        return [block.stack for block in self._blocks]

    @property
    def interventions(self) -> str:
        """Slug of the interventions currently applied (``"base"`` when none)."""
        return Stack(list(self.active_interventions)).slug

    @property
    def token_cap(self) -> int:
        """Tokens per text now: `max_length`, or the cap of an active intervention that reads longer texts
        (`Intervention.token_cap`: LongEmbed's extensions of absolute positions, S x L0)."""
        config, context = self.backend.config, self.model_context
        caps = [c for p in self.active_interventions if (c := p.token_cap(config, context)) is not None]
        return max(caps, default=self.max_length)

    @property
    def model_context(self) -> ModelContext:
        """What interventions are told about the model (its name, the trained length they default to)."""
        return ModelContext(name=self.name, trained_length=self.spec.trained_length)

    def prefix_sharing(self, kind: Kind = "document") -> PrefixSharing:
        """Whether, and up to which input length, prefixes of one input can be read from its forward here
        (`llm_collapse.prefix.prefix_sharing` of this spec, model, backend and the active interventions)."""
        backend = self.backend
        refusal = f"backend {backend.name!r} pools itself" if backend.returns_pooled else backend.mixes_rows
        return prefix_sharing(
            self.spec,
            backend.torch_model,
            self.tokenizer,
            self.active_interventions,
            self.model_context,
            kind=kind,
            backend_reason=refusal,
        )

    def intervene(self, interventions) -> InterventionBlock:
        """Applies interventions (a spec such as ``"tempscale:0.8+ntk:1e5"``, objects, or a list) for the
        ``with`` block, which yields the parsed `Stack`; the model is restored exactly afterwards.

        Blocks nest, and the model always runs exactly the interventions of the open blocks, applied in the
        order they were entered: leaving a block that is not the innermost (a block entered and exited by
        hand, a generator closed late, `clear_interventions` inside a ``with``) undoes the blocks entered
        after it, then itself, and applies those again on the restored model. The returned block may be
        entered again once exited, never while it is open (`InterventionBlock`).
        """
        return InterventionBlock(self, parse_interventions(interventions))

    def _open(self, block: InterventionBlock) -> None:
        """Enters ``block`` on the backend, innermost (`InterventionBlock.__enter__`)."""
        if any(open_block is block for open_block in self._blocks):
            raise InterventionError(
                f"intervene({block.stack.slug!r}) is already open on {self.name}; exit it before entering it "
                "again, or open a new intervene() block to stack it"
            )
        Stack([*self.active_interventions, *block.stack.parts])  # one RoPE / window change
        block.applied, block.dropped = self._applied(block.stack), False
        self._blocks.append(block)

    def _close(self, block: InterventionBlock, exc_info: tuple) -> None:
        """Undoes ``block``, exactly whatever the exit order (`InterventionBlock.__exit__`)."""
        index = next((i for i, open_block in enumerate(self._blocks) if open_block is block), None)
        if index is None:
            if block.dropped:  # already undone when an earlier exit could not apply it again (raised there)
                block.dropped = False
                return
            raise InterventionError(
                f"intervene({block.stack.slug!r}) is not open on {self.name}; "
                "exit a block once, after entering it"
            )
        later = self._blocks[index + 1 :]
        del self._blocks[index:]
        for open_block in later:  # until applied again below
            open_block.dropped = True
        try:
            for open_block in reversed(later):  # innermost first, so each restores what it found
                open_block.applied.__exit__(None, None, None)
                open_block.applied = None
        finally:
            applied, block.applied = block.applied, None
            applied.__exit__(*exc_info)
        if later:
            logger.info(
                "%s: left intervene(%r) before the blocks entered after it; applied %s again on the restored "
                "model",
                self.name,
                block.stack.slug,
                " and ".join(repr(b.stack.slug) for b in later),
            )
        for position, open_block in enumerate(later):
            try:
                open_block.applied = self._applied(open_block.stack)
            except InterventionError as err:
                lost = later[position:]
                raise InterventionError(
                    f"leaving intervene({block.stack.slug!r}) before the blocks entered after it: could not "
                    f"apply {' and '.join(repr(b.stack.slug) for b in lost)} again ({err}); "
                    "they are no longer applied"
                ) from err
            open_block.dropped = False
            self._blocks.append(open_block)

    def _applied(self, stack: Stack) -> contextlib.AbstractContextManager:
        """The backend's context manager for ``stack``, entered."""
        applied = self.backend.intervene(stack, self.model_context)
        applied.__enter__()
        return applied

    def apply_interventions(self, interventions) -> None:
        """Applies interventions until `clear_interventions` (what ``load_embedder(interventions=...)`` does)."""
        self._persistent.enter_context(self.intervene(interventions))

    def clear_interventions(self) -> None:
        """Undoes every intervention applied with `apply_interventions`."""
        self._persistent.close()
        self._persistent = contextlib.ExitStack()

    def tokenize(
        self, texts: Sequence[str], *, kind: Kind = "document", instruction: str | None = None
    ) -> list[EncodedText]:
        """The exact model inputs (token ids, pool mask, truncation flag) for ``texts``."""
        texts = as_text_list(texts)
        instruction = self.resolve_instruction(kind, instruction)
        return self.spec.input_format.encode(
            self.tokenizer, texts, kind=kind, instruction=instruction, max_length=self.token_cap
        )

    def encode(self, texts: Sequence[str], **options) -> np.ndarray:
        """Embeds ``texts``: (n, d) float32 unit vectors, in input order.

        ``options`` are those of `iter_batches` (``kind``, ``instruction``, ``batch_size``,
        ``show_progress_bar``, ``share_prefixes``), documented there once; hidden states are `iter_batches`'s.
        """
        if "output_hidden_states" in options:
            raise TypeError("encode() returns embeddings only; use iter_batches(output_hidden_states=True)")
        texts = as_text_list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch in self.iter_batches(texts, **options):
            out[batch.indices] = batch.embeddings.numpy()
        return out

    def iter_batches(
        self,
        texts: Sequence[str],
        *,
        kind: Kind = "document",
        instruction: str | None = None,
        batch_size: int | None = None,
        output_hidden_states: bool = False,
        show_progress_bar: bool | None = None,
        share_prefixes: bool | None = None,
    ) -> Iterator[EmbeddedBatch]:
        """Runs length-sorted batches and yields each with its embeddings (and hidden states if asked).

        With prefix sharing (``share_prefixes``; never with hidden states; only where `prefix_sharing` allows
        it, so never for a backend that pools itself, and some input is a prefix of another) batches are
        planned over the longest inputs only, and each yield holds every text read from its forwards: rows of
        ``attention_mask`` / ``pool_mask`` then mark each text's positions in its root's row (left padding
        included), and a yield has at most ``max(batch, max_tokens_per_batch // width)`` rows. A backend whose
        forward mixes rows (`Backend.mixes_rows`: bitsandbytes int8) runs one text per forward.

        Args:
            texts: A list of strings.
            kind: ``"query"`` (instruction template) or ``"document"`` (bare, as on the model cards).
            instruction: Task instruction for queries; defaults to the card's example instruction.
            batch_size: Most texts per batch (the token budget may make batches smaller).
            output_hidden_states: Also every layer's token states (`EmbeddedBatch.hidden_states`).
            show_progress_bar: Defaults to on when logging is at INFO, there is more than one batch and
                stderr is a terminal, unless a run's own display is open (`llm_collapse.utils.progress`).
            share_prefixes: Embed texts whose input is a token prefix of another's from that forward, where
                exact; None means ``self.share_prefixes``.
        """
        if batch_size is not None:
            check_count("batch_size", batch_size)
        pooled_backend = self.backend.returns_pooled
        own = next((p for p in self.active_interventions if isinstance(p, InputEmbedding)), None)  # PCW
        if output_hidden_states and own is not None:
            raise NotApplicable(f"{own.slug} embeds a text from several forwards: it has no hidden states")
        if output_hidden_states and pooled_backend:
            raise ValueError(
                f"backend={self.backend.name!r} returns pooled embeddings only; use backend='hf' for hidden states"
            )
        encoded = self.tokenize(texts, kind=kind, instruction=instruction)
        if n_truncated := sum(e.truncated for e in encoded):
            logger.warning(
                "%s: %d of %d texts truncated to max_length=%d tokens",
                self.name,
                n_truncated,
                len(encoded),
                self.token_cap,
            )
        if n_empty := sum(not any(e.pool_mask) for e in encoded):
            logger.warning(
                "%s: %d texts have no token to pool (the prompt fills max_length); their vectors are zero",
                self.name,
                n_empty,
            )
        share = self.share_prefixes if share_prefixes is None else share_prefixes
        if self.backend.mixes_rows:  # one text per forward, so each vector is the text's own
            batch_size, share = 1, False
        groups = None
        if share and not output_hidden_states and len(encoded) > 1:
            groups = sharing_groups(self, encoded, kind=kind)
        roots = sorted(groups) if groups else list(range(len(encoded)))  # the inputs that are run
        batches = plan_batches(
            [len(encoded[r]) for r in roots],
            max_batch_size=batch_size or self.batch_size,
            max_tokens=self.max_tokens_per_batch,
            max_padding=self.max_padding,
        )
        if show_progress_bar is None:  # never in a redirected log, nor under a run's own display
            show_progress_bar = (
                len(batches) > 1 and logger.isEnabledFor(logging.INFO) and progress.batch_bars()
            )
        label = self.name if self.interventions == "base" else f"{self.name} [{self.interventions}]"
        started, tokens = time.perf_counter(), 0
        with tqdm(total=len(encoded), desc=label, unit="text", disable=not show_progress_bar) as bar:
            for batch in batches:
                indices = [roots[b] for b in batch]
                items = [encoded[i] for i in indices]
                input_ids, attention_mask, pool_mask = self.collate(items)
                if own is not None:
                    pooled = own.embed_inputs(self, items)
                    states = hidden_states = None
                elif pooled_backend:  # the backend pools our EncodedTexts itself, over their pool masks
                    pooled = self.backend.embed(items, pooling=self.spec.pooling)
                    states = hidden_states = None
                else:
                    out = self.backend.forward(
                        input_ids, attention_mask, output_hidden_states=output_hidden_states
                    )
                    states = out.last_hidden_state
                    pooled = pool(states, pool_mask.to(states.device), self.spec.pooling)
                    hidden_states = out.hidden_states
                embeddings = torch.nn.functional.normalize(pooled, p=2, dim=-1).cpu()
                if not torch.isfinite(embeddings).all():
                    raise FloatingPointError(
                        f"{self.name} [{self.interventions}]: the forward pass gave NaN/inf embeddings; "
                        "try dtype='fp32' (fp16 overflows) or milder intervention parameters"
                    )
                tokens += int(attention_mask.sum())
                bar.set_postfix_str(
                    f"{tokens / max(time.perf_counter() - started, 1e-9):,.0f} tok/s", refresh=False
                )
                if groups is None:
                    bar.update(len(indices))
                    progress.advance(len(indices))
                    yield EmbeddedBatch(indices, embeddings, items, attention_mask, pool_mask, hidden_states)
                    continue
                # One update per forward: a long forward hands its rows on one at a time, and tqdm refreshes
                # only the first of those quick updates, so the bar showed 1 text per forward (ETA ~10x long).
                rows = list(self._shared_rows(indices, groups, encoded, states, embeddings, attention_mask))
                bar.update(sum(len(shared.indices) for shared in rows))
                progress.advance(sum(len(shared.indices) for shared in rows))
                yield from rows

    def _shared_rows(
        self,
        roots: list[int],
        groups: dict[int, list[int]],
        encoded: list[EncodedText],
        states: torch.Tensor,
        embeddings: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> Iterator[EmbeddedBatch]:
        """Every text read from one forward of ``roots``: a root and its equal inputs take the root's row,
        shorter members are pooled from it (`llm_collapse.prefix.pool_prefixes`)."""
        width = attention_mask.shape[1]
        indices: list[int] = []
        vectors: list[torch.Tensor] = []
        spans: list[tuple[int, EncodedText]] = []  # (offset, input) of each row
        for row, root in enumerate(roots):
            offset = width - len(encoded[root]) if self.padding_side == "left" else 0
            shorter = [m for m in groups[root] if len(encoded[m]) < len(encoded[root])]
            pooled = {}
            if shorter:
                rows = pool_prefixes(states[row], offset, [encoded[m] for m in shorter], self.spec.pooling)
                pooled = dict(zip(shorter, rows, strict=True))
            for member in groups[root]:
                indices.append(member)
                vectors.append(pooled.get(member, embeddings[row]))
                spans.append((offset, encoded[member]))
        step = max(len(roots), self.max_tokens_per_batch // max(width, 1))
        for start in range(0, len(indices), step):
            chunk = slice(start, start + step)
            attention = torch.zeros((len(spans[chunk]), width), dtype=torch.long)
            pool_mask = torch.zeros_like(attention)
            for row, (offset, item) in enumerate(spans[chunk]):
                attention[row, offset : offset + len(item)] = 1
                pool_mask[row, offset : offset + len(item)] = torch.tensor(item.pool_mask)
            yield EmbeddedBatch(
                indices[chunk],
                torch.stack(vectors[chunk]),
                [item for _, item in spans[chunk]],
                attention,
                pool_mask,
            )

    def describe(self) -> dict:
        """Everything that changes a vector, as plain data (for run metadata and cache keys)."""
        config = self.backend.config.get_text_config()
        return {
            **self.spec.describe(),
            **self.backend.describe(),
            "max_length": self.token_cap,
            "interventions": self.interventions,
            "intervention_params": [p.describe() for p in self.active_interventions],
            "sliding_window": getattr(config, "sliding_window", None),
            "rope_parameters": getattr(config, "rope_parameters", None),
        }

    def resolve_instruction(self, kind: str, instruction: str | None) -> str | None:
        """The instruction a text of ``kind`` is embedded with (the card's default for ``None`` queries,
        always None for documents); raises for an instruction given to a document."""
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not allowed; use one of {KINDS}")
        if instruction is not None and not isinstance(instruction, str):
            raise TypeError(f"instruction must be a string, got {type(instruction).__name__}")
        if kind == "document":
            if instruction is not None:
                raise ValueError(
                    "instruction applies to kind='query' only (documents are embedded bare on these model "
                    "cards); for symmetric tasks encode both sides with kind='query'"
                )
            return None
        if instruction is not None and not self.spec.input_format.takes_instruction:
            raise ValueError(f"{self.name!r} takes no instruction; call encode without instruction=")
        return instruction if instruction is not None else self.spec.default_instruction

    def collate(self, items: list[EncodedText]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pads to the longest item: (B, L) input ids, attention mask and pool mask."""
        if self.padding_side not in PADDING_SIDES:
            raise ValueError(f"padding_side={self.padding_side!r}; allowed: {PADDING_SIDES}")
        pad_id = self.tokenizer.pad_token_id
        pad_id = self.tokenizer.eos_token_id if pad_id is None else pad_id
        width = max(len(e) for e in items)
        ids = torch.full((len(items), width), pad_id or 0, dtype=torch.long)
        attention = torch.zeros((len(items), width), dtype=torch.long)
        pool_mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            span = slice(0, len(item)) if self.padding_side == "right" else slice(width - len(item), width)
            ids[row, span] = torch.tensor(item.input_ids)
            attention[row, span] = 1
            pool_mask[row, span] = torch.tensor(item.pool_mask)
        return ids, attention, pool_mask


class InterventionBlock:
    """What `Embedder.intervene` returns: a context manager that applies ``stack`` to the embedder's model.

    Reusable (enter it again after it exited) but not re-entrant: entering it while it is open raises
    `InterventionError`, as does exiting it when it is not open. Exiting it out of order restores the model
    exactly (`Embedder.intervene`).

    Attributes:
        embedder: The embedder it acts on.
        stack: The parsed interventions (what ``with ... as stack`` gives).
        applied: The backend's entered context manager while the block is open, else None.
        dropped: True while an out-of-order exit has undone this open block and not yet applied it again.
    """

    def __init__(self, embedder: Embedder, stack: Stack) -> None:
        self.embedder = embedder
        self.stack = stack
        self.applied: contextlib.AbstractContextManager | None = None
        self.dropped = False

    def __enter__(self) -> Stack:
        self.embedder._open(self)
        return self.stack

    def __exit__(self, *exc_info) -> bool:
        self.embedder._close(self, exc_info)
        return False

    def __repr__(self) -> str:
        return f"InterventionBlock({self.stack.slug!r}, open={self.applied is not None})"


def check_count(name: str, value) -> int:
    """A positive integer argument (``batch_size``...); bools, floats and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def as_text_list(texts: Iterable[str]) -> list[str]:
    """Accepts any iterable of strings except a bare string; names the index of a non-string or of a text that is
    not valid Unicode (a lone surrogate)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(
            f"texts must be a list of strings, got {type(texts).__name__}; wrap a single text in a list"
        )
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str")
        try:
            text.encode("utf-8")
        except (
            UnicodeEncodeError
        ) as err:  # a lone surrogate: no tokenizer can read it (it fails deep in Rust)
            raise ValueError(
                f"texts[{index}] holds a lone surrogate {text[err.start]!r} at position {err.start}, which is not "
                "valid Unicode; decode its bytes with errors='replace' or drop the character"
            ) from None
    return texts
