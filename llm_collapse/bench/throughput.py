"""The throughput ``--dry-run`` divides FLOPs by: a short matmul benchmark on this machine, times an efficiency.

Why measured: the CPUs this runs on differ by 3-4x in bf16 (AMX or not) and AMD machines run fp32, so one
nominal GFLOP/s is wrong somewhere. A (1024 x 1024) @ (1024 x 4096) matmul in the run's dtype takes tens of
milliseconds; its rate is the machine's dense peak as torch reaches it. A transformers forward reaches a
fraction of that (attention, norms, activations, memory traffic): `FORWARD_EFFICIENCY`, measured on the
development machine by `python -m llm_collapse.bench.throughput` (gemma3-270m prefix runs at two lengths;
the README records the numbers). ``LLM_COLLAPSE_PLAN_GFLOPS`` overrides the whole estimate.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from llm_collapse.bench.timing import sync_device

FORWARD_EFFICIENCY: dict[torch.dtype, float] = {torch.bfloat16: 0.73, torch.float32: 0.52}
"""Model forward FLOP rate / matmul benchmark rate per dtype, calibrated with `main` on a 2-core Xeon with
AVX512-BF16 but no AMX (gemma3-270m, prefix design, lengths 1024/4096 and 2048/8192: 0.73 and 0.73 in bf16,
0.52 in fp32). Other dtypes use the fp32 value. Uncalibrated on AMX CPUs and GPUs, where the matmul peak is
far higher than what the attention and elementwise work of a forward reach: expect an optimistic estimate."""

_SHAPE = (1024, 1024, 4096)


def matmul_gflops(dtype: torch.dtype, *, device: str = "cpu", seconds: float = 0.3) -> float:
    """Dense matmul GFLOP/s of this machine in ``dtype`` (best of repeated calls after one warm-up)."""
    m, k, n = _SHAPE
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    torch.mm(a, b)  # warm-up: first-call overhead, lazy initialisation
    best, spent = float("inf"), 0.0
    while spent < seconds or best == float("inf"):
        start = time.perf_counter()
        torch.mm(a, b)
        sync_device(device)
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2 * m * k * n / best / 1e9


def planning_gflops(dtype: torch.dtype, *, device: str = "cpu") -> tuple[float, str]:
    """GFLOP/s for the estimate and where it came from (the environment override or the benchmark)."""
    if env := os.environ.get("LLM_COLLAPSE_PLAN_GFLOPS"):
        return float(env), "LLM_COLLAPSE_PLAN_GFLOPS"
    peak = matmul_gflops(dtype, device=device)
    efficiency = FORWARD_EFFICIENCY.get(dtype, FORWARD_EFFICIENCY[torch.float32])
    name = str(dtype).removeprefix("torch.")
    return peak * efficiency, f"{peak:.0f} GFLOP/s {name} matmul here x {efficiency:g} forward efficiency"


def main(argv: list[str] | None = None) -> int:
    """Estimate vs measurement: the ``--dry-run`` estimate and a real run of the same prefix-design config.

    ``python -m llm_collapse.bench.throughput [--model gemma3-270m] [--dtype bf16]``: for lengths 1024/4096
    and 2048/8192 (2 documents, base, collapse), prints the estimated and the measured seconds of the
    embedding work (run.json ``wall_time_s``) and their ratio. A private cache (under a temp folder) makes
    every embedding real; the GGUF conversion of the user cache is reused.
    """
    import argparse
    import json
    import tempfile
    from pathlib import Path

    from llm_collapse.cli.common import run_command, say, setup_logging
    from llm_collapse.run.config import CompareConfig
    from llm_collapse.run.plan import plan
    from llm_collapse.run.runner import run_comparison
    from llm_collapse.utils.paths import cache_root

    parser = argparse.ArgumentParser(prog="python -m llm_collapse.bench.throughput", description=main.__doc__)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--dtype", default=None, help="default: the run default (auto)")
    args = parser.parse_args(argv)
    setup_logging(logging.INFO)

    def measure() -> int:
        converted = cache_root() / "converted"
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "cache").mkdir()
            if converted.is_dir():
                (Path(tmp) / "cache" / "converted").symlink_to(converted)
            os.environ["LLM_COLLAPSE_CACHE"] = str(Path(tmp) / "cache")
            say("lengths      estimate_s  measured_s  estimate/measured")
            for lengths in ([1024, 4096], [2048, 8192]):
                out = Path(tmp) / "-".join(map(str, lengths))
                config = CompareConfig.from_sources(
                    dict(models=[args.model], methods=["base"], tasks=["collapse"], design="prefix",
                         prefix_docs=2, lengths=lengths, out=str(out), dtype=args.dtype)
                )  # fmt: skip
                estimate = plan(config)[1]
                run_comparison(config, report=False)
                measured = json.loads((out / "run.json").read_text())["wall_time_s"][
                    f"{args.model}:base:collapse"
                ]
                say(f"{lengths!s:12} {estimate:10.1f}  {measured:10.1f}  {estimate / measured:.2f}")
        return 0

    return run_command(measure)


if __name__ == "__main__":
    raise SystemExit(main())
