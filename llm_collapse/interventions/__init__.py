"""Reversible interventions on a loaded embedder's attention and positions.

Each is a context manager (``with TempScale(0.8).apply(model): ...``, or ``with embedder.intervene("tempscale:0.8"):``)
and a load-time option (``load_embedder(..., interventions=["ntk:1e5"])``), with a stable ``slug`` for cache keys
and report labels and a ``params()`` dict for run metadata. See `parse_interventions` for the string grammar.
"""

from __future__ import annotations

from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    Stack,
    VLLMSettings,
)
from llm_collapse.interventions.parse import METHODS, parse_interventions
from llm_collapse.interventions.rope import NTK, DynamicNTK, PositionInterpolation, YaRN
from llm_collapse.interventions.tempscale import TempScale, TempScaleLog, TempScaleLogPosition
from llm_collapse.interventions.window import SlidingWindowOff

__all__ = [
    "METHODS",
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
]


def __getattr__(name: str):
    if name == "SelfExtend":  # its module imports more machinery; load it on first use
        from llm_collapse.interventions.selfextend import SelfExtend

        return SelfExtend
    if name in ("LongEmbedNTK", "LongEmbedPI", "LongEmbedSelfExtend"):  # they import SelfExtend
        from llm_collapse.interventions import longembed

        return getattr(longembed, name)
    raise AttributeError(name)
