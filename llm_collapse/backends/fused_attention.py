"""Exact (softcapped) attention in torch's fused flex_attention kernel: ``attn_implementation="fused"``.

Why
    Gemma 2's logit softcap ``tanh(x / c) * c`` rules out sdpa and flash; ``chunked`` computes it exactly but
    materialises float32 logits for every key, sliding layers included (about 0.64 s per layer at 32k tokens on
    an H200). torch's ``flex_attention`` applies the softcap as a ``score_mod`` inside one fused kernel and skips
    the key blocks a ``BlockMask`` leaves out, so sliding layers compute only their band.

What it computes
    ``softmax(c * tanh((q k^T * scaling) / c) masked) v``, eager's order of operations, with scores, softcap and
    softmax in float32 inside the kernel; ``scaling`` and ``softcap`` are the arguments the module passes (so
    TempScale, which changes ``module.scaling`` or the softcap, applies). Grouped-query heads use the kernel's
    ``enable_gqa`` (no ``repeat_kv`` copy). Query rows without any attendable key (padding) come out as zeros, not
    eager's uniform average; pooling never reads them.

Masks (`fused_mask`, the registered mask function)
    For the plain patterns (`llm_collapse.backends.mask_patterns`) with contiguous key padding, a ``BlockMask``
    computed from block positions (`llm_collapse.backends.block_masks`): O((L / 128)^2) memory, no L x L tensor,
    no compile. Anything else: transformers' own ``flex_attention_mask`` (compiled ``create_block_mask``). A
    tensor mask (a routed intervention that swapped the mask function) or training-time dropout goes to
    ``chunked``, which handles every mask form exactly.

Compilation (the gotchas)
    - Without ``torch.compile`` flex runs unfused and materialises every score: `COMPILE` is True except in
      tests that want torch's reference path on tiny inputs. One compiled callable serves the process; dynamo's
      automatic dynamic shapes give about three compiles in all (first shape, then dynamic length and batch).
    - ``score_mod``/``mask_mod`` are one function each for every call, with their numbers captured as tensors:
      a changed Python number in a closure triggers a recompile, and a float that became symbolic failed to lower
      on the CPU in torch 2.13 (as did a captured tensor whose size changes, hence the key span as (lo, hi)).
      Past dynamo's recompile limit torch would silently fall back to the unfused path.
    - If the compiled kernel fails (no C++ compiler on a CPU, a Triton resource error on a GPU), a warning is
      logged once and every later call of the process runs ``chunked`` (the mask's key padding is kept for it).
    - A model sharded over GPUs gets its masks built on the first GPU; each layer's call rebuilds ours once on
      its own device (the mask_mod's captured tensors must live there too).

Device policy (`choose_attention`)
    ``load_embedder`` turns the spec's ``"chunked"`` into ``"fused"`` on CUDA when flex_attention and Triton are
    importable, and logs which one runs; an explicit ``attn_implementation=`` is never changed. On the CPU
    ``chunked`` stays the default although the compiled kernel was 2-7x faster per call on the 2-core Xeon (torch
    2.13, fp32, tiny-replica and real bge head sizes): each new input shape costs seconds of compiling (up to
    ~12 s), a C++ compiler is needed at run time, and the CPU template failed to compile for some dynamic shapes;
    ``attn_implementation="fused"`` opts in.

Registration
    Under ``"fused"`` in ``AttentionInterface`` and ``AttentionMaskInterface``; the name stays free of
    "sdpa"/"flash"/"flex", on which transformers dispatches.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, flex_attention_mask

from llm_collapse.backends.block_masks import contiguous_key_span, pattern_block_mask
from llm_collapse.backends.chunked_attention import CHUNKED, chunked_attention_forward
from llm_collapse.backends.mask_patterns import MaskPattern, padding_keys, plain_pattern

logger = logging.getLogger(__name__)

__all__ = ["COMPILE", "FUSED", "choose_attention", "fused_attention_forward", "fused_mask", "register"]

FUSED = "fused"
"""Registered (and user-facing) name."""

COMPILE = True
"""Run the compiled kernel (tests may set False for torch's unfused reference path; never for long inputs)."""


@dataclass
class _Built:
    """How one of our BlockMasks was made: to rebuild it on another GPU, or to hand `chunked` its key padding."""

    pattern: MaskPattern
    span: tuple[torch.Tensor, torch.Tensor]
    keys: torch.Tensor | None  # (B, Lk) real keys, None without padding
    lengths: tuple[int, int]
    copies: dict[torch.device, BlockMask] = field(default_factory=dict)


_BUILT: weakref.WeakKeyDictionary[BlockMask, _Built] = weakref.WeakKeyDictionary()
_failed: list[str] = []  # the first kernel failure of the process, if any


def fused_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    mask_function=causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
    **kwargs,
) -> BlockMask:
    """The registered mask function: a position-built ``BlockMask``, else transformers' (module docstring)."""
    pattern = plain_pattern(mask_function, q_length=q_length, kv_length=kv_length, **kwargs)
    if pattern is not None:
        keys = padding_keys(attention_mask, kv_length)
        span = contiguous_key_span(keys, batch_size, kv_length, device)
        if span is not None:
            return _build(pattern, span, keys, q_length, kv_length)
    return flex_attention_mask(
        batch_size,
        q_length,
        kv_length,
        mask_function=mask_function,
        attention_mask=attention_mask,
        device=device,
        **kwargs,
    )


def fused_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: BlockMask | torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature (as ``chunked_attention_forward``).

    Args:
        module: The calling attention module (``is_causal``, ``head_dim``, ``training``).
        query: (B, H, Lq, d), H a multiple of H_kv.
        key: (B, H_kv, Lk, d).
        value: (B, H_kv, Lk, d_v).
        attention_mask: A ``BlockMask`` from `fused_mask`; None (the module's causal rule and
            ``sliding_window``); or a tensor mask, computed by ``chunked``.
        dropout: In training mode computed by ``chunked`` (flex has no dropout).
        scaling: Logit scale (default ``head_dim ** -0.5``).
        softcap: Gemma 2's ``c``.
        sliding_window: Only without a mask.
        is_causal: Overrides ``module.is_causal``; only without a mask.
        **kwargs: Ignored.

    Returns:
        ``(output (B, Lq, H, d_v), None)``.
    """
    common = {"dropout": dropout, "scaling": scaling, "softcap": softcap, "sliding_window": sliding_window}
    chunked = functools.partial(
        chunked_attention_forward, module, query, key, value, is_causal=is_causal, **common
    )
    if isinstance(attention_mask, torch.Tensor) or (dropout and module.training):
        return chunked(attention_mask)
    causal = bool(getattr(module, "is_causal", True)) if is_causal is None else bool(is_causal)
    q_len, k_len = query.shape[2], key.shape[2]
    block_mask = attention_mask
    if block_mask is None:
        if causal and q_len != k_len:
            return chunked(None)  # bottom-right alignment (KV cache): chunked's rule
        span = contiguous_key_span(None, query.shape[0], k_len, query.device)
        block_mask = _build(MaskPattern(causal, sliding_window if causal else None), span, None, q_len, k_len)
    block_mask = _on_device(block_mask, query.device)
    if _failed:
        return chunked(_fallback_mask(block_mask))
    head_dim = query.shape[-1]
    scale = float(getattr(module, "head_dim", head_dim)) ** -0.5 if scaling is None else float(scaling)
    try:
        out = _kernel()(
            query,
            key,
            value,
            score_mod=_score_mod(scale, softcap, query.device),
            block_mask=block_mask,
            scale=1.0,
            enable_gqa=query.shape[1] != key.shape[1],
        )  # (B, H, Lq, d_v)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - compile/launch failures: fall back once, loudly
        fallback = _fallback_mask(block_mask)
        _failed.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        logger.warning(
            "fused attention (flex_attention) failed (%s); this process computes attention with %r from now on",
            _failed[0],
            CHUNKED,
        )
        return chunked(fallback)
    return out.transpose(1, 2).contiguous(), None


def _build(pattern, span, keys, q_length: int, kv_length: int) -> BlockMask:
    mask = pattern_block_mask(pattern, span, q_length, kv_length, with_q_blocks=torch.is_grad_enabled())
    _BUILT[mask] = _Built(pattern, span, keys, (q_length, kv_length))
    return mask


def _on_device(block_mask: BlockMask, device: torch.device) -> BlockMask:
    """The mask on ``device``: a model sharded over GPUs gets the mask built on the first one (rebuilt once)."""
    built = _BUILT.get(block_mask)
    if built is None or block_mask.kv_num_blocks.device == device:
        return block_mask
    if device not in built.copies:
        span = tuple(t.to(device) for t in built.span)
        built.copies[device] = _build(built.pattern, span, built.keys, *built.lengths)
    return built.copies[device]


def _fallback_mask(block_mask: BlockMask) -> torch.Tensor | None:
    if block_mask not in _BUILT:
        reason = _failed[0] if _failed else "the fused kernel failed"
        raise RuntimeError(
            f"fused attention cannot run ({reason}) and this BlockMask was not built by llm_collapse; "
            f"load the model with attn_implementation={CHUNKED!r}"
        )
    return _BUILT[block_mask].keys


def _score_mod(scale: float, softcap: float | None, device):
    """One ``score_mod`` for every call: ``score * scale``, then ``c * tanh(score / c)`` when capped."""
    scale_t = torch.tensor(scale, dtype=torch.float32, device=device)
    cap_t = torch.tensor(softcap or 1.0, dtype=torch.float32, device=device)
    capped = torch.tensor(softcap is not None, device=device)

    def score_mod(score, b, h, q_idx, kv_idx):
        score = score * scale_t
        return torch.where(capped, cap_t * torch.tanh(score / cap_t), score)

    return score_mod


def _kernel():
    return _compiled_flex() if COMPILE else flex_attention


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention)  # automatic dynamic shapes: see the module docstring


def fused_unavailable(device: torch.device) -> str | None:
    """Why `choose_attention` keeps ``chunked`` on ``device`` (None: ``fused`` is chosen)."""
    if device.type != "cuda":
        return f"the fused flex_attention kernel is the default on CUDA only, attn_implementation={FUSED!r} opts in"
    if importlib.util.find_spec("triton") is None:
        return "Triton, which compiles flex_attention for CUDA, is not installed"
    return None


def choose_attention(name: str, requested: str, device: torch.device) -> str:
    """The attention implementation to load ``name`` with when the spec asks for ``requested`` (logged)."""
    if requested != CHUNKED:
        return requested
    reason = fused_unavailable(device)
    if reason is None:
        logger.info(
            "%s: attention %r (exact softcap in torch's compiled flex_attention kernel; %r is the fallback)",
            name,
            FUSED,
            CHUNKED,
        )
        return FUSED
    logger.info("%s: attention %r (exact softcap in query chunks; %s)", name, CHUNKED, reason)
    return CHUNKED


def register() -> str:
    """Registers the attention and mask functions with transformers (idempotent); returns the name."""
    AttentionInterface.register(FUSED, fused_attention_forward)
    AttentionMaskInterface.register(FUSED, fused_mask)
    return FUSED


register()
