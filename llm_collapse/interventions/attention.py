"""Routing attention modules (`llm_collapse.models.structure` finds them) through a registered attention function.

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
import sys
from collections.abc import Callable, Iterator

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from llm_collapse.interventions.base import InterventionError, NotApplicable
from llm_collapse.models.structure import attention_modules, layer_index

_counter = itertools.count()

AttentionFn = Callable[..., tuple]


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


# Implementations whose mask function builds flex ``BlockMask``s -> one whose mask function builds tensors (or
# None) for the same pattern; `routed_attention(..., tensor_masks=True)` uses the latter.
TENSOR_MASK_STANDINS: dict[str, str] = {"fused": "chunked", "flex_attention": "sdpa"}


@contextlib.contextmanager
def routed_attention(
    model: nn.Module,
    wrap: Callable[[AttentionFn, nn.Module], AttentionFn],
    *,
    tag: str,
    tensor_masks: bool = False,
) -> Iterator[str]:
    """Routes all attention modules of ``model`` through ``wrap(original_fn, module)``.

    Args:
        model: The loaded model.
        wrap: Called per attention call with the original function and the calling module; returns the
            function to run (return ``original`` itself to leave a module untouched).
        tag: Readable part of the registered name.
        tensor_masks: The wrapper reads ``attention_mask`` as a tensor (or None): a base implementation that
            builds flex ``BlockMask``s gets its `TENSOR_MASK_STANDINS` mask function instead (the original
            function then receives tensor masks too; ``fused`` computes those with ``chunked``).

    Yields:
        The registered implementation name.
    """
    modules = [m for _, m in attention_modules(model)]
    if not modules:  # layer0 runs none: a measurement or method that routes attention cannot apply there
        raise NotApplicable(f"{tag}: the model runs no attention modules to route (layer0 runs no layer)")
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
    mask_source = TENSOR_MASK_STANDINS.get(base, base) if tensor_masks else base
    AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping[_mask_key(mask_source)])
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


@contextlib.contextmanager
def captured_inputs(model: nn.Module) -> Iterator[dict]:
    """A forward pre-hook on ``model`` that keeps, per forward, each text's own token count.

    Yields a dict refreshed at every forward: ``lengths`` (B,) from the 2D attention mask (the padded length
    for every row when there is none) and ``position_ids`` (what the model was given, or None). Length-
    dependent interventions read each text's own length from it, never the padded batch length, so a text's
    embedding does not depend on its batch.
    """
    state: dict = {"lengths": None, "position_ids": None}

    def remember(_module, args, kwargs):
        mask = kwargs.get("attention_mask")
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if mask is not None and mask.ndim == 2:
            state["lengths"] = mask.sum(-1)
        elif ids is not None:
            state["lengths"] = torch.full((ids.shape[0],), ids.shape[1], device=ids.device)
        else:
            state["lengths"] = None
        state["position_ids"] = kwargs.get("position_ids")

    handle = model.register_forward_pre_hook(remember, with_kwargs=True)
    try:
        yield state
    finally:
        handle.remove()


def call_positions(
    kwargs: dict, captured: dict, batch: int, length: int, device: torch.device
) -> torch.Tensor:
    """(B, L) integer positions of one full-sequence attention call: the ``position_ids`` the module passes,
    else those the model was given (`captured_inputs`), else ``0..L-1``."""
    position_ids = kwargs.get("position_ids")
    if position_ids is None:
        position_ids = captured.get("position_ids")
    if position_ids is None or position_ids.shape[-1] != length:
        position_ids = torch.arange(length, device=device)[None]
    if position_ids.dim() != 2:
        raise InterventionError(
            f"only (batch, length) position ids are supported, got shape {tuple(position_ids.shape)}"
        )
    return position_ids.to(device=device, dtype=torch.long).expand(batch, length)
