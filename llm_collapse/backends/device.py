"""Device and dtype defaults: CUDA when present, else CPU; bf16 where the CPU runs it faster than fp32.

On CPUs with AMX, bf16 matmuls are 3-5x faster than fp32, so bf16 is the default there. AVX512-BF16 alone
is not enough: on a 2-core Xeon with AVX512-BF16 but no AMX (torch 2.13), a (1024 x 1024) @ (1024 x 4096)
matmul ran at 180 GFLOP/s in bf16 and 355 in fp32, and gemma3-270m embedded two documents (2048/8192 tokens) in
34.3 s in bf16 and 23.7 s in fp32 (`python -m llm_collapse.bench.throughput`; README "Speed"). Elsewhere fp32.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}
DTYPE_NAMES: tuple[str, ...] = ("auto", *DTYPES)
"""What ``dtype=`` / ``--dtype`` accepts as a string."""


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/``"auto"`` -> ``cuda`` if available else ``cpu``; anything else is parsed by torch and must exist
    here (`missing_device`)."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"Invalid device {device!r}; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'."
        ) from None
    if (problem := missing_device(resolved)) is not None:
        raise ValueError(f"device={device!r} requested but {problem}; use device='cpu'.")
    return resolved


def missing_device(device: torch.device) -> str | None:
    """Why ``device`` is not on this machine (``cuda`` needs CUDA, ``cuda:N`` more than N GPUs, ``mps`` Apple's
    MPS), or None when it is."""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available on this machine"
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            return f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    if device.type == "mps" and not torch.backends.mps.is_available():
        return "MPS is not available on this machine"
    return None


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_has_amx_bf16() -> bool:
    """True when /proc/cpuinfo lists AMX-BF16 (the CPUs where bf16 beats fp32; module docstring)."""
    return "amx_bf16" in _cpuinfo()


def cpu_kind() -> dict[str, object]:
    """The CPU's model name and its bf16 instruction sets, for run.json: timings depend on both.

    ``{"cpu_model": "AMD EPYC", "cpu_bf16": ["avx512_bf16"]}``; ``cpu_model`` is None where /proc/cpuinfo is
    missing (not Linux), and ``cpu_bf16`` empty on CPUs without bf16 instructions.
    """
    info = _cpuinfo()
    model = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), None
    )
    flags = set(
        next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), ())
    )
    return {"cpu_model": model, "cpu_bf16": [f for f in ("amx_bf16", "avx512_bf16") if f in flags]}


def default_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_amx_bf16() else torch.float32


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """``None``/``"auto"`` -> the device default; strings like ``"bf16"``/``"float32"`` or a torch dtype."""
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"Unsupported dtype {dtype}; allowed: bf16, fp16, fp32.")
        return dtype
    try:
        return DTYPES[str(dtype).lower().removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"Unknown dtype {dtype!r}; allowed: auto, bf16, fp16, fp32.") from None


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
