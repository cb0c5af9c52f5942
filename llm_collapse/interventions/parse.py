"""CLI-friendly intervention specs: ``base``, ``tempscale:0.8``, ``ntk:1e5+window:off``, ...

Grammar: parts joined with ``+``; each part is ``method[:arg[:arg...]]``. Methods and their arguments:

==================================  ===========================================================
``base``                            no intervention
``tempscale:TAU[:after][:TYPE]``    constant temperature (``after``: after Gemma 2's softcap; ``TYPE``:
                                    only layers of that ``config.layer_types`` entry, e.g. ``full_attention``)
``tempscale-log[:L0]``              tau(L) = 1 / max(1, log_L0 L); L0 defaults to the trained length
``ntk:THETA``                       RoPE base override (``ntk:1e5``)
``dynamic:FACTOR[:TRAINED]``        dynamic NTK with the trained length set explicitly
``yarn:FACTOR[:ORIG][:af1]``        YaRN; ``afX`` sets its attention factor (``af1``: no hidden temperature)
``pi:FACTOR``                       linear position interpolation (every text)
``selfextend:G:W``                  SelfExtend, group size G, neighbour window W
``window:off``                      switch the sliding window off (``window:keep`` is the default, a no-op)
``layer0``                          control: the model's pooling of its input embeddings, no layers at all
``posthoc:center|abtt[:D]|whiten``  transform the finished embeddings (`llm_collapse.interventions.posthoc`)
``longembed-ntk:THETA[:L0|nolog]``  LongEmbed's NTK run: ``ntk`` + its log factor + window off
``longembed-se:G:W[:L0]``           LongEmbed's SelfExtend run: grouping past L0 + its log factor + window off
``longembed-pi:S[:L0]``             LongEmbed's PI run: original positions up to L0, PI beyond + window off
``ape-gp:S[:L0]``                   absolute positions (BERT) to S x L0 tokens: grouped positions
``ape-rp:S[:L0]``                   absolute positions to S x L0 tokens: recurrent (p mod L0)
``ape-pi:S[:L0]``                   absolute positions to S x L0 tokens: interpolated (p / S)
``pcw:S[:L0]``                      texts to S x L0 tokens: the mean of L0-token chunk embeddings
==================================  ===========================================================

The ``longembed-*`` presets are described in `llm_collapse.interventions.longembed`; ``ape-*`` and ``pcw``
(LongEmbed's methods for absolute-position encoders) in `llm_collapse.interventions.absolute` and
`llm_collapse.interventions.pcw`.

Each parser imports its intervention's module when it runs, so `METHODS` (``llm-collapse list methods``)
loads without torch or transformers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from llm_collapse.interventions.base import Intervention, InterventionError, Stack, format_number
from llm_collapse.registry import Registry, UnknownNameError

if TYPE_CHECKING:
    from llm_collapse.interventions.tempscale import TempScale

METHODS: Registry[Callable[[list[str]], Intervention | None]] = Registry("method")


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


for _name, _parser in [
    ("base", _base),
    ("tempscale", _tempscale),
    ("tempscale-log", _tempscale_log),
    ("ntk", _ntk),
    ("dynamic", _dynamic),
    ("yarn", _yarn),
    ("pi", _pi),
    ("selfextend", _selfextend),
    ("window", _window),
    ("longembed-ntk", _longembed_ntk),
    ("longembed-se", _longembed_se),
    ("longembed-pi", _longembed_pi),
    ("ape-gp", _absolute("ape-gp")),
    ("ape-rp", _absolute("ape-rp")),
    ("ape-pi", _absolute("ape-pi")),
    ("pcw", _absolute("pcw")),
    ("layer0", _layer0),
    ("posthoc", _posthoc),
]:
    METHODS.register(_name, _parser)


def method_usages() -> dict[str, tuple[str, str]]:
    """``{method: (usage, description)}`` from the grammar table of this module's docstring (its one source)."""
    table = __doc__.split("=\n", 2)[1].split("\n=", 1)[0]
    usages: dict[str, tuple[str, str]] = {}
    last = None
    for line in table.splitlines():
        usage, _, text = line.partition("  ")
        if usage.strip():
            usage = usage.strip().strip("`")
            last = re.split(r"[:|\[]", usage, maxsplit=1)[0]
            usages[last] = (usage, text.strip())
        elif last is not None:
            usages[last] = (usages[last][0], f"{usages[last][1]} {text.strip()}")
    return {name: (usage, re.sub(r"``?([^`]+)``?", r"\1", text)) for name, (usage, text) in usages.items()}


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
            parser = METHODS.get(method.strip())
        except UnknownNameError as err:
            raise InterventionError(str(err)) from None
        if (intervention := parser([a.strip() for a in args])) is not None:
            parts.append(intervention)
    check_one_tempscale(parts)
    return Stack(parts)


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
