"""FLOP counting (`FlopModel`, `model_flops`; formula in the package docstring) and the measured matmul peak."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from llm_collapse.bench.timing import _timed

ENCODER_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "mpnet",
        "electra",
        "deberta",
        "deberta-v2",
        "modernbert",
    }
)


@dataclass(frozen=True)
class FlopModel:
    """What FLOP counting needs from a model (see the package docstring for the formula).

    Attributes:
        linear_params: Weights of every ``nn.Linear`` of the backbone except a BERT pooler head.
        d_attn: Attention channels, ``num_heads * head_dim``.
        layer_windows: Per layer, the sliding window (None for a full-attention layer).
        causal: Causal decoder (False for bidirectional encoders).
    """

    linear_params: int
    d_attn: int
    layer_windows: tuple[int | None, ...]
    causal: bool

    @classmethod
    def from_model(cls, model) -> FlopModel:
        import torch

        linear = sum(
            m.weight.numel()
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and "pooler" not in name.split(".")
        )
        config = model.config.get_text_config()
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        layers = int(config.num_hidden_layers)
        types = getattr(config, "layer_types", None) or ["full_attention"] * layers
        window = getattr(config, "sliding_window", None)
        windows = tuple(window if (t == "sliding_attention" and window) else None for t in types)
        return cls(linear, heads * head_dim, windows, config.model_type not in ENCODER_TYPES)

    def pairs(self, length: int, window: int | None) -> int:
        """(query, key) pairs one layer needs for ``length`` tokens."""
        if not self.causal:
            return length * length
        if window is None or length <= window:
            return length * (length + 1) // 2
        return window * (window + 1) // 2 + (length - window) * window

    def flops(self, length: int) -> float:
        """Useful forward FLOPs for one text of ``length`` real tokens."""
        attention = sum(self.pairs(length, w) for w in self.layer_windows)
        return 2.0 * self.linear_params * length + 4.0 * self.d_attn * attention

    def flops_dense(self, length: int) -> float:
        """The dense convention: ``2 P L + 4 layers d_attn L^2``."""
        return 2.0 * self.linear_params * length + 4.0 * len(self.layer_windows) * self.d_attn * length**2

    def describe(self) -> dict:
        return {
            "linear_params": self.linear_params,
            "d_attn": self.d_attn,
            "layers": len(self.layer_windows),
            "sliding_layers": sum(w is not None for w in self.layer_windows),
            "window": next((w for w in self.layer_windows if w is not None), None),
            "causal": self.causal,
            "formula": "2*linear_params*L + 4*d_attn*sum_layers(pairs(L))",
        }


def model_flops(model, lengths: Sequence[int]) -> float:
    """Useful forward FLOPs of ``model`` over texts of the given token lengths (package docstring)."""
    counter = FlopModel.from_model(model)
    return sum(counter.flops(n) for n in lengths)


def matmul_peak(dtype: str, *, n: int = 2048, reps: int = 10) -> dict:
    """Times ``reps`` ``n x n @ n x n`` matmuls (after two warm-ups); FLOP/s from the best and the median."""
    import torch

    from llm_collapse.backends.device import resolve_dtype

    torch_dtype = resolve_dtype(dtype, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(torch_dtype)
    b = torch.randn(n, n, generator=generator).to(torch_dtype)
    for _ in range(2):
        torch.mm(a, b)
    times = []
    timing: dict = {}
    with _timed(timing):
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
    flops = 2.0 * n**3
    return {
        "dtype": dtype,
        "n": n,
        "reps": reps,
        "best_s": min(times),
        "median_s": statistics.median(times),
        "flops_per_s": flops / min(times),
        "median_flops_per_s": flops / statistics.median(times),
        "torch_threads": torch.get_num_threads(),
        "other_cores": timing["other_cores"],
    }
