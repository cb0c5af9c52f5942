"""Backends run the model: ``hf`` (transformers/Accelerate) and ``vllm`` (optional: a vLLM engine in a subprocess,
returning pooled vectors). Heavy imports stay inside each backend."""

from __future__ import annotations

BACKENDS: tuple[str, ...] = ("hf", "vllm")
QUANTIZATIONS: tuple[str, ...] = ("nf4", "int8")
"""bitsandbytes quantizations (`llm_collapse.backends.hf`); here so that the command lines' help names them
without importing transformers."""
