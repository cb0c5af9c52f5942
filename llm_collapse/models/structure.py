"""Where a loaded model keeps its attention modules and their layer numbers (model structure, no intervention).

Read by the interventions, the backends and the metrics alike, so it lives below all of them.
"""

from __future__ import annotations

import re

from torch import nn

_LAYER_INDEX = re.compile(r"\.(?:layers|layer)\.(\d+)\.")


def attention_modules(model: nn.Module, *, include_pooler: bool = False) -> list[tuple[str, nn.Module]]:
    """Self-attention modules with a float ``scaling``, in layer order.

    NV-Embed's latent-attention pooler is left out unless ``include_pooler`` (it is not a transformer layer
    and TempScale's reference semantics are about the encoder's self-attention).
    """
    found = []
    for name, module in model.named_modules():
        if isinstance(getattr(module, "scaling", None), float) and hasattr(module, "config"):
            found.append((name, module))
        elif include_pooler and name.startswith("latent_attention_model") and hasattr(module, "to_kv"):
            found.append((name, module))
    return found


def layer_index(name: str) -> int | None:
    """Layer number from a module path such as ``layers.3.self_attn`` or ``encoder.layer.3.attention.self``."""
    match = _LAYER_INDEX.search(f".{name}.")
    return int(match.group(1)) if match else None
