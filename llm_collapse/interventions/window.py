"""The sliding-window policy: keep the model's window (the default) or switch it off.

Past the window the two differ: e5-mistral's config has a 4096-token window that transformers applies unless
``sliding_window`` is None (LongEmbed switched it off); Gemma 2/3 alternate windowed and full layers.
Mistral-style configs accept ``sliding_window=None``; configs with per-layer types (Gemma 2/3) always build a
windowed mask for their sliding layers, so there the window is widened past any position instead, which is
the same attention. Attention modules that keep their own ``sliding_window`` (used by flash kernels) get the
same value. Everything is restored on exit. On vLLM (`Intervention.vllm_settings`) it is
``hf_overrides={"sliding_window": None}`` at the engine's start.
"""

from __future__ import annotations

import contextlib

from torch import nn

from llm_collapse.interventions.attention import attention_modules, patched_attributes
from llm_collapse.interventions.base import Intervention, ModelContext, NotApplicable, VLLMSettings

_UNLIMITED = 1 << 30


class SlidingWindowOff(Intervention):
    """Full attention in every layer (no sliding window)."""

    kind = "window"

    @property
    def slug(self) -> str:
        return "window-off"

    def params(self) -> dict:
        return {"sliding_window": "off"}

    def _apply(self, model: nn.Module, context: ModelContext) -> contextlib.AbstractContextManager:
        modules = [m for _, m in attention_modules(model)]
        configs = {id(m.config): m.config for m in modules}.values()
        windowed = [c for c in configs if getattr(c, "sliding_window", None)]
        if not windowed:
            raise _no_window(context)
        targets: list[tuple[object, str, object]] = []
        for config in windowed:
            per_layer = "sliding_attention" in (getattr(config, "layer_types", None) or ())
            targets.append((config, "sliding_window", _UNLIMITED if per_layer else None))
        targets += [(m, "sliding_window", _UNLIMITED) for m in modules if getattr(m, "sliding_window", None)]
        return patched_attributes(targets)

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        if not getattr(config, "sliding_window", None):
            raise _no_window(context)
        return VLLMSettings(hf_overrides={"sliding_window": None})


def has_sliding_window(model: nn.Module) -> bool:
    """Whether any attention module's config has a sliding window (what `SlidingWindowOff` acts on)."""
    return any(getattr(m.config, "sliding_window", None) for _, m in attention_modules(model))


def _no_window(context: ModelContext) -> NotApplicable:
    return NotApplicable(f"window-off: {context.name} has no sliding window to switch off")
