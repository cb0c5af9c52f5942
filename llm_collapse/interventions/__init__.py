"""Reversible interventions on a loaded embedder's attention and positions.

Each is a context manager (``with TempScale(0.8).apply(model): ...``, or ``with embedder.intervene("tempscale:0.8"):``)
and a load-time option (``load_embedder(..., interventions=["ntk:1e5"])``), with a stable ``slug`` for cache keys
and report labels and a ``params()`` dict for run metadata. See `parse_interventions` for the string grammar.

The intervention classes load on first use (module ``__getattr__``): their modules import torch and
transformers, which `METHODS`, `parse_interventions` of ``base`` and the command lines' help do not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    Stack,
    VLLMSettings,
)
from llm_collapse.interventions.parse import METHODS, Method, parse_interventions, parse_method

if TYPE_CHECKING:
    from llm_collapse.interventions.rope import NTK, DynamicNTK, PositionInterpolation, YaRN
    from llm_collapse.interventions.tempscale import TempScale, TempScaleLog, TempScaleLogPosition
    from llm_collapse.interventions.window import SlidingWindowOff

__all__ = [
    "METHODS",
    "Method",
    "NTK",
    "DynamicNTK",
    "Intervention",
    "InterventionError",
    "ModelContext",
    "NotApplicable",
    "PositionInterpolation",
    "SlidingWindowOff",
    "Stack",
    "TempScale",
    "TempScaleLog",
    "TempScaleLogPosition",
    "VLLMSettings",
    "YaRN",
    "parse_interventions",
    "parse_method",
]


# class name -> the module that defines it, imported when the name is first asked for
_LAZY = {
    **dict.fromkeys(("NTK", "DynamicNTK", "PositionInterpolation", "YaRN"), "rope"),
    **dict.fromkeys(("TempScale", "TempScaleLog", "TempScaleLogPosition"), "tempscale"),
    "SlidingWindowOff": "window",
    "SelfExtend": "selfextend",
    **dict.fromkeys(("LongEmbedNTK", "LongEmbedPI", "LongEmbedSelfExtend"), "longembed"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'llm_collapse.interventions' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"llm_collapse.interventions.{_LAZY[name]}"), name)
    globals()[name] = value
    return value
