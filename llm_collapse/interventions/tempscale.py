"""TempScale: an attention temperature tau (Zhou et al., "Length collapse", arXiv 2410.24200).

Reference semantics (Yuqi-Zhou/Length_Collapse ``src/model.py``): attention logits are divided by tau *after*
the usual 1/sqrt(d) scaling, in every layer and head, one global tau; tau < 1 sharpens attention. Dividing the
logits by tau equals multiplying the module's ``scaling`` by 1/tau (the mask is -inf or a large negative
number either way), so the constant schedule only changes that float.

Gemma 2 softcaps logits: ``c * tanh(s * qk / c)``. Two placements, recorded in the slug:

- ``inside`` (default): ``c * tanh((s / tau) * qk / c)``: tau applied before the cap, via ``scaling`` alone.
- ``after``: ``(c * tanh(s * qk / c)) / tau``: a true temperature on the capped logits. Since
  ``(c / tau) * tanh((s / tau) * qk / (c / tau)) == c * tanh(s * qk / c) / tau``, it is ``scaling / tau``
  together with ``softcap / tau``: two module attributes, no new attention code.

`TempScaleLog` is the length-dependent tau(L) = 1 / max(1, log_{L0} L) that LongEmbed applied silently
(queries multiplied by max(1, log_{L0} L); L0 defaults to the model's trained length). L is each text's own
token count (not the padded batch length), so it is applied per row through a registered attention function
that scales the queries, which equals scaling that row's logits before any softcap. `TempScaleLogPosition` is
LongEmbed's per-query-position variant (its Mistral SelfExtend patch).

On vLLM (`Intervention.vllm_settings`) the constant schedule is a per-layer factor on each attention layer's
scale (and softcap, ``after``); the length-dependent one is refused: vLLM's scale is one number per layer for
every request of a batch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from llm_collapse.interventions.attention import (
    attention_modules,
    call_positions,
    captured_inputs,
    patched_attributes,
    routed_attention,
    select_layers,
)
from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    VLLMSettings,
    check_positive_finite,
    format_number,
    not_on_vllm,
    trained_length,
)
from llm_collapse.models import text_config

PLACEMENTS: tuple[str, ...] = ("inside", "after")


def _check_layers(layers) -> tuple[int, ...] | None:
    if layers is None:
        return None
    layers = tuple(layers)
    if not layers or not all(isinstance(i, int) and i >= 0 for i in layers):
        raise InterventionError(
            f"layers={layers!r} is not allowed; give non-negative layer indices, or None for all"
        )
    return tuple(sorted(set(layers)))


def _layers_slug(layers: tuple[int, ...] | None) -> str:
    return "" if layers is None else "-L" + "_".join(map(str, layers))


TAU_RANGE: tuple[float, float] = (1e-2, 1e2)
"""Temperatures accepted. tau=1e-300 made every logit inf (NaN embeddings); 1/tau <= 100 keeps bf16 logits
finite for any attention score a trained model produces."""


def plain_tau(parts: Sequence[Intervention]) -> float | None:
    """tau of a method that is one plain `TempScale` (every layer, inside any softcap, pooler untouched: a point
    of a tau sweep), else None."""
    part = parts[0] if len(parts) == 1 else None
    return part.tau if isinstance(part, TempScale) and part.plain else None


class TempScale(Intervention):
    """Constant attention temperature.

    Args:
        tau: Temperature > 0; logits are divided by it (tau < 1 sharpens).
        layers: Layer indices to change; None for all.
        placement: ``"inside"`` or ``"after"`` the softcap (only meaningful for softcapped attention).
        include_pooler: Also scale NV-Embed's latent-attention pooler (left alone by default).
        layer_type: Only the layers of this ``config.layer_types`` entry (Gemma 3: ``full_attention``, the
            layers YaRN's attention factor reaches by default), resolved when applied; exclusive with ``layers``.
    """

    kind = "attention"

    def __init__(
        self,
        tau: float,
        *,
        layers: tuple[int, ...] | None = None,
        placement: str = "inside",
        include_pooler: bool = False,
        layer_type: str | None = None,
    ) -> None:
        self.tau = check_positive_finite("tau", tau)
        if not TAU_RANGE[0] <= self.tau <= TAU_RANGE[1]:
            raise InterventionError(
                f"tau={tau!r} is not allowed; tau must lie in [{TAU_RANGE[0]:g}, {TAU_RANGE[1]:g}] "
                "(the paper sweeps 0.5-1.2; far outside, attention is argmax or uniform and logits overflow)"
            )
        self.layers = _check_layers(layers)
        if placement not in PLACEMENTS:
            raise InterventionError(f"placement={placement!r} is not allowed; use one of {PLACEMENTS}")
        self.placement = placement
        self.include_pooler = include_pooler
        if layer_type is not None and self.layers is not None:
            raise InterventionError("give layers or layer_type, not both")
        self.layer_type = layer_type

    @property
    def plain(self) -> bool:
        """The paper's method: every layer, inside any softcap, the pooler untouched (a point of a tau sweep)."""
        return (
            self.layers is None
            and self.layer_type is None
            and self.placement == "inside"
            and not self.include_pooler
        )

    @property
    def slug(self) -> str:
        suffix = "-after" if self.placement == "after" else ""
        pooler = "-pooler" if self.include_pooler else ""
        kind = f"-{self.layer_type}" if self.layer_type else ""
        return f"tempscale-{format_number(self.tau)}{_layers_slug(self.layers)}{kind}{suffix}{pooler}"

    def params(self) -> dict:
        layers = list(self.layers) if self.layers is not None else "all"
        return {
            "tau": self.tau,
            "layers": f"layer_types == {self.layer_type}" if self.layer_type else layers,
            "placement": self.placement,
            "include_pooler": self.include_pooler,
        }

    def _layers(self, config) -> tuple[int, ...] | None:
        """``layers``, or the indices of the layers of type ``layer_type`` in ``config``."""
        if self.layer_type is None:
            return self.layers
        text = text_config(config)
        types = list(getattr(text, "layer_types", None) or [])
        chosen = tuple(i for i, t in enumerate(types) if t == self.layer_type)
        if not chosen:
            have = f"its layer types are {sorted(set(types))}" if types else "it has no config.layer_types"
            raise InterventionError(
                f"{self.slug}: no layer of type {self.layer_type!r}; {have} (or give layer indices)"
            )
        return chosen

    def _apply(self, model: nn.Module, context: ModelContext) -> contextlib.AbstractContextManager:
        modules = select_layers(
            attention_modules(model, include_pooler=self.include_pooler),
            self._layers(model.config),
            what=self.slug,
        )
        targets: list[tuple[object, str, object]] = [(m, "scaling", m.scaling / self.tau) for _, m in modules]
        if self.placement == "after":
            capped = [m for _, m in modules if getattr(m, "attn_logit_softcapping", None)]
            if not capped:
                raise self._no_softcap(context)
            targets += [(m, "attn_logit_softcapping", m.attn_logit_softcapping / self.tau) for m in capped]
        return patched_attributes(targets)

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        """Every selected layer's scale divided by tau (and, ``after``, its softcap too), on the running engine."""
        if self.include_pooler:
            raise not_on_vllm(self.slug, "there is no separate pooler attention in vLLM models")
        if self.placement == "after" and not getattr(config, "attn_logit_softcapping", None):
            raise self._no_softcap(context)
        n_layers = int(config.num_hidden_layers)
        chosen = self._layers(config)
        if chosen is not None and (missing := sorted(set(chosen) - set(range(n_layers)))):
            raise InterventionError(
                f"{self.slug}: layers {missing} do not exist; available layers are 0..{n_layers - 1}"
            )
        cap = 1.0 / self.tau if self.placement == "after" else 1.0
        layers = chosen if chosen is not None else range(n_layers)
        return VLLMSettings(temperatures={layer: (self.tau, cap) for layer in layers})

    def _no_softcap(self, context: ModelContext) -> NotApplicable:
        return NotApplicable(
            f"{self.slug}: placement='after' only differs for softcapped attention (Gemma 2); "
            f"{context.name} has no attention softcap, use placement='inside'"
        )


def log_factors(values: torch.Tensor, base_length: float) -> torch.Tensor:
    """max(1, ln(values) / ln(L0)) in float64: the factor on queries (1 / tau)."""
    return torch.clamp(torch.log(values.double()) / math.log(base_length), min=1.0)


def _resolved_base(base_length: float | None, model: nn.Module, context: ModelContext, slug: str) -> float:
    base = base_length if base_length is not None else float(trained_length(model.config, context))
    if base <= 1:
        raise InterventionError(f"{slug}: L0={base:g} is not allowed; the base length must be > 1")
    return base


class TempScaleLog(Intervention):
    """Length-dependent temperature tau(L) = 1 / max(1, log_{L0} L), L = each text's token count.

    Args:
        base_length: L0 > 1; texts up to L0 tokens are unchanged. None (``tempscale-log``): the model's
            trained length (`ModelContext.trained_length`, else ``max_position_embeddings``), resolved when
            applied; LongEmbed hard-coded 4096 for Mistral and 512 for BERT and E5-RoPE, their trained lengths.
        layers: Layer indices to change; None for all.
    """

    kind = "attention"

    def __init__(self, base_length: float | None = None, *, layers: tuple[int, ...] | None = None) -> None:
        self.base_length = (
            None if base_length is None else check_positive_finite("L0", base_length, minimum=1.0)
        )
        self.layers = _check_layers(layers)

    @property
    def slug(self) -> str:
        base = "" if self.base_length is None else format_number(self.base_length)
        return f"tempscale-log{base}{_layers_slug(self.layers)}"

    def params(self) -> dict:
        return {
            "schedule": "1/max(1, log_L0(L)), L = the text's own token count",
            "L0": self.base_length if self.base_length is not None else "model trained length",
            "layers": list(self.layers) if self.layers is not None else "all",
        }

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        """L0 (rounded down): the factor max(1, ln n / ln L0) is 1 for every text of at most L0 tokens."""
        return math.floor(_resolved_base(self.base_length, model, context, self.slug))

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(
            self.slug,
            "its temperature depends on each text's length, while vLLM's attention scale is one number "
            "per layer shared by every request in a batch",
        )

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        base = _resolved_base(self.base_length, model, context, self.slug)
        selected = {id(m) for _, m in select_layers(attention_modules(model), self.layers, what=self.slug)}

        def wrap(original, module):
            if id(module) not in selected:
                return original

            def scaled(module, query, key, value, attention_mask, **kwargs):
                factor = log_factors(state["lengths"], base)
                factor = factor.to(device=query.device, dtype=query.dtype).view(-1, 1, 1, 1)
                return original(module, query * factor, key, value, attention_mask, **kwargs)

            return scaled

        with captured_inputs(model) as state, routed_attention(model, wrap, tag="tempscale_log"):
            yield


class TempScaleLogPosition(Intervention):
    """Per-query-position log scale: queries at position p multiplied by max(1, ln(p + 1) / ln L0).

    LongEmbed's Mistral SelfExtend patch (``mistral_flash_self_extend_forward``, ``scale_base=4096``). It is
    position-causal: a query's factor depends on its own position only, so prefix sharing stays exact. Used
    inside the ``longembed-se`` preset; not a grammar method of its own.

    Args:
        base_length: L0 > 1; None: the model's trained length, resolved when applied.
    """

    kind = "attention"

    def __init__(self, base_length: float | None = None) -> None:
        self.base_length = (
            None if base_length is None else check_positive_finite("L0", base_length, minimum=1.0)
        )

    @property
    def slug(self) -> str:
        base = "" if self.base_length is None else format_number(self.base_length)
        return f"tempscale-poslog{base}"

    def params(self) -> dict:
        return {
            "schedule": "queries at position p times max(1, ln(p+1)/ln(L0))",
            "L0": self.base_length if self.base_length is not None else "model trained length",
        }

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(self.slug, "its scale differs per query position; vLLM's is one number per layer")

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        base = _resolved_base(self.base_length, model, context, self.slug)
        selected = {id(m) for _, m in select_layers(attention_modules(model), None, what=self.slug)}

        def wrap(original, module):
            if id(module) not in selected:
                return original

            def scaled(module, query, key, value, attention_mask, **kwargs):
                batch, _, length, _ = query.shape
                positions = call_positions(kwargs, state, batch, length, query.device)
                factor = log_factors(positions + 1, base).to(dtype=query.dtype)[:, None, :, None]
                return original(module, query * factor, key, value, attention_mask, **kwargs)

            return scaled

        with captured_inputs(model) as state, routed_attention(model, wrap, tag="tempscale_poslog"):
            yield
