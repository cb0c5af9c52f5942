"""The vLLM backend: our token ids and pool masks in, pooled fp32 vectors out, from a vLLM engine.

The package's own tokenisation decides what is embedded: prompts, EOS policy, echo spans and pool masks are built
exactly as for ``backend="hf"`` and handed to vLLM as token ids (``{"prompt_token_ids": [...]}``), so vLLM never
tokenises, adds BOS/EOS or truncates anything. Pooling is ours too, over our pool mask. Vectors come back
unnormalised; `Embedder` L2-normalises them as it does for ``hf``.

Split along the process boundary: `install` (is vLLM here), `plan` (interventions -> engine settings), `backend`
(`VLLMBackend`, the parent side: engine arguments, KV-cache sizing, environment), `engine` (the parent's end of the
engine process), `worker` (the engine process itself).
"""

from __future__ import annotations

from llm_collapse.backends.vllm.backend import CPU_HEAD_SIZES, VLLMBackend
from llm_collapse.backends.vllm.install import INSTALL_HINT, require_vllm, vllm_available, vllm_version
from llm_collapse.backends.vllm.plan import Plan, plan_interventions

__all__ = [
    "CPU_HEAD_SIZES",
    "INSTALL_HINT",
    "Plan",
    "VLLMBackend",
    "plan_interventions",
    "require_vllm",
    "vllm_available",
    "vllm_version",
]
