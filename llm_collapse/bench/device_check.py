"""``python -m llm_collapse.bench --device-check``: the GPU session's checks in one command, written as JSON.

What it runs (sized for <= 8 minutes on one H100/H200-class GPU, nothing downloaded)
    1. The ``gpu``-marked tests (``pytest -m gpu`` in a subprocess): every adapter x intervention against the CPU,
       nf4/int8 on CUDA, peak memory growth. Its summary line and exit code go into the JSON.
    2. Real-width random replicas of the 7B-9B models with few layers: the `llm_collapse.testing` builders with the
       published dimensions of each spec (`EmbedderSpec.published`) (hidden, MLP, heads, KV heads, head size,
       window; the vocabulary and tokenizer stay tiny, which changes neither the per-layer cost nor the attention
       path). One document per length, timed after a warm-up on that very input (a compiled kernel compiles
       outside the clock), for two layer counts ``l1 < l2``.
    3. The first ``encode`` of a fresh process, ours against sentence-transformers' on the tiny e5-mistral
       replica (`llm_collapse.bench.first_encode`, issue 15 item 5).
    4. Two pairs (`llm_collapse.bench.device_pairs`, issue 47): bge-multilingual-gemma2's ``fused`` softcap
       attention against ``chunked`` at the longest length (seconds, peak memory, cosine of the embeddings), and
       sentence-transformers against ``Embedder.encode`` on the e5-mistral replica with mixed-length texts (warm
       tokens per second each, and the ratio).
    5. Per model and length: per-layer seconds ``(t(l2) - t(l1)) / (l2 - l1)``, the fixed per-text cost
       ``t(l1) - l1 x per-layer`` (tokenising, embedding, pooling), full depth ``fixed + layers x per-layer``, set
       beside `llm_collapse.cost.estimate.text_cost` (the counting estimate at its default assumptions), and the
       peak of ``torch.cuda.max_memory_allocated`` during the ``l2`` forward.

Decisions
    - Replicas are written to a temporary folder and loaded through ``load_embedder`` like any checkpoint, so the
      timed path is the package's real one (spec, attention choice, pooling).
    - ``quick=True`` builds the tiny replicas (the builders' own sizes) and skips the tests: the CPU test of this
      module, and a smoke run on a machine without CUDA (``--device-check --quick``).
    - A failure of one model is recorded in its row and the others still run; the JSON says which.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llm_collapse.bench.device_replicas import (
    MAX_POSITIONS,
    error_status,
    release,
    replica_fields,
    synthetic_document,
    time_forward,
)
from llm_collapse.errors import UserError

logger = logging.getLogger("llm_collapse.bench")

__all__ = ["DeviceCheckConfig", "fit_layer_cost", "run_device_check"]

REPLICAS: dict[str, str] = {
    # registry name -> llm_collapse.testing builder (the published dims are the spec's: `EmbedderSpec.published`)
    "mistral": "save_tiny_e5_mistral",
    "nv-embed": "save_tiny_nv_embed",
    "bge-gemma2": "save_tiny_bge_gemma2",
}


@dataclass(frozen=True)
class DeviceCheckConfig:
    models: tuple[str, ...] = tuple(REPLICAS)
    lengths: tuple[int, ...] = (512, 4096, 16384, 32768)
    layers: tuple[int, int] = (1, 3)
    device: str = "cuda"
    dtype: str = "bf16"
    quick: bool = False  # tiny replicas, no pytest (the CPU test; a smoke run without a GPU)
    run_tests: bool = True
    out: Path = Path("reports/bench")

    def check(self) -> DeviceCheckConfig:
        unknown = [m for m in self.models if m not in REPLICAS]
        if unknown:
            raise UserError(f"--device-check: no replica for {unknown}; the check covers {sorted(REPLICAS)}")
        l1, l2 = self.layers
        if not 1 <= l1 < l2:
            raise UserError(f"--device-check: layer counts must be 1 <= l1 < l2, got {self.layers}")
        if not self.lengths or min(self.lengths) < 8 or max(self.lengths) > MAX_POSITIONS:
            raise UserError(f"--device-check: lengths must lie in 8..{MAX_POSITIONS}, got {self.lengths}")
        from llm_collapse.run.checks import valid_device
        from llm_collapse.utils.paths import check_writable_dir

        if not valid_device(self.device) or self.device == "auto":
            raise UserError(
                f"--device-check: unknown --device {self.device[:40]!r}; allowed: cpu, cuda, cuda:N or mps"
            )
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                fix = (
                    f"drop --device {self.device} to run the quick check on this machine's CPU"
                    if self.quick
                    else "add --quick for the tiny-replica smoke run on this machine"
                )
                raise UserError(
                    f"--device-check needs a CUDA GPU (torch.cuda.is_available() is False); {fix}"
                )
        if self.device == "mps":
            import torch

            if not torch.backends.mps.is_available():
                raise UserError("--device-check: --device mps, but this machine has no MPS device")
        check_writable_dir(self.out, what="--out")  # before minutes of checks, not after them
        return self


def fit_layer_cost(l1: int, t1: float, l2: int, t2: float, layers: int) -> dict:
    """Per-layer and fixed seconds from two depths, extrapolated to ``layers``."""
    per_layer = (t2 - t1) / (l2 - l1)
    fixed = t1 - l1 * per_layer
    return {"per_layer_s": per_layer, "fixed_s": fixed, "full_depth_s": fixed + layers * per_layer}


def _model_rows(model: str, config: DeviceCheckConfig, tmp: Path) -> list[dict]:
    import llm_collapse as lc
    from llm_collapse.cost.estimate import Assumptions, model_for, text_cost
    from llm_collapse.testing import checkpoints

    builder = getattr(checkpoints, REPLICAS[model])
    timings: dict[int, dict[int, tuple[float, int | None]]] = {}
    attention = None
    for depth in config.layers:
        folder = builder(tmp / f"{model}-{depth}", **replica_fields(model, depth, quick=config.quick))
        embedder = lc.load_embedder(
            model, path=folder, dtype=config.dtype, device=config.device, max_length=max(config.lengths) + 8
        )
        attention = embedder.describe().get("attn_implementation")
        special = len(embedder.tokenize([""])[0])
        timings[depth] = {}
        for length in config.lengths:
            text = synthetic_document(embedder.tokenizer, length - special)
            timings[depth][length] = time_forward(embedder, text, config.device)[:2]
            logger.info("%s (%d layers) @ %d: %.3f s", model, depth, length, timings[depth][length][0])
        del embedder
        release(config.device)
    l1, l2 = config.layers
    published = model_for(model).dims
    rows = []
    for length in config.lengths:
        (t1, _), (t2, peak) = timings[l1][length], timings[l2][length]
        fit = fit_layer_cost(l1, t1, l2, t2, published.layers)
        estimate_s = None if config.quick else text_cost(model_for(model), length, Assumptions()).seconds
        rows.append(
            {
                "model": model,
                "length": length,
                "attention": attention,
                "seconds": {str(l1): t1, str(l2): t2},
                **fit,
                "layers_published": published.layers,
                "estimate_s": estimate_s,
                "peak_allocated_bytes": peak,
                "status": "ok",
            }
        )
    return rows


def _gpu_tests() -> dict:
    """``pytest -m gpu``: exit code and the summary line."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    return {
        "command": " ".join(command[2:]),
        "exit_code": done.returncode,
        "summary": lines[-1] if lines else "",
    }


def _device_name(device: str) -> str:
    import platform

    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def run_device_check(config: DeviceCheckConfig, *, command: str = "") -> dict:
    """Runs the check and writes ``device_check.json`` into ``config.out``; returns what it wrote."""
    import torch
    import transformers

    from llm_collapse.utils.files import write_json

    config = config.check()
    start = time.perf_counter()
    result: dict = {
        "command": command,
        "device": _device_name(config.device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": config.dtype,
        "layers": list(config.layers),
        "quick": config.quick,
        "replicas": "tiny (builders' sizes)" if config.quick else "published widths, few layers",
    }
    if config.run_tests and not config.quick:
        result["gpu_tests"] = _gpu_tests()
        logger.info("gpu tests: %s", result["gpu_tests"]["summary"])
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="llm-collapse-device-check-") as tmp:
        from llm_collapse.bench.first_encode import first_encode_rows
        from llm_collapse.testing.checkpoints import save_tiny_e5_mistral

        result["first_encode"] = first_encode_rows(str(save_tiny_e5_mistral(Path(tmp) / "e5")), config.device)
        for model in config.models:
            try:
                rows += _model_rows(model, config, Path(tmp))
            except (RuntimeError, ValueError, OSError) as err:  # recorded; the other models still run
                logger.warning("%s: %s", model, err)
                rows.append({"model": model, "status": error_status(err)})
        from llm_collapse.bench.device_pairs import softcap_paths, st_against_encode

        if "bge-gemma2" in config.models:
            result["softcap_paths"] = softcap_paths(config, Path(tmp))
        if "mistral" in config.models:
            result["st_against_encode"] = st_against_encode(config, Path(tmp))
    result["rows"] = rows
    result["wall_s"] = time.perf_counter() - start
    write_json(result, Path(config.out) / "device_check.json")
    return result


def lengths_from(values: Sequence[int] | None, quick: bool) -> tuple[int, ...]:
    """The lengths to time: given, else 64/128 when quick, else the check's default."""
    if values:
        return tuple(values)
    return (64, 128) if quick else DeviceCheckConfig.lengths
