"""RoPE baselines through config RoPE parameters: NTK (base override), dynamic NTK, YaRN, linear PI.

Mechanism: transformers computes rotary frequencies once, when the model's ``*RotaryEmbedding`` module is
built from ``config.rope_parameters``. Each intervention deep-copies that module's config, edits the RoPE
parameters of the copy, builds a fresh rotary module of the same class from it, and swaps it in; on exit the
original module object is put back, so the model is restored exactly and its own config is never touched.

Gotchas recorded here:

- NTK as LongEmbed ran it is only a ``rope_theta`` override (Table 6 for e5-mistral: 3e4 / 5e4 / 1e5 for
  8k / 16k / 32k), no ``rope_scaling`` dict.
- ``dynamic`` treats the *config's* ``max_position_embeddings`` as the trained length and is a no-op below
  it; e5-mistral's config says 32768, so the copy's ``max_position_embeddings`` is set to the trained length
  explicitly (LongEmbed: 4096).
- YaRN multiplies cos and sin by ``attention_factor`` (default 0.1 ln(factor) + 1), so logits are multiplied
  by its square: a hidden temperature. ``attention_factor=1`` separates the frequency change from it.
- PI: ``pi:S`` interpolates every text (Chen et al.; transformers' ``linear``), a static change that keeps
  prefix sharing exact. LongEmbed kept original positions up to the trained length L0 and interpolated only
  beyond: ``get_position_ids(mode="interpolate")`` (``src/encoder_model.py``) multiplies position ids by
  ``encode_max_length // L0`` when the (padded) input has at most L0 tokens and leaves them alone otherwise,
  which on a position table stretched s times (APE: E5-Base-4k, the paper's E_t[i s] = E_o[i]) gives original
  positions below L0 and p / s above. Its released code has no RoPE PI path (``get_rope_scaling_config``,
  a linear ``rope_scaling`` dict, is defined in ``src/model_utils.py`` but never called, and its results hold
  only ``e5-base-4k_interpolate``). The rule applied with a linear factor s is the reading that fits the
  paper's e5-mistral PI row (position ids times 8 on plain RoPE would wreck the short inputs it scores well
  on), so ``longembed-pi:S`` (``keep_trained=True``) is that inferred rule, decided per text by its own
  length. APE tables are not stretched here: both refuse absolute-position models.
- Gemma 3 keeps one RoPE dict per layer type (sliding: theta 1e4, full: 1e6). By default only the
  ``full_attention`` layers are changed, as in Gemma 3's own long-context recipe (sliding layers never see
  distances beyond their window while the window is kept); ``layer_types="all"`` changes both.

On vLLM (`Intervention.vllm_settings`) NTK, YaRN and PI become ``hf_overrides={"rope_parameters": ...}``
computed by `RopeIntervention.rebuilt_config` on the text config, so the per-layer-type rule is the same as for
``hf``; vLLM's YaRN table only covers ``original_max_position_embeddings * factor`` positions. Dynamic NTK is
refused: vLLM's ``dynamic`` is a static NTK base fixed at the table length, not transformers' per-length rule.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator

import torch
from torch import nn

from llm_collapse.interventions.attention import captured_inputs, patched_attributes
from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    VLLMSettings,
    check_positive_finite,
    format_number,
    not_on_vllm,
    trained_length,
)


def rotary_modules(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """``(parent, attribute, module)`` for every rotary-embedding module built from a config."""
    found = []
    for parent in model.modules():
        for attr, child in parent.named_children():
            if type(child).__name__.endswith("RotaryEmbedding") and hasattr(child, "config"):
                found.append((parent, attr, child))
    return found


class RopeIntervention(Intervention):
    """Base for RoPE baselines: subclasses say how one RoPE parameter dict changes."""

    kind = "rope"

    def __init__(self, *, layer_types: tuple[str, ...] | str | None = None) -> None:
        if isinstance(layer_types, str) and layer_types != "all":
            layer_types = (layer_types,)
        self.layer_types = layer_types

    def updated(self, rope: dict, config, context: ModelContext) -> dict:
        """The new RoPE parameter dict for one (layer type's) dict ``rope``."""
        raise NotImplementedError

    def trained_length(self, config, context: ModelContext) -> int:
        return trained_length(config, context)

    def _targets(self, config) -> list[str | None]:
        parameters = config.rope_parameters
        if not isinstance(parameters, dict):
            raise InterventionError(f"{self.slug}: the config has no RoPE parameters")
        if "rope_type" in parameters or "rope_theta" in parameters:  # one dict for all layers
            return [None]
        available = sorted(parameters)
        wanted = available if self.layer_types == "all" else list(self.layer_types or ["full_attention"])
        missing = sorted(set(wanted) - set(available))
        if missing:
            raise InterventionError(
                f"{self.slug}: layer types {missing} have no RoPE parameters; available: {available}"
            )
        return wanted

    def rebuilt_config(self, config, context: ModelContext):
        """A deep copy of ``config`` with this intervention's RoPE parameters."""
        new = copy.deepcopy(config)
        for layer_type in self._targets(config):
            rope = dict(new.rope_parameters if layer_type is None else new.rope_parameters[layer_type])
            rope = self.updated(rope, new, context)
            if layer_type is None:
                new.rope_parameters = rope
            else:
                new.rope_parameters[layer_type] = rope
        return new

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        found = rotary_modules(model)
        if not found:
            raise self._no_rope(context)
        swaps = []
        for parent, attr, module in found:
            fresh = type(module)(config=self.rebuilt_config(module.config, context))
            if (buffer := next(module.buffers(), None)) is not None:
                fresh.to(buffer.device)
            swaps.append((parent, attr, module, fresh))
        try:
            for parent, attr, _, fresh in swaps:
                setattr(parent, attr, fresh)
            yield
        finally:
            for parent, attr, original, _ in swaps:
                setattr(parent, attr, original)

    def _rope_overrides(self, config, context: ModelContext) -> tuple[VLLMSettings, dict]:
        """vLLM settings carrying this intervention's RoPE parameters, and those parameters (what the
        subclasses that vLLM can express return from `vllm_settings`)."""
        if not isinstance(getattr(config, "rope_parameters", None), dict):
            raise self._no_rope(context)
        rebuilt = self.rebuilt_config(config, context)
        settings = VLLMSettings(hf_overrides={"rope_parameters": copy.deepcopy(rebuilt.rope_parameters)})
        return settings, rebuilt.rope_parameters

    def _no_rope(self, context: ModelContext) -> NotApplicable:
        return NotApplicable(
            f"{self.slug} needs a RoPE model; {context.name} has no rotary embedding (absolute positions)"
        )


def _check_factor(name: str, factor: float) -> float:
    return check_positive_finite(name, factor, minimum=1.0, inclusive=True)


class NTK(RopeIntervention):
    """NTK-aware scaling as a RoPE base override: ``rope_theta = theta`` (LongEmbed's ``--rope_theta``)."""

    def __init__(self, theta: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.theta = check_positive_finite("theta", theta)

    @property
    def slug(self) -> str:
        return f"ntk-theta{format_number(self.theta)}"

    def params(self) -> dict:
        return {
            "method": "ntk",
            "rope_theta": self.theta,
            "layer_types": self.layer_types or "full_attention/all",
        }

    def updated(self, rope: dict, config, context: ModelContext) -> dict:
        return {**rope, "rope_theta": self.theta}

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        return self._rope_overrides(config, context)[0]


class DynamicNTK(RopeIntervention):
    """transformers' ``dynamic`` RoPE (NTK base grows with length beyond the trained length)."""

    def __init__(self, factor: float, trained_length: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.factor = _check_factor("dynamic NTK factor", factor)
        self.explicit_length = (
            None if trained_length is None else int(check_positive_finite("trained_length", trained_length))
        )

    @property
    def slug(self) -> str:
        length = f"-o{self.explicit_length}" if self.explicit_length else ""
        return f"dynamic-f{format_number(self.factor)}{length}"

    def params(self) -> dict:
        return {
            "method": "dynamic",
            "factor": self.factor,
            "trained_length": self.explicit_length or "model default",
        }

    def trained_length(self, config, context: ModelContext) -> int:
        return self.explicit_length or super().trained_length(config, context)

    def rebuilt_config(self, config, context: ModelContext):
        new = super().rebuilt_config(config, context)
        new.max_position_embeddings = self.trained_length(
            config, context
        )  # dynamic reads the trained length here
        return new

    def updated(self, rope: dict, config, context: ModelContext) -> dict:
        return {**rope, "rope_type": "dynamic", "factor": self.factor}

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        """0: transformers' dynamic rule recomputes the base from each forward's length (not bounded here,
        though it leaves the base alone up to the trained length: not relied on, its caching is internal)."""
        return 0

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(
            self.slug,
            "vLLM's 'dynamic' RoPE is a static NTK base fixed at the position-table length, "
            "not transformers' rule that grows the base with each input's length",
        )


class YaRN(RopeIntervention):
    """YaRN (``rope_type="yarn"``) with its default attention factor, or a given one (1.0: no temperature)."""

    def __init__(
        self,
        factor: float,
        original_length: int | None = None,
        attention_factor: float | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.factor = _check_factor("YaRN factor", factor)
        self.original_length = (
            None
            if original_length is None
            else int(check_positive_finite("original_length", original_length))
        )
        self.attention_factor = (
            None if attention_factor is None else check_positive_finite("attention_factor", attention_factor)
        )

    @property
    def slug(self) -> str:
        length = f"-o{self.original_length}" if self.original_length else ""
        af = f"-af{format_number(self.attention_factor)}" if self.attention_factor is not None else ""
        return f"yarn-f{format_number(self.factor)}{length}{af}"

    def params(self) -> dict:
        return {
            "method": "yarn",
            "factor": self.factor,
            "original_max_position_embeddings": self.original_length or "model trained length",
            "attention_factor": self.attention_factor
            if self.attention_factor is not None
            else "default 0.1 ln(factor) + 1",
        }

    def updated(self, rope: dict, config, context: ModelContext) -> dict:
        new = {**rope, "rope_type": "yarn", "factor": self.factor}
        new["original_max_position_embeddings"] = self.original_length or self.trained_length(config, context)
        if self.attention_factor is not None:
            new["attention_factor"] = self.attention_factor
        else:
            new.pop("attention_factor", None)
        return new

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        """The RoPE override, and the positions vLLM's YaRN table covers (the smallest over the changed
        layer types)."""
        settings, params = self._rope_overrides(config, context)
        dicts = [params] if "rope_type" in params else list(params.values())
        positions = min(
            int(d["original_max_position_embeddings"] * d["factor"])
            for d in dicts
            if d.get("rope_type") == "yarn"
        )
        return dataclasses.replace(settings, max_positions=positions)


class PositionInterpolation(RopeIntervention):
    """Linear position interpolation (``rope_type="linear"``): positions divided by ``factor``.

    Args:
        factor: s >= 1.
        keep_trained: Texts of at most L0 tokens (their own count) keep their original positions; longer
            ones are interpolated (LongEmbed's rule, see the module docstring; ``longembed-pi``).
        trained_length: L0 for ``keep_trained``; None: the model's trained length.
    """

    def __init__(
        self, factor: float, *, keep_trained: bool = False, trained_length: int | None = None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.factor = _check_factor("PI factor", factor)
        self.keep_trained = bool(keep_trained)
        self.explicit_length = (
            None if trained_length is None else int(check_positive_finite("trained_length", trained_length))
        )

    @property
    def slug(self) -> str:
        keep = "-keep" if self.keep_trained else ""
        length = f"-o{self.explicit_length}" if self.keep_trained and self.explicit_length else ""
        return f"pi-{format_number(self.factor)}{keep}{length}"

    def params(self) -> dict:
        params = {"method": "linear", "factor": self.factor}
        if self.keep_trained:
            params["original_positions_up_to"] = self.explicit_length or "model trained length"
        return params

    def trained_length(self, config, context: ModelContext) -> int:
        return self.explicit_length or super().trained_length(config, context)

    def updated(self, rope: dict, config, context: ModelContext) -> dict:
        return {**rope, "rope_type": "linear", "factor": self.factor}

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        """L0 with ``keep_trained`` (texts of at most L0 tokens keep their positions), else None."""
        return self.trained_length(model.config, context) if self.keep_trained else None

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        if not self.keep_trained:
            with super()._apply(model, context):
                yield
            return
        found = rotary_modules(model)
        if not found:
            raise self._no_rope(context)
        limit = self.trained_length(found[0][2].config, context)
        originals = [(parent, attr, module) for parent, attr, module in found]
        with captured_inputs(model) as state, super()._apply(model, context):
            swaps = [
                (parent, attr, LengthSwitchedRotary(original, getattr(parent, attr), state, limit))
                for parent, attr, original in originals
            ]
            with patched_attributes(swaps):
                yield

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        if self.keep_trained:
            raise not_on_vllm(
                self.slug, "which positions a text gets depends on its length; vLLM's RoPE table is fixed"
            )
        return self._rope_overrides(config, context)[0]


class LengthSwitchedRotary(nn.Module):
    """The original rotary tables for texts of at most ``limit`` tokens, the interpolated module's beyond.

    Texts are told apart by their own token count (`captured_inputs`), not the padded batch length.
    """

    def __init__(self, original: nn.Module, interpolated: nn.Module, state: dict, limit: int) -> None:
        super().__init__()
        self.original = original
        self.interpolated = interpolated
        self.state = state
        self.limit = limit

    def forward(self, x, *args, **kwargs):
        cos, sin = self.original(x, *args, **kwargs)
        lengths = self.state.get("lengths")
        if lengths is None:
            lengths = torch.full((x.shape[0],), x.shape[1], device=x.device)
        longer = lengths.to(cos.device) > self.limit
        if not bool(longer.any()):
            return cos, sin
        cos_i, sin_i = self.interpolated(x, *args, **kwargs)
        pick = longer.view(-1, 1, 1)
        return torch.where(pick, cos_i, cos), torch.where(pick, sin_i, sin)
