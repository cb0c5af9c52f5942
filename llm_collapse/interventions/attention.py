"""Finding attention modules, and routing them through a registered attention function.

Two seams, both public in transformers 5:

- Every attention module (Mistral, Gemma 2/3, BERT self-attention) carries a float ``scaling`` that the
  eager and sdpa paths both use, and Gemma 2/3 modules an ``attn_logit_softcapping``.
- ``AttentionInterface.register(name, fn)`` plus ``config._attn_implementation = name`` makes every module
  call ``fn`` instead of its attention function. `routed_attention` registers a wrapper around whatever
  implementation is active (so wrappers compose), registers the matching mask function under the same name,
  and puts the old implementation back on exit. "eager" is not in the interface: each model file has its
  own ``eager_attention_forward`` (Gemma 2's applies the softcap), which is looked up from the module's class.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
from collections.abc import Callable, Iterator

from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from llm_collapse.interventions.base import InterventionError

_LAYER_INDEX = re.compile(r"\.(?:layers|layer)\.(\d+)\.")
_counter = itertools.count()

AttentionFn = Callable[..., tuple]


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


def select_layers(
    modules: list[tuple[str, nn.Module]], layers: tuple[int, ...] | None, *, what: str
) -> list[tuple[str, nn.Module]]:
    """Keeps the modules of the chosen layers; raises if a requested layer does not exist or nothing is left."""
    if not modules:
        raise InterventionError(
            f"{what}: the model has no attention module with a `scaling` attribute to act on"
        )
    if layers is None:
        return modules
    available = sorted({i for n, _ in modules if (i := layer_index(n)) is not None})
    missing = sorted(set(layers) - set(available))
    if missing:
        raise InterventionError(
            f"{what}: layers {missing} do not exist; available layers are {available[0]}..{available[-1]}"
        )
    return [(n, m) for n, m in modules if layer_index(n) in layers]


def base_attention_function(implementation: str, module: nn.Module) -> AttentionFn:
    """The function a module would call for ``implementation`` (model-specific for "eager")."""
    if implementation == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[implementation]


@contextlib.contextmanager
def routed_attention(
    model: nn.Module, wrap: Callable[[AttentionFn, nn.Module], AttentionFn], *, tag: str
) -> Iterator[str]:
    """Routes all attention modules of ``model`` through ``wrap(original_fn, module)``.

    Args:
        model: The loaded model.
        wrap: Called per attention call with the original function and the calling module; returns the
            function to run (return ``original`` itself to leave a module untouched).
        tag: Readable part of the registered name.

    Yields:
        The registered implementation name.
    """
    modules = [m for _, m in attention_modules(model)]
    if not modules:
        raise InterventionError(f"{tag}: the model has no attention modules to route")
    # The modules' config objects (the backbone's for NV-Embed) decide both the attention and the mask function.
    configs = {id(m.config): m.config for m in modules}
    current = {c._attn_implementation for c in configs.values()}
    if len(current) != 1:
        raise InterventionError(
            f"{tag}: attention implementations differ across sub-models: {sorted(current)}"
        )
    (base,) = current
    name = f"llm_collapse_{tag}_{next(_counter)}"

    def routed(module, query, key, value, attention_mask, **kwargs):
        original = base_attention_function(base, module)
        return wrap(original, module)(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(name, routed)
    AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping[_mask_key(base)])
    try:
        for config in configs.values():
            config._attn_implementation = name
        yield name
    finally:
        for config in configs.values():
            config._attn_implementation = base
        AttentionInterface._global_mapping.pop(name, None)
        AttentionMaskInterface._global_mapping.pop(name, None)


def _mask_key(implementation: str) -> str:
    if implementation in AttentionMaskInterface._global_mapping:
        return implementation
    raise InterventionError(f"attention implementation {implementation!r} has no mask function to reuse")


@contextlib.contextmanager
def patched_attributes(targets: list[tuple[object, str, object]]) -> Iterator[None]:
    """Sets ``setattr(obj, attr, value)`` for each target and restores the exact original values on exit."""
    originals = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in targets]
    try:
        for obj, attr, value in targets:
            setattr(obj, attr, value)
        yield
    finally:
        for obj, attr, value in reversed(originals):
            setattr(obj, attr, value)
