"""The layer-0 control: the model's own pooling of its input token embeddings, no attention at all.

A mean of token embeddings also drifts toward the corpus mean as texts grow, with no attention involved; this
control measures that part of length collapse on the same texts (issue 43, item 6). For the ``with`` block
the model's stack of transformer layers is an empty ``ModuleList``, so its forward runs the embedding layer
(token embeddings, plus position embeddings where the model adds them there: BERT; Gemma's embedding scale)
and whatever follows the last layer (the final norm of decoder models: per token, so the pooled vector is a
mean of normalised input embeddings), then the adapter's usual pooling. The layers are put back exactly on
exit. Not a method to compare against base for better or worse: a floor of what averaging alone does.
"""

from __future__ import annotations

import contextlib
import re

from torch import nn

from llm_collapse.interventions.attention import patched_attributes
from llm_collapse.interventions.base import Intervention, ModelContext, NotApplicable, VLLMSettings
from llm_collapse.models.structure import attention_modules

_STACK = re.compile(r"^(.*?)\.?(layers|layer)\.\d+\.")


class Layer0(Intervention):
    """No transformer layers: the pooled input embeddings (module docstring)."""

    kind = "layer0"

    @property
    def slug(self) -> str:
        return "layer0"

    def params(self) -> dict:
        return {"layers": 0}

    def _apply(self, model: nn.Module, context: ModelContext) -> contextlib.AbstractContextManager:
        stacks = {}
        for name, _ in attention_modules(model):
            match = _STACK.match(f"{name}.")
            if match:
                parent, attribute = match.group(1), match.group(2)
                stacks[(parent, attribute)] = model.get_submodule(parent) if parent else model
        if not stacks:
            raise NotApplicable(f"layer0: found no stack of transformer layers in {context.name}")
        return patched_attributes(
            [(owner, attribute, nn.ModuleList()) for (_, attribute), owner in stacks.items()]
        )

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise NotApplicable(
            "layer0 is not supported on backend='vllm': the engine owns its layers; use backend='hf'"
        )
