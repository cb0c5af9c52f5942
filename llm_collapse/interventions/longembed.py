"""LongEmbed's context-extension runs as named presets (dwzhu-pku/LongEmbed at 033dc4a, Zhu et al. 2024).

Each preset is one intervention made of the existing ones (same seams, exact restoration), with L0 the base
length of its switches and log factors and n a text's own token count.

==============================  =====================================================================
``longembed-ntk:THETA[:L0]``    ``rope_theta = THETA``; queries times max(1, ln n / ln L0); window off
``longembed-ntk:THETA:nolog``   ``rope_theta = THETA``; window off (e5-mistral's NTK run as executed)
``longembed-se:G:W[:L0]``       SelfExtend (G, W) only past L0, LongEmbed's log factor; window off
``longembed-pi:S[:L0]``         linear PI by S for texts longer than L0, original positions up to L0;
                                window off
==============================  =====================================================================

What the code does, and where (``src/``):

- NTK: ``encoder_model.RetrievalModel.__init__`` sets ``config.rope_theta = args.rope_theta`` for mistral and
  e5rope, and for mistral ``sliding_window = None`` and ``flash_attention_2`` (every run, not only NTK). The
  log factor: ``model_utils.replace_with_xformers`` multiplies queries by max(1, log_4096(kv_seq_len)) in
  ``MistralAttention.forward`` and by max(1, ln n_i / ln 512) in ``BertSelfAttention.forward``;
  ``modeling_e5rope.E5RopeSelfAttention.forward`` has the base-512 per-text factor built in.
- SelfExtend, causal (``self_extend_patch.mistral_flash_self_extend_forward``, ``scale_base=4096`` from
  ``model_utils.use_self_extend``): grouping switched off (g=1, w=4096) when ``kv_seq_len <= 4096``, so it acts
  only when n > L0; queries at position p times clip(ln(p + 1) / ln 4096, min=1).
- SelfExtend, bidirectional (``e5rope_self_extend_forward``): plain attention when ``q_len < 512``, so it acts
  when n >= L0; the mirrored rule for keys after the query; logits times max(1, log_512 kv_seq_len). Which rule
  a model gets follows its attention modules' ``is_causal``.
- PI: see `llm_collapse.interventions.rope` (``get_position_ids(mode="interpolate")``).

Decisions:

- L0 defaults to the model's trained length (`ModelContext.trained_length`, else ``max_position_embeddings``):
  LongEmbed hard-coded 4096 for Mistral and 512 for BERT and E5-RoPE, their trained lengths.
- n is each text's own token count. LongEmbed's Mistral xformers patch and E5-RoPE SelfExtend patch used the
  padded batch length (batches of 4), so a text's embedding depended on the texts batched with it; the BERT
  and E5-RoPE attention used per-text counts, and the Mistral SelfExtend runs had batch 1 padded to a multiple
  of 8 (n <= 4096 exactly when the padded length is). Here batching (token budget, length sorting, prefix
  sharing) must never change an embedding, so every switch and factor reads the text's own count.
- ``longembed-ntk`` includes the log factor, as the paper states (Appendix B: attention scaling "used by
  default for all tested models") and as the code ran for BERT and E5-RoPE. For e5-mistral the patch never
  ran: the loader forces ``flash_attention_2``, and in the pinned transformers 4.38.2 ``MistralFlashAttention2``
  overrides ``forward``, so the patched ``MistralAttention.forward`` is dead code. ``:nolog`` is that run.
- The window is switched off wherever the model has one (LongEmbed's ``sliding_window = None``); on Gemma 2/3
  that widens the sliding layers, which LongEmbed never ran.
- RoPE changes apply to every layer type (LongEmbed set the one ``config.rope_theta``; Gemma 3 has two).
- Not reproduced: fp16 autocast and the flash/xformers kernels (rounding only), and the flash SelfExtend's
  log-sum-exp merge of its two partial softmaxes (written for LongLM's left-padded generation); we compute
  the merged softmax directly, which is what that merge equals on an unpadded input.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from torch import nn

from llm_collapse.interventions.attention import attention_modules
from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    Stack,
    VLLMSettings,
    check_base_length,
    format_number,
    not_on_vllm,
    tightest,
    trained_length,
)
from llm_collapse.interventions.rope import NTK, PositionInterpolation, rotary_modules
from llm_collapse.interventions.selfextend import SelfExtend
from llm_collapse.interventions.tempscale import TempScaleLog, TempScaleLogPosition
from llm_collapse.interventions.window import SlidingWindowOff, has_sliding_window

logger = logging.getLogger(__name__)

__all__ = ["LongEmbedNTK", "LongEmbedPI", "LongEmbedPreset", "LongEmbedSelfExtend"]

_WINDOW = "off where the model has one (LongEmbed: config.sliding_window = None)"


class LongEmbedPreset(Intervention):
    """Base of the presets: `components` says which interventions make it up on a given model."""

    kind = "rope"

    def __init__(self, base_length: float | None = None) -> None:
        self.base_length = check_base_length(base_length)

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("rope", "window", "attention")

    def _length_slug(self) -> str:
        return "" if self.base_length is None else f"-o{self.base_length}"

    def _length_param(self) -> int | str:
        return self.base_length if self.base_length is not None else "model trained length"

    def base(self, model: nn.Module, context: ModelContext) -> int:
        """L0 on this model."""
        return self.base_length if self.base_length is not None else trained_length(model.config, context)

    def components(self, model: nn.Module, context: ModelContext) -> list[Intervention]:
        """The interventions this preset is made of on ``model``."""
        raise NotImplementedError

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        """Its components' tightest bound: L0 for the log factor and the PI switch, L0 or L0 - 1 for the
        SelfExtend switch (causal or bidirectional rule); the RoPE base, the window and SelfExtend's per-position
        factor do not depend on the length."""
        return tightest(p.length_free_up_to(model, context) for p in self.components(model, context))

    def _window(self, model: nn.Module) -> list[Intervention]:
        return [SlidingWindowOff()] if has_sliding_window(model) else []

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        if not rotary_modules(model):
            raise NotApplicable(
                f"{self.slug} needs a RoPE model; {context.name} has no rotary embedding (absolute positions)"
            )
        parts = Stack(self.components(model, context))  # entered in the order Stack uses
        logger.debug("%s on %s: %s", self.slug, context.name, parts.slug)
        with parts.apply(model, context):
            yield


class LongEmbedNTK(LongEmbedPreset):
    """LongEmbed's NTK run: RoPE base THETA, its log attention factor (unless ``log_scale=False``), no window.

    Args:
        theta: New ``rope_theta`` (LongEmbed: 1e5 for 32k).
        base_length: L0 of the log factor; None: the model's trained length.
        log_scale: False reproduces e5-mistral's run as executed (its log-scaling patch never ran).
    """

    def __init__(self, theta: float, base_length: float | None = None, *, log_scale: bool = True) -> None:
        super().__init__(base_length)
        self.ntk = NTK(theta, layer_types="all")
        self.log_scale = bool(log_scale)
        if self.base_length is not None and not self.log_scale:
            raise InterventionError(
                "longembed-ntk: L0 only sets the log factor's base; give longembed-ntk:THETA:L0 or "
                "longembed-ntk:THETA:nolog, not both"
            )

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("rope", "window", "attention") if self.log_scale else ("rope", "window")

    @property
    def slug(self) -> str:
        log = "log" if self.log_scale else "nolog"
        return f"longembed-ntk-{log}-theta{format_number(self.ntk.theta)}{self._length_slug()}"

    def params(self) -> dict:
        return {
            "preset": "longembed-ntk",
            "rope_theta": self.ntk.theta,
            "rope_layer_types": "all",
            "log_scale": "queries x max(1, ln n / ln L0), n = the text's tokens" if self.log_scale else "off",
            "L0": self._length_param() if self.log_scale else None,
            "sliding_window": _WINDOW,
        }

    def components(self, model: nn.Module, context: ModelContext) -> list[Intervention]:
        log = [TempScaleLog(self.base(model, context))] if self.log_scale else []
        return [self.ntk, *log, *self._window(model)]

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        if self.log_scale:
            raise not_on_vllm(
                self.slug, "its log factor depends on each text's length; use longembed-ntk:THETA:nolog"
            )
        overrides = dict(self.ntk.vllm_settings(config, context).hf_overrides)
        if getattr(config, "sliding_window", None):
            overrides.update(SlidingWindowOff().vllm_settings(config, context).hf_overrides)
        return VLLMSettings(hf_overrides=overrides)


class LongEmbedSelfExtend(LongEmbedPreset):
    """LongEmbed's SelfExtend run: grouping only past L0, its log factor, no window (module docstring).

    Args:
        group_size: g (LongEmbed: 9 for 32k).
        window: w (LongEmbed: 512 for e5-mistral, 64 for E5-RoPE at 4k).
        base_length: L0; None: the model's trained length.
    """

    replaces_attention = True

    def __init__(self, group_size: int, window: int, base_length: float | None = None) -> None:
        super().__init__(base_length)
        self.selfextend = SelfExtend(group_size, window)

    @property
    def slug(self) -> str:
        se = self.selfextend
        return f"longembed-se-g{se.group_size}-w{se.window}{self._length_slug()}"

    def params(self) -> dict:
        return {
            "preset": "longembed-se",
            "group_size": self.selfextend.group_size,
            "window": self.selfextend.window,
            "L0": self._length_param(),
            "causal_rule": "grouping when n > L0; queries at position p x max(1, ln(p+1) / ln L0)",
            "bidirectional_rule": "grouping when n >= L0; queries x max(1, ln n / ln L0)",
            "sliding_window": _WINDOW,
        }

    def components(self, model: nn.Module, context: ModelContext) -> list[Intervention]:
        causal = {bool(getattr(m, "is_causal", True)) for _, m in attention_modules(model)}
        if len(causal) != 1:
            raise InterventionError(
                f"{self.slug}: {context.name} mixes causal and bidirectional attention layers; LongEmbed's "
                "SelfExtend has one rule per model"
            )
        base = self.base(model, context)
        g, w = self.selfextend.group_size, self.selfextend.window
        if causal.pop():
            parts: list[Intervention] = [SelfExtend(g, w, min_length=base + 1), TempScaleLogPosition(base)]
        else:
            parts = [SelfExtend(g, w, min_length=base), TempScaleLog(base)]
        return [*parts, *self._window(model)]

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(self.slug, "it computes attention itself (grouped and neighbour logits)")


class LongEmbedPI(LongEmbedPreset):
    """LongEmbed's PI run: linear interpolation by S for texts longer than L0, original positions up to L0
    (`llm_collapse.interventions.rope` says why), no window.

    Args:
        factor: s (LongEmbed: encode_max_length // L0, 8 for 32k).
        base_length: L0; None: the model's trained length.
    """

    def __init__(self, factor: float, base_length: float | None = None) -> None:
        super().__init__(base_length)
        self.pi = PositionInterpolation(
            factor, keep_trained=True, trained_length=self.base_length, layer_types="all"
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("rope", "window")

    @property
    def slug(self) -> str:
        return f"longembed-pi-{format_number(self.pi.factor)}{self._length_slug()}"

    def params(self) -> dict:
        return {
            "preset": "longembed-pi",
            "factor": self.pi.factor,
            "rope_layer_types": "all",
            "original_positions_up_to": self._length_param(),
            "sliding_window": _WINDOW,
        }

    def components(self, model: nn.Module, context: ModelContext) -> list[Intervention]:
        return [self.pi, *self._window(model)]

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(self.slug, "which positions a text gets depends on its length")
