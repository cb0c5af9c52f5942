"""Times the layerwise entropy recorder against a straightforward computation of the same entropies.

``python experiments/bench_entropy_recorder.py --length 16384``: random queries and keys at gemma3-270m's
attention shape (4 query heads sharing 1 key head of width 256), one full causal layer and one 512-token
sliding-window layer, both sides in the same process, alternated, best of ``--repeats``. The straightforward
side builds each query chunk's attendable-key mask and logits over all keys and takes ``-sum p ln p`` from
``log_softmax``; the recorder limits both to the keys the chunk's rows can attend to and uses the three-pass
``ln Z - sum exp(s) s / Z``. Prints both times, their ratio and the largest entropy difference. Quote the
ratio with the CPU kind; other processes on the machine distort it.
"""

from __future__ import annotations

import argparse
import time

import torch

from llm_collapse.metrics.attention import attendable
from llm_collapse.tasks.layer_probe import _CHUNK, _entropy

HEADS, KV_HEADS, HEAD_DIM, WINDOW = 4, 1, 256, 512


class _CausalLayer:
    is_causal = True


def straightforward(query, key, scaling, window):
    """(B, Lq) mean entropy over heads: the full-width mask and ``log_softmax`` per chunk of rows."""
    batch, heads, length, _ = query.shape
    key = key.repeat_interleave(heads // key.shape[1], dim=1)
    out = torch.zeros(batch, length, dtype=torch.float64)
    for start in range(0, length, _CHUNK):
        stop = min(start + _CHUNK, length)
        allowed = attendable(key.shape[2], slice(start, stop), causal=True, sliding_window=window)
        logits = (query[:, :, start:stop] @ key.transpose(-1, -2)) * scaling
        logp = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        out[:, start:stop] = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1).mean(1).double()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8192, help="tokens (default: 8192)")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per side (default: 2)")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, HEADS, args.length, HEAD_DIM, generator=generator)
    key = torch.randn(1, KV_HEADS, args.length, HEAD_DIM, generator=generator)
    scaling = HEAD_DIM**-0.5
    print(f"{torch.get_num_threads()} threads; length {args.length}; query chunks of {_CHUNK} rows")
    for window in (None, WINDOW):
        times: dict[str, list[float]] = {"recorder": [], "straightforward": []}
        for _ in range(args.repeats):
            start = time.perf_counter()
            ours = _entropy(_CausalLayer(), query, key, None, scaling, None, None, window)[0, :, 0]
            times["recorder"].append(time.perf_counter() - start)
            start = time.perf_counter()
            reference = straightforward(query, key, scaling, window)[0]
            times["straightforward"].append(time.perf_counter() - start)
        best = {side: min(values) for side, values in times.items()}
        layer = "full causal" if window is None else f"sliding window {window}"
        print(f"{layer}: recorder {best['recorder']:.2f} s, straightforward {best['straightforward']:.2f} s, "
              f"ratio {best['straightforward'] / best['recorder']:.2f}x, "
              f"max |difference| {float((ours - reference).abs().max()):.1e} nats")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
