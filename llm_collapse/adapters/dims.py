"""A published checkpoint's dimensions (its ``config.json``), as the package runs it: what the GPU estimate and
the device check's replicas read without loading any weights. Each `EmbedderSpec` of the catalog that has a
published checkpoint carries its `PublishedDims` (``spec.published``), so a model's facts live in one record.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_collapse.models.flops import (
    FlopModel,
    LayerShape,
    backbone_linear_params,
    latent_pooler_linear_params,
)


@dataclass(frozen=True)
class LatentPooler:
    """NV-Embed's latent-attention pooler (anchors.md 4.2: 512 latents, 8 heads of width 4096, GEGLU x4)."""

    latents: int = 512
    heads: int = 8
    head_dim: int = 4096
    ff_mult: int = 4

    def token_linear_params(self, hidden: int) -> int:
        """Weights applied to every token: to_q, to_out, net.0 (H -> 2 x mult x H), net.2 (mult x H -> H)."""
        inner = self.heads * self.head_dim
        return 2 * hidden * inner + hidden * 2 * self.ff_mult * hidden + self.ff_mult * hidden * hidden

    def params(self, hidden: int) -> int:
        """Every pooler weight: latents, to_kv and the per-token ones (biases and norms ignored)."""
        return self.latents * hidden + latent_pooler_linear_params(
            hidden, self.heads, self.head_dim, self.ff_mult
        )

    def flops(self, positions: int, hidden: int) -> float:
        """Per text: per-token projections, cross-attention against the latents, to_kv on the latents."""
        inner = self.heads * self.head_dim
        per_token = 2.0 * self.token_linear_params(hidden) + 4.0 * inner * self.latents
        return per_token * positions + 2.0 * self.latents * hidden * 2 * inner


@dataclass(frozen=True, kw_only=True)
class PublishedDims(LayerShape):
    """A published checkpoint's dimensions (its ``config.json``), as the package runs it: its `LayerShape`
    and the rest.

    ``sliding`` says which layers use ``window``: ``"all"`` (Mistral v0.1), ``"even"`` (Gemma 2: layers 0, 2,
    ...) or ``"none"``. Whether attention is causal is the spec's (`EmbedderSpec.causal`), not a dimension.
    """

    source: str
    vocab: int
    window: int | None = None
    sliding: str = "none"
    pooler: LatentPooler | None = None
    weights_mib: int | None = None
    """Size of the published weight files in MiB (mteb's ``ModelMeta.memory_usage_mb``, which counts MiB, at the
    pinned revision): what a download fetches, the parameters at their stored dtype (fp32 for some). None: mteb
    has no entry."""

    def layer_windows(self, *, window_off: bool = False) -> tuple[int | None, ...]:
        if window_off or self.window is None or self.sliding == "none":
            return (None,) * self.layers
        if self.sliding == "all":
            return (self.window,) * self.layers
        return tuple(self.window if i % 2 == 0 else None for i in range(self.layers))

    @property
    def d_attn(self) -> int:
        return self.heads * self.head_dim

    def backbone_linear_params(self) -> int:
        """q, k, v, o and the MLP of every layer."""
        return backbone_linear_params(self)

    def params(self) -> int:
        """All weights: backbone linears, the embedding table, the pooler (norms ignored; no LM head)."""
        pooler = self.pooler.params(self.hidden) if self.pooler else 0
        return self.backbone_linear_params() + self.vocab * self.hidden + pooler

    def download_bytes(self) -> tuple[int, bool]:
        """Bytes a download fetches and whether that is known (`weights_mib`) rather than computed (bf16)."""
        if self.weights_mib is not None:
            return self.weights_mib * 2**20, True
        return 2 * self.params(), False

    def flop_model(self, *, causal: bool = True, window_off: bool = False) -> FlopModel:
        return FlopModel(
            self.backbone_linear_params(), self.d_attn, self.layer_windows(window_off=window_off), causal
        )
