"""The engine process: holds one vLLM ``LLM`` at a time and answers the parent's `Engine` over a socketpair.

Started by `llm_collapse.backends.vllm.engine.Engine` as ``python -c "from llm_collapse.backends.vllm.worker
import serve; serve()"``, not ``-m``: run as ``__main__`` this module would be loaded a second time through its
package, and the functions it ships to vLLM's workers (``LLM.apply_model``) would be ``__main__`` names. The socket's
file descriptor comes in ``FD_ENV``. Requests: ``start`` (build an ``LLM``, shutting the previous one down first, so
a restart keeps this process and its imports), ``embed``, ``scale``, ``close``. Errors go back as one text; the
process leaves with ``os._exit`` after shutting its engine down, skipping the interpreter teardown where vLLM
sometimes aborts (rc 134).

Pooling is ours, over our pool mask: ``token_embed`` (``ALL`` token states, no normalisation) averaged over the
pool span in fp32 for ``mean``, which is exact for any span (gemma3's skip-bos, echo's second copy), unlike vLLM's
``MEAN`` pooler, which averages every token; ``embed`` (``LAST``) on a prompt the parent already cut after the
pooled position.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import traceback

import numpy as np
import torch

FD_ENV = "LLM_COLLAPSE_VLLM_FD"
"""Environment variable naming the engine process's end of the socketpair (a file descriptor)."""

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _set_attention_scales(model, factors: dict) -> list[tuple[str, int | None, float, float | None]]:
    """Runs in each vLLM worker (``LLM.apply_model``): sets every attention layer's ``impl.scale`` (and a
    non-zero ``logits_soft_cap``) to its original value times the factor for its layer."""
    changed = []
    for name, module in model.named_modules():
        impl = getattr(module, "impl", None)
        if impl is None or not isinstance(getattr(impl, "scale", None), float):
            continue
        if not hasattr(impl, "_llm_collapse_original"):
            impl._llm_collapse_original = (impl.scale, getattr(impl, "logits_soft_cap", None))
        scale, cap = impl._llm_collapse_original
        match = _LAYER.search(name)
        layer = int(match.group(1)) if match else None
        f_scale, f_cap = factors.get(layer, (1.0, 1.0))
        impl.scale = scale * f_scale
        if cap:
            impl.logits_soft_cap = cap * f_cap
        changed.append((name, layer, impl.scale, impl.logits_soft_cap if cap else None))
    return changed


def _build_llm(args: dict):
    from vllm import LLM
    from vllm.config import PoolerConfig

    args = dict(args)
    args["pooler_config"] = PoolerConfig(**args["pooler_config"])
    return LLM(**args)


def _embed(llm, *, prompts: list[list[int]], masks: list[list[int]], pooling: str, task: str) -> np.ndarray:
    from vllm.pooling_params import PoolingParams

    outputs = llm.encode(
        [{"prompt_token_ids": p} for p in prompts],
        pooling_task=task,
        pooling_params=PoolingParams(use_activation=False),  # raw states: no normalisation
        use_tqdm=False,
    )
    rows = []
    for output, mask in zip(outputs, masks, strict=True):
        data = torch.as_tensor(output.outputs.data).float()
        if task == "embed":  # LAST over the prompt already cut after the pooled position
            rows.append(data.reshape(-1))
        elif pooling == "last":
            rows.append(data[max((i for i, m in enumerate(mask) if m), default=0)])
        else:
            weights = torch.tensor(mask, dtype=torch.float32)
            rows.append((weights @ data) / weights.sum().clamp(min=1.0))
    return torch.stack(rows).numpy().astype(np.float32, copy=False)


def _error_text(err: BaseException) -> str:
    frames = traceback.format_exception(type(err), err, err.__traceback__)
    return f"{type(err).__name__}: {err}\n" + "".join(frames[-3:]).rstrip()


def serve() -> None:
    """Entry point of the engine process: answer start / embed / scale requests until told to close."""
    import functools
    import gc
    from multiprocessing.connection import Connection

    conn = Connection(int(os.environ.pop(FD_ENV)))
    llm = None
    try:
        while True:
            try:
                kind, payload = conn.recv()
            except EOFError:
                break
            if kind == "close":
                break
            try:
                if kind == "start":
                    if llm is not None:
                        _stop(llm)
                        llm = None
                        gc.collect()
                    llm = _build_llm(payload)
                    from vllm.platforms import current_platform

                    result = {"platform": current_platform.device_type}
                elif llm is None:
                    raise RuntimeError("no engine is running")
                elif kind == "embed":
                    result = _embed(llm, **payload)
                elif kind == "scale":
                    results = llm.apply_model(
                        functools.partial(_set_attention_scales, factors=payload["factors"])
                    )
                    result = results[0]
                else:
                    raise ValueError(f"unknown request {kind!r}")
            except Exception as err:  # reported to the caller, who decides whether to go on
                conn.send(("error", _error_text(err)))
            else:
                conn.send(("ok", result))
    finally:
        if llm is not None:
            _stop(llm)
        with contextlib.suppress(Exception):
            conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip interpreter teardown, where vLLM sometimes aborts (rc 134)


def _stop(llm) -> None:
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()
