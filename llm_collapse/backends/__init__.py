"""Backends run the model: ``hf`` (transformers/Accelerate). Heavy imports stay inside each backend."""

from __future__ import annotations

BACKENDS: tuple[str, ...] = ("hf",)
