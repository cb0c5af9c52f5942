"""`Backend`: the contract between a loaded model and `Embedder` (and everything that reads ``embedder.backend``).

Decisions:
- A `typing.Protocol`, which `HFBackend` and `VLLMBackend` subclass explicitly (so a type checker holds them to
  it); callers read its members directly, never probe with ``getattr``.
- One backend runs the model in this process (``hf``: `forward` gives token states, `torch_model` is the
  module), another outside it (``vllm``: `embed` gives pooled vectors, `torch_model` is None). Which one a
  backend is, is `returns_pooled`; the other method of the pair raises.
- Interventions reach the model through `intervene`: ``hf`` enters the intervention objects on its torch
  module; ``vllm`` asks each intervention for its engine settings (`Intervention.vllm_settings`), which
  raise `llm_collapse.interventions.base.NotApplicable` for what vLLM cannot express.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from llm_collapse.adapters.inputs import EncodedText
    from llm_collapse.adapters.spec import EmbedderSpec
    from llm_collapse.backends.weights import WeightsLocation
    from llm_collapse.interventions.base import ModelContext, Stack


@dataclass
class ForwardOutput:
    """Token states of one batch: ``last_hidden_state`` (B, L, H) and, if asked, every layer's states."""

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


@runtime_checkable
class Backend(Protocol):
    """A loaded model that turns token ids into token states (`forward`) or pooled vectors (`embed`).

    Attributes:
        name: ``"hf"`` or ``"vllm"`` (run metadata, messages).
        spec: The embedder spec it was loaded for.
        weights: Where the weights came from.
        dtype: Compute dtype.
        tokenizer: The checkpoint's transformers tokenizer.
        returns_pooled: True when `Embedder` must call `embed` (pooled vectors from our pool masks) instead of
            `forward` (token states it pools itself); such a backend has no hidden states.
        mixes_rows: Why a text's states depend on the other tokens of its forward (its batch mates, and tokens
            after it), or ``""`` when they do not. When set, `Embedder` runs one text per forward and shares
            no prefixes, so a text's vector is its own.
    """

    name: str
    spec: EmbedderSpec
    weights: WeightsLocation
    dtype: torch.dtype
    tokenizer: Any
    returns_pooled: bool
    mixes_rows: str

    @property
    def hidden_size(self) -> int:
        """Width of the token states and of the embeddings."""
        ...

    @property
    def max_positions(self) -> int | None:
        """The config's ``max_position_embeddings`` (None when it has none)."""
        ...

    @property
    def has_rope(self) -> bool:
        """Whether positions are rotary, so ``max_length`` may go past `max_positions` (extrapolation)."""
        ...

    @property
    def config(self) -> Any:
        """The transformers model config as the model currently runs (active RoPE / window changes included)."""
        ...

    @property
    def torch_model(self) -> torch.nn.Module | None:
        """The in-process torch module (hidden states, attention weights, hooks); None where there is none."""
        ...

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, output_hidden_states: bool = False
    ) -> ForwardOutput:
        """Token states of a padded batch (B, L); raises on a backend that `returns_pooled`."""
        ...

    def embed(self, items: Sequence[EncodedText], *, pooling: str) -> torch.Tensor:
        """Pooled, unnormalised float32 vectors (len(items), hidden); raises unless `returns_pooled`."""
        ...

    def intervene(self, stack: Stack, context: ModelContext) -> contextlib.AbstractContextManager:
        """Context manager: ``stack`` is active inside it and undone exactly on exit; refusals raise on enter."""
        ...

    def describe(self) -> dict:
        """Everything about the backend that changes a vector, as plain data."""
        ...
