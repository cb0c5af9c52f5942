"""The first ``encode`` of a fresh process, ours against sentence-transformers' (issue 15, item 5).

``python -m llm_collapse.bench.first_encode SIDE FOLDER DEVICE`` loads the checkpoint in ``FOLDER`` (a tiny
replica: nothing is downloaded) with our ``load_embedder`` (``SIDE=ours``) or ``SentenceTransformer``
(``SIDE=st``, its default mean pooling) and prints one JSON line: load, first-encode and warm-encode seconds of
the same 64 mixed-length texts (bf16 on CUDA, fp32 on the CPU). Each side runs in its own process, so CUDA initialisation, kernel selection and
lazy imports land in the first call exactly as they do for a user; `first_encode_rows` runs both and is called by
the device check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from llm_collapse.cost.timing import sync_device

__all__ = ["TEXTS", "first_encode_rows", "measure"]

TEXTS = [("the grass is green and the sky is blue " * (i % 40 + 1)).strip() for i in range(64)]


def measure(side: str, folder: str, device: str) -> dict:
    """Load, first and warm encode seconds of one side in this process."""
    cuda = device.startswith("cuda")
    start = time.perf_counter()
    if side == "ours":
        import llm_collapse as lc

        model = lc.load_embedder("mistral", path=folder, device=device, dtype="bf16" if cuda else "fp32")

        def encode():
            return model.encode(TEXTS, show_progress_bar=False)

    else:
        import torch
        from sentence_transformers import SentenceTransformer

        dtype = torch.bfloat16 if cuda else torch.float32
        model = SentenceTransformer(folder, device=device, model_kwargs={"torch_dtype": dtype})

        def encode():
            return model.encode(TEXTS, batch_size=32, show_progress_bar=False)

    loaded = time.perf_counter()
    encode()
    sync_device(device)
    first = time.perf_counter()
    encode()
    sync_device(device)
    warm = time.perf_counter()
    return {"side": side, "load_s": loaded - start, "first_s": first - loaded, "warm_s": warm - first}


def first_encode_rows(folder: str, device: str, timeout: float = 300) -> list[dict]:
    """Both sides, each in a fresh process; a side that fails gets a status line instead of timings."""
    rows = []
    for side in ("ours", "st"):
        command = [sys.executable, "-m", "llm_collapse.bench.first_encode", side, folder, device]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            rows.append({"side": side, "status": f"timed out after {timeout:.0f} s"})
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode == 0 and lines:
            rows.append({**json.loads(lines[-1]), "status": "ok"})
        else:
            tail = (done.stderr.strip().splitlines() or [""])[-1][:300]
            rows.append({"side": side, "status": f"error (exit {done.returncode}): {tail}"})
    return rows


if __name__ == "__main__":
    print(json.dumps(measure(*sys.argv[1:4])))  # noqa: T201  (a worker process: its stdout is the result)
