"""`Embedder`: a loaded model with its card's input format and the interventions open on it.

It tokenises (`Embedder.tokenize`), says what changes a vector (`Embedder.describe`) and applies
interventions (`Embedder.intervene`); texts become vectors on the road of `llm_collapse.encoding`
(`Embedder.encode` and `Embedder.iter_batches` are `llm_collapse.encoding.pipeline`'s). One forward pass
serves both the embeddings and, when asked, every layer's token states, so analyses of hidden states see
exactly the inputs the embeddings came from. Without hidden states, a text whose model input is a token
prefix of another's is read from that one forward where this is exact (`llm_collapse.encoding.prefix`);
``share_prefixes`` turns it off.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from llm_collapse.adapters.inputs import KINDS, EncodedText, Kind
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.backends.base import Backend
from llm_collapse.encoding import pipeline
from llm_collapse.encoding.batching import MAX_PADDING
from llm_collapse.encoding.forward import EmbeddedBatch
from llm_collapse.encoding.prefix import PrefixSharing, prefix_sharing
from llm_collapse.encoding.texts import as_text_list, check_count
from llm_collapse.encoding.tokens import TokenObserver
from llm_collapse.interventions import InterventionError, ModelContext, Stack, parse_interventions
from llm_collapse.interventions.base import InputEmbedding

logger = logging.getLogger(__name__)


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
            (`llm_collapse.encoding.batching.MAX_PADDING`; None: only the token budget limits batches).
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
        self._observers: list[TokenObserver] = []

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
    def input_embedding(self) -> InputEmbedding | None:
        """The active intervention that embeds inputs from forwards of its own (PCW), if any."""
        return next((p for p in self.active_interventions if isinstance(p, InputEmbedding)), None)

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
        (`llm_collapse.encoding.prefix.prefix_sharing` of this spec, model, backend and the active interventions)."""
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

    @contextlib.contextmanager
    def observe_tokens(self, observer: TokenObserver) -> Iterator[None]:
        """While open, every text a forward reads is handed to ``observer(text, states, pool_mask)``: the last
        layer's states of its input positions, (n_input, d) on the model's device, and the positions its
        pooling reads, from the forward that makes its embedding (`llm_collapse.encoding.tokens`). Texts a cache
        serves run no forward and are not observed; a road without token states (vLLM, PCW) raises
        `NotApplicable` when a forward runs."""
        self._observers.append(observer)
        try:
            yield
        finally:
            self._observers.remove(observer)

    @property
    def token_observers(self) -> tuple[TokenObserver, ...]:
        """The observers open on this embedder (`observe_tokens`)."""
        return tuple(self._observers)

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
        """Embeds ``texts``: (n, d) float32 unit vectors, in input order (`llm_collapse.encoding.pipeline`).

        ``options`` are those of `iter_batches` but hidden states.
        """
        return pipeline.encode(self, texts, **options)

    def iter_batches(self, texts: Sequence[str], **options) -> Iterator[EmbeddedBatch]:
        """Runs length-sorted batches and yields each with its embeddings (and hidden states if asked).

        ``options``: ``kind``, ``instruction``, ``batch_size``, ``output_hidden_states`` and ``share_prefixes``,
        documented once on `llm_collapse.encoding.plan.plan_forwards`, and ``show_progress_bar`` (default: on
        when logging is at INFO, there is more than one batch and stderr is a terminal, unless a run's own
        display is open).

        With prefix sharing (never with hidden states; only where `prefix_sharing` allows it, so never for a
        backend that pools itself, and some input is a prefix of another) batches are planned over the longest
        inputs only, and each yield holds every text read from its forwards: rows of ``attention_mask`` /
        ``pool_mask`` then mark each text's positions in its root's row (left padding included), and a yield
        has at most ``max(batch, max_tokens_per_batch // width)`` rows. A backend whose forward mixes rows
        (`Backend.mixes_rows`: bitsandbytes int8) runs one text per forward.
        """
        return pipeline.iter_batches(self, texts, **options)

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
