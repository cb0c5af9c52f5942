"""`Intervention`: a reversible change to a loaded model, applied as a context manager.

Every intervention goes through a library seam (an attention module's ``scaling``, a registered attention
function, a RoPE module rebuilt from config RoPE parameters, the config's sliding window), restores the model
exactly on exit (the original objects and floats are put back, nothing is recomputed), and raises if it finds
nothing to act on: a silent no-op would make a "TempScale" column indistinguishable from the baseline.

A backend that runs the model outside this process (vLLM) cannot enter an intervention on modules; each
intervention says itself what it asks of such an engine (`Intervention.vllm_settings`), or raises
`NotApplicable`. `NotApplicable` is also what a valid intervention raises on a model it has nothing to act on,
and what a measurement raises when it cannot be taken under the active interventions; runs record it as "not
applicable" instead of failing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llm_collapse.errors import UserError
from llm_collapse.models import text_config

if TYPE_CHECKING:  # annotations only: `METHODS` and the CLI's help load without torch
    from torch import nn

    from llm_collapse.adapters.inputs import EncodedText

KINDS: tuple[str, ...] = ("attention", "rope", "window", "extension")
ONE_PER_STACK: tuple[str, ...] = ("rope", "window", "extension")
"""Kinds a `Stack` holds at most one intervention of (two would act on the same thing)."""


POSTHOC_KIND = "posthoc"
"""`Intervention.kind` of the post-hoc transforms (`llm_collapse.interventions.posthoc.PostHoc`): they change
the vectors, not the model (`llm_collapse.interventions.parse.Method` splits them off)."""


class InterventionError(UserError, ValueError):
    """An intervention that cannot apply (bad value, unsupported architecture, nothing to act on)."""


class NotApplicable(InterventionError):
    """A valid intervention this model or backend cannot express (or a measurement it rules out): runs record
    the cell as "not applicable" with this message."""


def not_on_vllm(slug: str, why: str) -> NotApplicable:
    """The one-line refusal of an intervention vLLM cannot express."""
    return NotApplicable(f"{slug} is not supported on backend='vllm': {why}; use backend='hf'")


@dataclass(frozen=True)
class VLLMSettings:
    """What one intervention asks of a vLLM engine (`Intervention.vllm_settings`).

    Attributes:
        hf_overrides: Config values baked into the engine at its start (``rope_parameters``,
            ``sliding_window``).
        temperatures: Layer index -> ``(tau, softcap factor)``: that layer's attention scale is divided by
            tau and its logit softcap multiplied by the factor, on the running engine.
        max_positions: Most positions the engine's RoPE table covers with this change (None: not limited).
    """

    hf_overrides: dict = field(default_factory=dict)
    temperatures: dict[int, tuple[float, float]] = field(default_factory=dict)
    max_positions: int | None = None


@dataclass(frozen=True)
class ModelContext:
    """What an intervention may need to know about the model beyond its modules.

    Attributes:
        name: Embedder name, for messages.
        trained_length: Context length the model was trained at (RoPE baselines default to it).
    """

    name: str = "model"
    trained_length: int | None = None


class Intervention:
    """Base class. Subclasses set ``kind`` and implement `slug`, `params` and `_apply`."""

    kind: str = "attention"
    #: True when the intervention computes attention itself (SelfExtend): it must be entered before any
    #: intervention that wraps the attention function, so `Stack` enters it first.
    replaces_attention: bool = False

    @property
    def slug(self) -> str:
        """Short stable label for cache keys and report columns, e.g. ``tempscale-0.8``."""
        raise NotImplementedError

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every kind this intervention changes (a preset can change positions and the window together);
        `Stack` allows one intervention per "rope" and "window" kind."""
        return (self.kind,)

    def params(self) -> dict:
        """Plain-data parameters for run metadata."""
        raise NotImplementedError

    def _apply(self, model: nn.Module, context: ModelContext) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    @contextlib.contextmanager
    def apply(self, model: nn.Module, context: ModelContext | None = None) -> Iterator[None]:
        """Applies the intervention to ``model`` for the duration of the ``with`` block."""
        with self._apply(model, context or ModelContext()):
            yield

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        """What this intervention asks of a vLLM engine, given the model's text ``config``.

        Raises `NotApplicable` where vLLM cannot express it: the default, so an intervention without a vLLM
        mapping is refused rather than ignored."""
        raise not_on_vllm(self.slug, f"no vLLM mapping for {type(self).__name__}")

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        """Whether its effect depends on the input length, which decides prefix sharing (`llm_collapse.encoding.prefix`).

        None (the default): it does not (static RoPE changes, constant temperatures, a window switch), so a
        prefix's states are the first states of the long input's. Otherwise the longest input, in model-input
        tokens, on which it acts the same as on any shorter one (0: none), so that sharing stays exact among
        inputs no longer than that. Reads ``model.config`` and module attributes only (a meta model will do).
        """
        return None

    def token_cap(self, config, context: ModelContext) -> int | None:
        """The most tokens per input while it is active, replacing `Embedder.max_length` (None, the default:
        the embedder's own). LongEmbed's extensions of absolute positions read texts up to S x L0 tokens, where
        ``base`` truncates at the position table (`llm_collapse.interventions.absolute`)."""
        return None

    def describe(self) -> dict:
        return {"slug": self.slug, "kind": self.kind, **self.params()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.slug})"


class InputEmbedding(Intervention):
    """An intervention that embeds each input from forwards of its own (PCW's chunks): the encoding pipeline
    runs the pieces `split_inputs` gives and averages each input's pooled pieces
    (`llm_collapse.encoding.forward`), and ``--dry-run`` costs its `forward_lengths`. Every other intervention
    changes the one forward of an input."""

    def forward_lengths(self, tokens: int, config, context: ModelContext) -> list[int]:
        """The lengths of the forwards that embed one input of ``tokens`` tokens."""
        raise NotImplementedError

    def split_inputs(self, embedder, items: list[EncodedText]) -> tuple[list[EncodedText], list[int]]:
        """The model inputs that embed ``items``, and for each the index of the item it belongs to; an item's
        vector is the mean of its pieces' pooled, unnormalised vectors, L2-normalised."""
        raise NotImplementedError


def check_positive_finite(name: str, value: float, *, minimum: float = 0.0, inclusive: bool = False) -> float:
    """Validates a numeric parameter; the error names the value and what is allowed."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InterventionError(f"{name}={value!r} is not a number") from None
    bad = not math.isfinite(number) or (number < minimum if inclusive else number <= minimum)
    if bad:
        allowed = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise InterventionError(f"{name}={value!r} is not allowed; {name} must be a finite number {allowed}")
    return number


def check_base_length(value: float | None) -> int | None:
    """L0 as given to a method (None passes: the model's trained length): an integer number of tokens > 1."""
    if value is None:
        return None
    number = check_positive_finite("L0", value, minimum=1.0)
    if not float(number).is_integer():
        raise InterventionError(f"L0={value!r} is not allowed; L0 must be an integer number of tokens > 1")
    return int(number)


def trained_length(config, context: ModelContext) -> int:
    """The context length the model was trained at: ``context.trained_length``, else the text config's
    ``max_position_embeddings`` (what RoPE baselines, presets and ``tempscale-log`` default to)."""
    if context.trained_length:
        return int(context.trained_length)
    config = text_config(config)
    length = getattr(config, "max_position_embeddings", None)
    if not length:
        raise InterventionError(
            f"{context.name} states no trained length (no max_position_embeddings in its config); "
            "give the base length explicitly, e.g. tempscale-log:4096"
        )
    return int(length)


def tightest(bounds: Iterable[int | None]) -> int | None:
    """The smallest of several `Intervention.length_free_up_to` answers (None: none depends on the length)."""
    known = [b for b in bounds if b is not None]
    return min(known) if known else None


def format_number(value: float) -> str:
    """Compact, stable number formatting for slugs: 0.8 -> '0.8', 100000 -> '1e5', 4096 -> '4096'."""
    if float(value).is_integer():
        integer = int(value)
        if integer >= 10000 and integer % 10 ** (len(str(integer)) - 1) == 0:
            return f"{integer // 10 ** (len(str(integer)) - 1)}e{len(str(integer)) - 1}"
        return str(integer)
    return f"{value:g}"


class Stack(Intervention):
    """Several interventions applied together (at most one of each `ONE_PER_STACK` kind)."""

    def __init__(self, parts: list[Intervention]) -> None:
        for kind in ONE_PER_STACK:
            same = [p.slug for p in parts if kind in p.kinds]
            if len(same) > 1:
                raise InterventionError(
                    f"{' and '.join(same)} are both {kind} interventions; combine at most one {kind} intervention"
                )
        self.parts = list(parts)

    @property
    def slug(self) -> str:
        return "+".join(p.slug for p in self.parts) or "base"

    def params(self) -> dict:
        return {"parts": [p.describe() for p in self.parts]}

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        return tightest(p.length_free_up_to(model, context) for p in self.parts)

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for part in sorted(self.parts, key=lambda p: not p.replaces_attention):
                stack.enter_context(part.apply(model, context))
            yield
