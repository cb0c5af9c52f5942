"""`load_embedder`: name -> spec -> weights -> backend -> `Embedder`."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import torch

from llm_collapse.adapters import resolve_spec
from llm_collapse.adapters.echo import EchoFormat
from llm_collapse.adapters.spec import POOLINGS
from llm_collapse.backends import BACKENDS
from llm_collapse.backends.base import Backend
from llm_collapse.backends.device import resolve_device, resolve_dtype
from llm_collapse.backends.fused_attention import choose_attention
from llm_collapse.backends.hf import QUANTIZATIONS, HFBackend, check_transformers_version
from llm_collapse.backends.weights import resolve_weights
from llm_collapse.embedder import Embedder
from llm_collapse.interventions import parse_interventions

logger = logging.getLogger(__name__)

# Room left for the echo template (instruction, "Query again:", BOS/EOS) when two copies share the positions.
_ECHO_TEMPLATE_ROOM = 64


def load_embedder(
    name: str,
    *,
    path: str | Path | None = None,
    backend: str = "hf",
    dtype: str | torch.dtype | None = None,
    quantization: str | None = None,
    max_length: int | None = None,
    device: str | torch.device | None = None,
    pooling: str | None = None,
    batch_size: int = 32,
    max_tokens_per_batch: int = 16384,
    interventions=None,
    attn_implementation: str | None = None,
    tensor_parallel_size: int = 1,
    backend_options: dict | None = None,
) -> Embedder:
    """Loads a registered embedder (see `list_embedders`), ``echo:<name-or-path>`` or a model folder.

    Args:
        name: Registry name or alias (``"mistral"``, ``"nv-embed"``, ``"minilm"``, ``"echo:gemma3-270m"``...),
            ``"st:PATH"`` (a sentence-transformers folder: its pooling, ``max_seq_length`` and prompts) or
            ``"hf:PATH"`` (a transformers folder, pooled as sentence-transformers would); see
            `llm_collapse.adapters.folder`.
        path: Local model folder or ``.gguf`` file; overrides the hub id / PyPI package.
        backend: ``"hf"`` (transformers/Accelerate) or ``"vllm"`` (optional install; pooled vectors only, see
            `llm_collapse.backends.vllm`).
        dtype: ``None``/``"auto"`` (bf16 on AMX CPUs and bf16 GPUs, else fp32), ``"bf16"``,
            ``"fp16"`` or ``"fp32"``.
        quantization: None, ``"nf4"`` or ``"int8"`` (bitsandbytes; CPU or CUDA).
        max_length: Token cap per text (per copy of the text for echo); defaults to the spec's.
        device: ``None``/``"auto"`` (CUDA if present, else CPU), ``"cpu"``, ``"cuda:1"``...
        pooling: Override the spec's pooling (``"mean"`` or ``"last"``), e.g. last-token echo.
        batch_size: Default most texts per forward pass.
        max_tokens_per_batch: Most padded tokens per forward pass.
        attn_implementation: Override the spec's transformers attention backend (``"eager"`` to read
            attention weights, ``"chunked"``/``"fused"`` for Gemma 2's softcap). Left None, a spec asking for
            ``"chunked"`` runs ``"fused"`` (flex_attention) on CUDA (`choose_attention`; logged).
        tensor_parallel_size: GPUs to shard over (``backend="vllm"`` only).
        backend_options: Extra `VLLMBackend` arguments (``max_model_len``, ``kv_cache_gib``, ``engine_kwargs``,
            ``engine_env``, ``verbose``) for ``backend="vllm"``.
        interventions: Applied at load time and kept (``"tempscale:0.8"``, objects, or a list; see
            `llm_collapse.interventions.parse_interventions`); `Embedder.clear_interventions` undoes them.

    Returns:
        An `Embedder` whose ``encode`` returns L2-normalised float32 arrays.
    """
    spec, implied_path = resolve_spec(name)
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"Unknown quantization {quantization!r}; allowed: None, {', '.join(QUANTIZATIONS)}")
    if attn_implementation is not None:
        spec = replace(spec, attn_implementation=attn_implementation)
    if pooling is not None:
        if pooling not in POOLINGS:
            raise ValueError(f"Unknown pooling {pooling!r}; allowed: {', '.join(POOLINGS)}")
        spec = replace(spec, pooling=pooling)
    if max_length is not None and (not isinstance(max_length, int) or max_length < 2):
        raise ValueError(f"max_length must be an integer >= 2, got {max_length!r}")
    stack = parse_interventions(interventions)  # bad specs fail before any weights are read
    check_transformers_version(spec)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if attn_implementation is None and backend == "hf":  # the spec's default: the fastest exact kernel here
        spec = replace(
            spec, attn_implementation=choose_attention(spec.name, spec.attn_implementation, torch_device)
        )
    weights = resolve_weights(
        spec.name,
        spec.hub_id,
        spec.source,
        path if path is not None else implied_path,
        revision=spec.revision,
    )
    if backend == "vllm":
        from llm_collapse.backends.vllm import VLLMBackend

        vllm = VLLMBackend(
            spec,
            weights,
            device=torch_device,
            dtype=torch_dtype,
            quantization=quantization,
            tensor_parallel_size=tensor_parallel_size,
            **(backend_options or {}),
        )
        loaded: Backend = vllm
    else:
        vllm = None
        loaded = HFBackend(spec, weights, device=torch_device, dtype=torch_dtype, quantization=quantization)
    limit = max_length or spec.max_length or _default_max_length(spec, loaded.max_positions)
    _check_positions(spec.name, limit, loaded)
    logger.info("Loaded %s from %s (%s, max_length=%d)", spec.name, weights.source, torch_dtype, limit)
    embedder = Embedder(
        spec, loaded, max_length=limit, batch_size=batch_size, max_tokens_per_batch=max_tokens_per_batch
    )
    if stack.parts:
        embedder.apply_interventions(stack)
    if vllm is not None:
        vllm.start()  # start the engine now, with the load-time interventions, so load errors surface here
    return embedder


def _check_positions(name: str, limit: int, backend: Backend) -> None:
    """Absolute-position models cannot go past their position table; RoPE models may (with a warning)."""
    positions = backend.max_positions
    if positions is None or limit <= positions:
        return
    if not backend.has_rope:
        raise ValueError(
            f"max_length={limit} exceeds {name!r}'s {positions} absolute positions; use max_length <= {positions}"
        )
    logger.warning(
        "%s: max_length=%d is beyond the model's %d positions (extrapolation)", name, limit, positions
    )


def _default_max_length(spec, max_positions: int | None) -> int:
    positions = max_positions or 512
    if isinstance(spec.input_format, EchoFormat):
        return max(2, (positions - _ECHO_TEMPLATE_ROOM) // 2)
    return positions
