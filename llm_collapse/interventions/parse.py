"""CLI-friendly intervention specs: ``base``, ``tempscale:0.8``, ``ntk:1e5+window:off``, ...

Grammar: parts joined with ``+``; each part is ``method[:arg[:arg...]]``. Each method is registered once,
with its parser, usage and description (`register_method`; the built-ins at the end of this module), which
``llm-collapse list methods`` prints and the parser reads: a new method is a class and one `register_method`
call beside it (docs/contributing.md).

The ``longembed-*`` presets are described in `llm_collapse.interventions.longembed`; ``ape-*`` and ``pcw``
(LongEmbed's methods for absolute-position encoders) in `llm_collapse.interventions.absolute` and
`llm_collapse.interventions.pcw`.

Each built-in parser imports its intervention's module when it runs, so `METHODS` (``llm-collapse list
methods``) loads without torch or transformers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llm_collapse.interventions.base import (
    POSTHOC_KIND,
    Intervention,
    InterventionError,
    Stack,
    format_number,
)
from llm_collapse.registry import Registry, UnknownNameError

if TYPE_CHECKING:
    from llm_collapse.interventions.tempscale import TempScale


@dataclass(frozen=True)
class MethodSyntax:
    """How one method is written: its parser (the ``:``-separated arguments -> an `Intervention`, or None for a
    part that changes nothing), its usage and a one-line description (``llm-collapse list methods``)."""

    parse: Callable[[list[str]], Intervention | None]
    usage: str
    description: str


METHODS: Registry[MethodSyntax] = Registry("method")


def register_method(
    name: str, parse: Callable[[list[str]], Intervention | None], *, usage: str, description: str
) -> MethodSyntax:
    """Makes ``name[:args]`` a method of ``--methods``, `Embedder.intervene` and the mteb wrapper; ``parse`` gets
    the arguments as strings and raises `InterventionError` (one line: what was wrong, what is allowed) for bad
    ones. The intervention's ``slug`` must name it uniquely: it keys the cache, the rows and the reports."""
    return METHODS.register(name, MethodSyntax(parse, usage, description))


def _number(method: str, name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InterventionError(f"{method}: {name}={text!r} is not a number") from None


def _integer(method: str, name: str, text: str) -> int:
    value = _number(method, name, text)
    if not value.is_integer():
        raise InterventionError(f"{method}: {name}={text!r} must be an integer")
    return int(value)


def _arity(method: str, args: list[str], low: int, high: int, usage: str) -> None:
    if not low <= len(args) <= high:
        raise InterventionError(f"{method} takes {usage}; got {':'.join([method, *args])!r}")


def _tempscale(args: list[str]) -> Intervention:
    from llm_collapse.interventions.tempscale import PLACEMENTS, TempScale

    _arity("tempscale", args, 1, 3, "tempscale:TAU[:inside|after][:LAYER_TYPE]")
    placement, layer_type = "inside", None
    for arg in args[1:]:
        if arg in PLACEMENTS:
            placement = arg
        elif re.fullmatch(r"[a-z][a-z_]*_attention", arg) and layer_type is None:
            layer_type = arg
        else:
            raise InterventionError(
                f"tempscale: placement={arg!r} is not allowed; use inside or after, or a layer type ending in "
                "_attention (e.g. full_attention)"
            )
    return TempScale(_number("tempscale", "tau", args[0]), placement=placement, layer_type=layer_type)


def _tempscale_log(args: list[str]) -> Intervention:
    from llm_collapse.interventions.tempscale import TempScaleLog

    _arity("tempscale-log", args, 0, 1, "tempscale-log[:L0]")
    return TempScaleLog(_number("tempscale-log", "L0", args[0]) if args else None)


def _ntk(args: list[str]) -> Intervention:
    from llm_collapse.interventions.rope import NTK

    _arity("ntk", args, 1, 1, "ntk:THETA")
    return NTK(_number("ntk", "theta", args[0]))


def _dynamic(args: list[str]) -> Intervention:
    from llm_collapse.interventions.rope import DynamicNTK

    _arity("dynamic", args, 1, 2, "dynamic:FACTOR[:TRAINED_LENGTH]")
    length = _integer("dynamic", "trained_length", args[1]) if len(args) == 2 else None
    return DynamicNTK(_number("dynamic", "factor", args[0]), length)


def _yarn(args: list[str]) -> Intervention:
    from llm_collapse.interventions.rope import YaRN

    _arity("yarn", args, 1, 3, "yarn:FACTOR[:ORIGINAL_LENGTH][:afX]")
    factor = _number("yarn", "factor", args[0])
    original = attention_factor = None
    for arg in args[1:]:
        if arg.startswith("af"):
            attention_factor = _number("yarn", "attention_factor", arg[2:])
        else:
            original = _integer("yarn", "original_length", arg)
    return YaRN(factor, original, attention_factor)


def _pi(args: list[str]) -> Intervention:
    from llm_collapse.interventions.rope import PositionInterpolation

    _arity("pi", args, 1, 1, "pi:FACTOR")
    return PositionInterpolation(_number("pi", "factor", args[0]))


def _selfextend(args: list[str]) -> Intervention:
    from llm_collapse.interventions.selfextend import SelfExtend

    _arity("selfextend", args, 2, 2, "selfextend:GROUP_SIZE:WINDOW")
    return SelfExtend(
        _integer("selfextend", "group_size", args[0]), _integer("selfextend", "window", args[1])
    )


def _longembed_ntk(args: list[str]) -> Intervention:
    from llm_collapse.interventions.longembed import LongEmbedNTK

    _arity("longembed-ntk", args, 1, 2, "longembed-ntk:THETA[:L0 or :nolog]")
    theta = _number("longembed-ntk", "theta", args[0])
    if len(args) == 2 and args[1] == "nolog":
        return LongEmbedNTK(theta, log_scale=False)
    if len(args) == 2 and not args[1].replace(".", "", 1).isdigit():
        raise InterventionError(
            f"longembed-ntk: {args[1]!r} is neither L0 (a token count) nor 'nolog'; "
            "use longembed-ntk:THETA[:L0] or longembed-ntk:THETA:nolog"
        )
    return LongEmbedNTK(theta, _integer("longembed-ntk", "L0", args[1]) if len(args) == 2 else None)


def _longembed_se(args: list[str]) -> Intervention:
    from llm_collapse.interventions.longembed import LongEmbedSelfExtend

    _arity("longembed-se", args, 2, 3, "longembed-se:GROUP_SIZE:WINDOW[:L0]")
    return LongEmbedSelfExtend(
        _integer("longembed-se", "group_size", args[0]),
        _integer("longembed-se", "window", args[1]),
        _integer("longembed-se", "L0", args[2]) if len(args) == 3 else None,
    )


def _longembed_pi(args: list[str]) -> Intervention:
    from llm_collapse.interventions.longembed import LongEmbedPI

    _arity("longembed-pi", args, 1, 2, "longembed-pi:FACTOR[:L0]")
    return LongEmbedPI(
        _number("longembed-pi", "factor", args[0]),
        _integer("longembed-pi", "L0", args[1]) if len(args) == 2 else None,
    )


def _absolute(method: str) -> Callable[[list[str]], Intervention]:
    """The parser of ``ape-gp``, ``ape-rp``, ``ape-pi`` or ``pcw`` (``method:S[:L0]``)."""

    def parse(args: list[str]) -> Intervention:
        from llm_collapse.interventions.absolute import (
            GroupedPositions,
            InterpolatedPositions,
            RecurrentPositions,
        )
        from llm_collapse.interventions.pcw import ChunkedAverage

        classes = {
            "ape-gp": GroupedPositions,
            "ape-rp": RecurrentPositions,
            "ape-pi": InterpolatedPositions,
            "pcw": ChunkedAverage,
        }
        _arity(method, args, 1, 2, f"{method}:S[:L0] (texts up to S x L0 tokens, e.g. {method}:8)")
        return classes[method](
            _number(method, "S", args[0]), _integer(method, "L0", args[1]) if len(args) == 2 else None
        )

    return parse


def _window(args: list[str]) -> Intervention | None:
    from llm_collapse.interventions.window import SlidingWindowOff

    _arity("window", args, 1, 1, "window:off or window:keep")
    if args[0] == "keep":
        return None
    if args[0] == "off":
        return SlidingWindowOff()
    raise InterventionError(f"window:{args[0]!r} is not allowed; use window:off or window:keep")


def _layer0(args: list[str]) -> Intervention:
    from llm_collapse.interventions.layer0 import Layer0

    _arity("layer0", args, 0, 0, "no arguments")
    return Layer0()


def _posthoc(args: list[str]) -> Intervention:
    from llm_collapse.interventions.posthoc import PostHoc

    _arity("posthoc", args, 1, 2, "posthoc:center, posthoc:abtt[:D] or posthoc:whiten")
    return PostHoc(args[0], _integer("posthoc", "D", args[1]) if len(args) == 2 else None)


def _base(args: list[str]) -> None:
    _arity("base", args, 0, 0, "no arguments")
    return None


for _name, _parser, _usage, _description in [
    ("base", _base, "base", "no intervention"),
    ("tempscale", _tempscale, "tempscale:TAU[:after][:TYPE]",
     "constant temperature (after: after Gemma 2's softcap; TYPE: only layers of that config.layer_types entry, "
     "e.g. full_attention)"),
    ("tempscale-log", _tempscale_log, "tempscale-log[:L0]",
     "tau(L) = 1 / max(1, log_L0 L); L0 defaults to the trained length"),
    ("ntk", _ntk, "ntk:THETA", "RoPE base override (ntk:1e5)"),
    ("dynamic", _dynamic, "dynamic:FACTOR[:TRAINED]", "dynamic NTK with the trained length set explicitly"),
    ("yarn", _yarn, "yarn:FACTOR[:ORIG][:af1]",
     "YaRN; afX sets its attention factor (af1: no hidden temperature)"),
    ("pi", _pi, "pi:FACTOR", "linear position interpolation (every text)"),
    ("selfextend", _selfextend, "selfextend:G:W", "SelfExtend, group size G, neighbour window W"),
    ("window", _window, "window:off", "switch the sliding window off (window:keep is the default, a no-op)"),
    ("longembed-ntk", _longembed_ntk, "longembed-ntk:THETA[:L0|nolog]",
     "LongEmbed's NTK run: ntk + its log factor + window off"),
    ("longembed-se", _longembed_se, "longembed-se:G:W[:L0]",
     "LongEmbed's SelfExtend run: grouping past L0 + its log factor + window off"),
    ("longembed-pi", _longembed_pi, "longembed-pi:S[:L0]",
     "LongEmbed's PI run: original positions up to L0, PI beyond + window off"),
    ("ape-gp", _absolute("ape-gp"), "ape-gp:S[:L0]",
     "absolute positions (BERT) to S x L0 tokens: grouped positions"),
    ("ape-rp", _absolute("ape-rp"), "ape-rp:S[:L0]", "absolute positions to S x L0 tokens: recurrent (p mod L0)"),
    ("ape-pi", _absolute("ape-pi"), "ape-pi:S[:L0]",
     "absolute positions to S x L0 tokens: interpolated (p / S)"),
    ("pcw", _absolute("pcw"), "pcw:S[:L0]", "texts to S x L0 tokens: the mean of L0-token chunk embeddings"),
    ("layer0", _layer0, "layer0", "control: the model's pooling of its input embeddings, no layers at all"),
    ("posthoc", _posthoc, "posthoc:center|abtt[:D]|whiten",
     "transform the finished embeddings (llm_collapse.interventions.posthoc)"),
]:  # fmt: skip
    register_method(_name, _parser, usage=_usage, description=_description)


def method_usages() -> dict[str, tuple[str, str]]:
    """``{method: (usage, description)}`` of every registered method, in registration order."""
    return {name: (METHODS.get(name).usage, METHODS.get(name).description) for name in METHODS.names()}


def parse_interventions(text: str | Intervention | list | tuple | None) -> Stack:
    """Parses ``"tempscale:0.8+ntk:1e5"`` (or takes Intervention objects) into one `Stack`.

    A spec (or list) may not stack two constant temperatures on the same layers (`check_one_tempscale`).
    Intervention objects and `Stack` objects given as such are taken as they are.
    """
    if text is None:
        return Stack([])
    if isinstance(text, Intervention):
        return text if isinstance(text, Stack) else Stack([text])
    if isinstance(text, (list, tuple)):
        parts = [p for item in text for p in parse_interventions(item).parts]
        check_one_tempscale(parts)
        return Stack(parts)
    if not isinstance(text, str) or not text.strip():
        raise InterventionError(f"intervention spec must be a non-empty string, got {text!r}")
    parts = []
    for part in text.strip().split("+"):
        method, *args = part.strip().split(":")
        try:
            parser = METHODS.get(method.strip()).parse
        except UnknownNameError as err:
            raise InterventionError(str(err)) from None
        if (intervention := parser([a.strip() for a in args])) is not None:
            parts.append(intervention)
    check_one_tempscale(parts)
    return Stack(parts)


@dataclass(frozen=True)
class Method:
    """One ``--methods`` entry, parsed once at the edge (`parse_method`): the text as given, its interventions,
    and the split a run needs, the parts applied to the model and the post-hoc transform of its vectors (at
    most one). The run, its plan, the estimate and a recompute carry this; none parses the text again.

    Attributes:
        text: The entry as the user wrote it (run.json and the run id keep it).
        stack: Every part, in order; its ``slug`` names the method in rows, caches and reports.
        model_parts: The parts applied to the model (the post-hoc part left out).
        posthoc: The post-hoc part (`llm_collapse.interventions.posthoc.PostHoc`), or None.
    """

    text: str
    stack: Stack
    model_parts: tuple[Intervention, ...]
    posthoc: Intervention | None = None

    @property
    def slug(self) -> str:
        return self.stack.slug

    @property
    def model_stack(self) -> Stack:
        """What the model runs: the parts without the post-hoc transform (a fresh `Stack` each time)."""
        return Stack(list(self.model_parts))

    def has(self, kind: str) -> bool:
        """Whether a part is of this `Intervention.kind` (``"window"``, ``"layer0"``, ``"posthoc"``...)."""
        return any(part.kind == kind for part in self.stack.parts)


def parse_method(text: str) -> Method:
    """The one place a method's text becomes a `Method`; `InterventionError` (one line) for a bad one."""
    stack = parse_interventions(text)
    posthoc = [part for part in stack.parts if part.kind == POSTHOC_KIND]
    if len(posthoc) > 1:
        raise InterventionError(f"one post-hoc transform per method, got {'+'.join(p.slug for p in posthoc)}")
    model_parts = tuple(part for part in stack.parts if part.kind != POSTHOC_KIND)
    return Method(text, stack, model_parts, posthoc[0] if posthoc else None)


def check_one_tempscale(parts: list[Intervention]) -> None:
    """Refuses two `TempScale` parts that may act on the same layer (``tempscale:0.8+tempscale:0.9``).

    Decision: refuse rather than normalise to one canonical ``tempscale:0.72``. Such a stack divides each
    ``scaling`` by both taus, which is not bit-identical to one division by their product (``s / 0.8 / 0.9 !=
    s / 0.72`` for ``s = 32 ** -0.5``), so one slug for both would label two different computations (slugs
    are cache keys); and stacks with different placements (``:after``) or layer selections (all layers and
    ``:full_attention``) have no single-tempscale equivalent at all. One tempscale per layer set keeps one
    spec per computation, so a duplicate in ``--methods`` is caught by its slug. The error names the product
    where one spec does say the same. Tempscales on provably disjoint layers (two different ``layer_type``
    values, or disjoint ``layers``) stack; so do nested `Embedder.intervene` blocks, which are not one spec.
    """
    if len(parts) < 2:
        return  # nothing to stack (and ``base`` parses without importing torch)
    from llm_collapse.interventions.tempscale import TempScale

    scales = [p for p in parts if type(p) is TempScale]
    for i, first in enumerate(scales):
        for second in scales[i + 1 :]:
            if _disjoint(first, second):
                continue
            if _selection(first) == _selection(second) and first.layers is None and not first.include_pooler:
                suffixes = [first.layer_type] if first.layer_type else []
                suffixes += ["after"] if first.placement == "after" else []
                product = ":".join([f"tempscale:{format_number(first.tau * second.tau)}", *suffixes])
                fix = f"give one tempscale with their product, {product}"
            else:
                fix = (
                    "give each layer one temperature "
                    "(e.g. tempscale:0.8:full_attention+tempscale:0.9:sliding_attention)"
                )
            raise InterventionError(
                f"{first.slug} and {second.slug} both scale the attention of the same layers "
                f"(their taus multiply there); {fix}"
            )


def _selection(scale: TempScale) -> tuple:
    return scale.layers, scale.layer_type, scale.placement, scale.include_pooler


def _disjoint(first: TempScale, second: TempScale) -> bool:
    """Whether two tempscales provably act on different layers (decidable without the model)."""
    if first.layer_type is not None and second.layer_type is not None:
        return first.layer_type != second.layer_type
    if first.layers is not None and second.layers is not None:
        return not set(first.layers) & set(second.layers)
    return False
