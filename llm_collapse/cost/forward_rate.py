"""Seconds of a model's forward on this machine: a few random layers of its own shape, timed when the plan runs.

Why: a matmul peak times a forward efficiency (`llm_collapse.cost.rate`) was calibrated on one CPU kind and one
model width; on an AMX CPU the peak of a (1024 x 1024) @ (1024 x 4096) bf16 matmul is far above what a
640-wide Gemma 3 layer reaches, so the default run was estimated ~5x short there. A replica of the model's own
layers (its config, random weights, a 1024-token vocabulary; one period of its layer types: Gemma 3's five
sliding layers and one full layer) in the run's dtype, device and attention implementation runs at two
lengths; the time splits into seconds per linear FLOP and per attention FLOP (two equations, two unknowns,
`FlopModel`'s own split), and the full model's text costs ``a * linear + b * attention`` FLOPs. Lengths past
the longer timed one are extrapolated along the same split (the banded kernel keeps sliding layers linear).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import torch

from llm_collapse.models import position_table
from llm_collapse.models.flops import FlopModel

logger = logging.getLogger(__name__)

REPLICA_LENGTHS = (256, 1024)
"""Tokens of the two timed forwards: short enough that a replica answers in about a second on 2 cores."""

REPLICA_VOCAB = 1024
"""The replica's vocabulary: the embedding lookup costs no FLOPs, so a 262k-row table would only cost memory."""


@dataclass(frozen=True)
class ForwardTiming:
    """Seconds per linear FLOP and per attention FLOP of a model's forward on this machine, and how measured."""

    per_linear_flop: float
    per_attention_flop: float
    how: str

    def seconds(self, model: FlopModel, tokens: int) -> float:
        """Seconds of one forward of ``tokens`` tokens through ``model`` (the full model's FLOP counts)."""
        linear = 2.0 * model.linear_params * tokens
        return self.per_linear_flop * linear + self.per_attention_flop * (model.flops(tokens) - linear)

    def gflops(self, model: FlopModel, lengths: list[int]) -> float:
        """The FLOP rate this timing gives ``model`` over forwards of ``lengths`` tokens (GFLOP/s)."""
        seconds = sum(self.seconds(model, n) for n in lengths)
        return sum(model.flops(n) for n in lengths) / seconds / 1e9 if seconds > 0 else 0.0


def time_replica(
    config_json: dict,
    *,
    dtype: torch.dtype,
    device: str = "cpu",
    attn_implementation: str | None = None,
    bidirectional: bool = False,
    lengths: tuple[int, int] = REPLICA_LENGTHS,
) -> ForwardTiming:
    """Times a replica of the model ``config_json`` describes (see the module docstring); raises where
    transformers cannot build it from the config alone."""
    from transformers import AutoConfig, AutoModel

    import llm_collapse.backends.hf  # noqa: F401  (registers the package's attention implementations)
    from llm_collapse.backends.attention_direction import set_attention_direction

    replica, layers = _replica_config(config_json)
    if (table := position_table(replica)) is not None:  # an absolute-position table: timed within it
        lengths = (min(lengths[0], table // 2), min(lengths[1], table))
    config = AutoConfig.for_model(**replica)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with torch.device(device):
        model = AutoModel.from_config(config, dtype=dtype, **kwargs).eval()
    set_attention_direction(model, "bidirectional" if bidirectional else "causal")
    flops = FlopModel.from_config(replica)
    flops = replace(flops, causal=flops.causal and not bidirectional)
    generator = torch.Generator().manual_seed(0)
    seconds = []
    with torch.inference_mode():
        for n in lengths:
            ids = torch.randint(0, REPLICA_VOCAB, (1, n), generator=generator).to(device)
            model(input_ids=ids)  # warm-up: first-call allocation, kernel selection
            seconds.append(_best(lambda ids=ids, model=model: model(input_ids=ids), device))
    linear = [2.0 * flops.linear_params * n for n in lengths]
    attention = [flops.flops(n) - lin for n, lin in zip(lengths, linear, strict=True)]
    how = f"a {layers}-layer random replica timed at {lengths[0]} and {lengths[1]} tokens"
    return _split(seconds, linear, attention, how)


def _replica_config(config_json: dict) -> tuple[dict, int]:
    """The config with one period of its layer types (at least one layer) and a small vocabulary."""
    text = dict(config_json.get("text_config") or config_json)
    types = list(text.get("layer_types") or [])
    # one period: up to the first layer of another type (Gemma 3: 5 sliding + 1 full); no types: one layer
    period = next((i + 1 for i, t in enumerate(types) if t != types[0]), 1)
    text.update(num_hidden_layers=period, vocab_size=REPLICA_VOCAB)
    if types:
        text["layer_types"] = types[:period]
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(text.get(key), int) and text[key] >= REPLICA_VOCAB:
            text[key] = 0
    text.pop("torch_dtype", None)
    text.pop("dtype", None)
    return text, period


def _best(forward, device: str, repeats: int = 2) -> float:
    from llm_collapse.cost.timing import sync_device

    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        forward()
        sync_device(device)
        best = min(best, time.perf_counter() - start)
    return best


def _split(seconds: list[float], linear: list[float], attention: list[float], how: str) -> ForwardTiming:
    """Seconds per linear and per attention FLOP from two timed forwards (Cramer's rule); where timing noise
    makes either negative, one rate for all FLOPs (the two forwards' total)."""
    (t1, t2), (l1, l2), (a1, a2) = seconds, linear, attention
    det = l1 * a2 - l2 * a1
    if det != 0:
        per_linear, per_attention = (t1 * a2 - t2 * a1) / det, (l1 * t2 - l2 * t1) / det
        if per_linear > 0 and per_attention > 0:
            return ForwardTiming(per_linear, per_attention, how)
    rate = (t1 + t2) / (l1 + l2 + a1 + a2)
    return ForwardTiming(rate, rate, how + " (one rate: the split was not resolvable)")
