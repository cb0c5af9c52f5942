"""Interventions -> engine settings: what one intervention stack asks of a vLLM engine, and how stacks merge.

Each intervention states its own engine settings (`Intervention.vllm_settings`, which raises `NotApplicable` for
what vLLM cannot express); this module only folds them into one `Plan`. RoPE baselines become
``hf_overrides={"rope_parameters": ...}`` computed by the intervention itself on a copy of the config (so Gemma 3's
per-layer-type dicts and the default "full_attention only" rule are the same as for ``hf``); ``window:off``
becomes ``sliding_window=None``; a constant TempScale becomes a factor on each attention layer's scale (and,
``placement="after"``, its soft cap), which the backend sets on the running engine. Refused with one line:
``tempscale-log`` (one scale per layer is shared by every request in a batch), ``selfextend`` (its own attention
computation), and ``dynamic`` (vLLM's "dynamic" is a static NTK base fixed at the table length, not transformers'
per-length rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llm_collapse.interventions.base import Intervention, ModelContext, Stack
from llm_collapse.models import text_config


@dataclass(frozen=True)
class Plan:
    """What one intervention stack asks of the engine."""

    overrides: dict = field(default_factory=dict)  # hf_overrides (rope_parameters, sliding_window)
    scale: dict = field(default_factory=dict)  # layer index (None: all) -> (scale factor, softcap factor)
    yarn_positions: int | None = None  # vLLM's YaRN table covers original_max_position_embeddings * factor


def _flatten(parts: Sequence[Intervention]) -> list[Intervention]:
    out: list[Intervention] = []
    for part in parts:
        out.extend(_flatten(part.parts) if isinstance(part, Stack) else [part])
    return out


def plan_interventions(stack: Stack, config, context: ModelContext) -> Plan:
    """Folds what each intervention of ``stack`` asks of the engine (`Intervention.vllm_settings`) into one plan.

    Raises `NotApplicable` (an `InterventionError`) for what vLLM cannot express, before any engine is touched.
    """
    text = text_config(config)
    overrides: dict = {}
    scale: dict = {}
    yarn_positions = None
    for part in _flatten(stack.parts):
        settings = part.vllm_settings(text, context)
        overrides.update(settings.hf_overrides)
        for layer, (tau, cap) in settings.temperatures.items():
            old_scale, old_cap = scale.get(layer, (1.0, 1.0))
            scale[layer] = (old_scale / tau, old_cap * cap)
        if settings.max_positions is not None:
            yarn_positions = settings.max_positions
    return Plan(overrides, scale, yarn_positions)


def merge_plans(plans: Sequence[Plan]) -> Plan:
    """One plan for nested `VLLMBackend.intervene` blocks: later overrides win, scale factors multiply, the last
    YaRN length stands."""
    overrides: dict = {}
    scale: dict = {}
    yarn = None
    for plan in plans:
        overrides.update(plan.overrides)
        for layer, (s, c) in plan.scale.items():
            old_s, old_c = scale.get(layer, (1.0, 1.0))
            scale[layer] = (old_s * s, old_c * c)
        yarn = plan.yarn_positions if plan.yarn_positions is not None else yarn
    return Plan(overrides, scale, yarn)
