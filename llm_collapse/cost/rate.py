"""The throughput ``--dry-run`` divides FLOPs by: a short matmul benchmark on this machine, times an efficiency.

Why measured: the CPUs this runs on differ by 3-4x in bf16 (AMX or not) and AMD machines run fp32, so one
nominal GFLOP/s is wrong somewhere. A (1024 x 1024) @ (1024 x 4096) matmul in the run's dtype takes tens of
milliseconds; its rate is the machine's dense peak as torch reaches it. A transformers forward reaches a
fraction of that (attention, norms, activations, memory traffic): `FORWARD_EFFICIENCY`, measured on the
development machine by `python -m llm_collapse.bench.throughput` (gemma3-270m prefix runs at two lengths; the
README records the numbers). ``LLM_COLLAPSE_PLAN_GFLOPS`` overrides the whole estimate. The bench's matmul
peak (`matmul_peak`) times the same benchmark (`matmul_seconds`) on square matrices.
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from llm_collapse.cost.timing import sync_device, timed

FORWARD_EFFICIENCY: dict[torch.dtype, float] = {torch.bfloat16: 0.73, torch.float32: 0.52}
"""Model forward FLOP rate / matmul benchmark rate per dtype, calibrated with `llm_collapse.bench.throughput` on
a 2-core Xeon with AVX512-BF16 but no AMX (gemma3-270m, prefix design, lengths 1024/4096 and 2048/8192: 0.73 and 0.73 in bf16,
0.52 in fp32). Other dtypes use the fp32 value. Uncalibrated on AMX CPUs and GPUs, where the matmul peak is
far higher than what the attention and elementwise work of a forward reach: expect an optimistic estimate."""

PLAN_SHAPE = (1024, 1024, 4096)
"""The ``--dry-run`` benchmark's matmul: (m x k) @ (k x n), tens of milliseconds on a 2-core CPU."""


def matmul_seconds(
    dtype: torch.dtype,
    shape: tuple[int, int, int] = PLAN_SHAPE,
    *,
    device: str = "cpu",
    reps: int | None = None,
    seconds: float = 0.3,
    warmups: int = 1,
) -> list[float]:
    """Seconds of each of repeated ``(m x k) @ (k x n)`` matmuls in ``dtype`` after ``warmups`` untimed ones:
    ``reps`` of them, or (``reps=None``) as many as fill ``seconds``. The package's one matmul benchmark: the
    ``--dry-run`` rate (`matmul_gflops`) and the bench's peak (`matmul_peak`) both time it."""
    m, k, n = shape
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(k, n, generator=generator).to(device=device, dtype=dtype)
    for _ in range(warmups):  # first-call overhead, lazy initialisation
        torch.mm(a, b)
    sync_device(device)
    times: list[float] = []
    while (len(times) < reps) if reps is not None else (sum(times) < seconds or not times):
        start = time.perf_counter()
        torch.mm(a, b)
        sync_device(device)
        times.append(time.perf_counter() - start)
    return times


def matmul_gflops(dtype: torch.dtype, *, device: str = "cpu", seconds: float = 0.3) -> float:
    """Dense matmul GFLOP/s of this machine in ``dtype``: the best of `matmul_seconds` on `PLAN_SHAPE`."""
    m, k, n = PLAN_SHAPE
    return 2 * m * k * n / min(matmul_seconds(dtype, device=device, seconds=seconds)) / 1e9


def matmul_peak(dtype: str, *, n: int = 2048, reps: int = 10) -> dict:
    """The bench's peak: ``reps`` ``n x n @ n x n`` matmuls in ``dtype`` on the CPU (after two warm-ups), FLOP/s
    from the best and the median, and how busy the rest of the machine was meanwhile.

    Ask only for the dtype the timed work runs in: on a CPU without bf16 instructions a bf16 matmul is emulated
    (minutes at ``n=2048`` on 2 cores) and its rate says nothing about an fp32 run."""
    from llm_collapse.backends.device import resolve_dtype

    torch_dtype = resolve_dtype(dtype, torch.device("cpu"))
    timing: dict = {}
    with timed(timing):
        times = matmul_seconds(torch_dtype, (n, n, n), reps=reps, warmups=2)
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


def planning_gflops(dtype: torch.dtype, *, device: str = "cpu") -> tuple[float, str]:
    """GFLOP/s for the estimate and where it came from (the environment override or the benchmark)."""
    if env := os.environ.get("LLM_COLLAPSE_PLAN_GFLOPS"):
        return float(env), "LLM_COLLAPSE_PLAN_GFLOPS"
    peak = matmul_gflops(dtype, device=device)
    efficiency = FORWARD_EFFICIENCY.get(dtype, FORWARD_EFFICIENCY[torch.float32])
    name = str(dtype).removeprefix("torch.")
    return peak * efficiency, f"{peak:.0f} GFLOP/s {name} matmul here x {efficiency:g} forward efficiency"
